"""Scrubbing known secrets from text a server supplied (pure).

A server may echo the API key in an error (``Incorrect API key provided:
sk-...``). Every such text is scrubbed of every secret the tool knows (the
key, header values, URL credentials and query values) before it is stored
or printed.
"""

from __future__ import annotations

import base64
import binascii

MIN_SECRET_CHARS = 4  # shorter values ("1", "on") would redact ordinary words


def forms(secret: str) -> tuple[str, ...]:
    """A secret in every encoding it travels in: itself; the credential after an auth scheme
    (``Bearer sk-...``); and a Basic credential both base64-encoded and decoded (``user:pass``)."""
    out = [secret]
    scheme, _, credential = secret.partition(" ")
    if credential and scheme.lower() in ("bearer", "basic", "token"):
        out.append(credential.strip())
    for text in list(out):
        try:
            decoded = base64.b64decode(text, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if ":" in decoded:
            out += [decoded, *decoded.split(":", 1)]
    return tuple(out)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every known secret, in every form it travels in, replaced by ``<redacted>``
    (longest first, so none leaks a part)."""
    known = sorted({f for s in secrets for f in forms(s) if len(f) >= MIN_SECRET_CHARS}, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, "<redacted>")
    return _without_cut_tail(text, known)


def _without_cut_tail(text: str, known: list[str]) -> str:
    """``text`` less a tail that is the head of a secret: what a server's text cut to a length (an error to
    200 characters, an id to 128) leaves of a secret that straddled the cut, which the whole secret no
    longer matches. The wire cuts before it knows the secrets; every cut keeps the text's head, so what
    is left of a straddling secret is always the cut text's tail."""
    for secret in known:
        start = len(text) - len(secret) + 1  # a tail shorter than the secret: the whole one was replaced above
        while (start := text.find(secret[:MIN_SECRET_CHARS], max(start, 0))) != -1:
            if secret.startswith(text[start:]):
                return text[:start] + "<redacted>"
            start += 1
    return text
