"""Text from servers and files made safe for Markdown (pure).

A model id, a header or an error string comes from outside; in a ``report.md`` or a CI step
summary it must read as text, never as HTML a renderer would run or as table structure.
"""

from __future__ import annotations

import html


def md_text(text: str) -> str:
    """``text`` as literal Markdown text: HTML escaped, table pipes escaped, on one line."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
