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
    known = {f for s in secrets for f in forms(s) if len(f) >= MIN_SECRET_CHARS}
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text
