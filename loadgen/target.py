"""Where the load goes: URL handling without leaking credentials, and the preflight checks.

Preflight turns the common ways a target is unusable (nothing listening, a
wrong path, a missing key, not an OpenAI server) into one clear line before
any load is sent.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

import httpx

from loadgen.errors import EndpointError, UsageError


def normalize_base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a path given is kept. Always ends in ``/``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {redact_url(url)!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path + "/", parts.query, ""))


def redact_url(url: str) -> str:
    """The URL without user info, query or fragment: safe to store and print."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_headers(specs: list[str]) -> dict[str, str]:
    """``K:V`` strings (repeatable ``--header``) into a dict."""
    headers: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {name.strip() or spec[:20]!r}: expected NAME:VALUE")
        headers[name.strip()] = value.strip()
    return headers


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Header names are kept, every value hidden: any of them may be a secret."""
    return {name: "<redacted>" for name in headers}


async def resolve_model(http: httpx.AsyncClient, shown_url: str, model: str | None) -> str:
    """Check ``/models`` answers like an OpenAI server; return ``model`` or the first id served."""
    try:
        response = await http.get("models", timeout=30.0)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        # the aiohttp transport reports a refused connection as ConnectTimeout
        raise EndpointError(f"cannot connect to {shown_url}: is the server running?") from None
    except httpx.TimeoutException:
        raise EndpointError(f"{shown_url}: no answer from /models within 30 s") from None
    except httpx.HTTPError as exc:
        raise EndpointError(f"{shown_url}: request to /models failed ({type(exc).__name__})") from None
    status = response.status_code
    if status in (401, 403):
        raise EndpointError(f"{shown_url}: /models answered {status}: check --api-key or the auth --header")
    if status == 404:
        raise EndpointError(f"{shown_url}: /models not found (404): the base URL usually ends in /v1")
    if status >= 400:
        raise EndpointError(f"{shown_url}: /models answered HTTP {status}")
    try:
        ids = [m["id"] for m in response.json()["data"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise EndpointError(
            f"{shown_url}: /models did not return an OpenAI model list: not an OpenAI-compatible server?"
        ) from None
    if model:
        return model  # servers behind gateways may list fewer models than they route
    if not ids:
        raise EndpointError(f"{shown_url}: /models lists no model; pass --model")
    return str(ids[0])
