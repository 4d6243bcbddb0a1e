"""Scrubbing known secrets from text a server supplied (pure).

A server may echo the API key in an error (``Incorrect API key provided:
sk-...``). Every such text is scrubbed of every secret the tool knows (the
key, header values, URL credentials and query values) before it is stored
or printed.
"""

from __future__ import annotations

MIN_SECRET_CHARS = 4  # shorter values ("1", "on") would redact ordinary words


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every known secret replaced by ``<redacted>`` (longest first, so none leaks a part)."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text
