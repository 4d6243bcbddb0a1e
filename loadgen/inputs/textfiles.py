"""Reading a file the user named: its text, or one line saying why not (never a traceback)."""

from __future__ import annotations

from pathlib import Path

from loadgen.errors import UsageError


def read_text(path: Path, flag: str = "") -> str:
    """``path`` as UTF-8 text; a missing, unreadable or binary file is a ``UsageError`` naming ``flag`` and it."""
    where = f"{flag} {path}" if flag else str(path)
    try:
        return path.read_text(encoding="utf-8-sig")  # a BOM (Excel writes one into CSV) is not the first column's
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read ({exc})") from None
