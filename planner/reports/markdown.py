"""Text from servers and files made safe for Markdown (pure).

A model id, a header or an error string comes from outside; in a ``report.md`` or a CI step
summary it must read as text, never as HTML a renderer would run or as table structure. Only a
``<`` that could open a tag, a comment or a declaration is escaped, so ``tpot_p95 <= 40`` reads
as written, in the file and where the gate prints the same table to a terminal.
"""

from __future__ import annotations

import re

_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def md_text(text: str) -> str:
    """``text`` as literal Markdown text: a tag's ``<`` escaped, table pipes escaped, on one line."""
    return _TAG_OPEN.sub("&lt;", text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
