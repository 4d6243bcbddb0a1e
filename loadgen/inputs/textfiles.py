"""Reading a file the user named: its text, or one line saying why not (never a traceback)."""

from __future__ import annotations

import zlib
from pathlib import Path

from loadgen.errors import UsageError

GZIP_MAGIC = b"\x1f\x8b"
MAX_UNPACKED_BYTES = 1 << 30  # a gzip file that unpacks past 1 GiB is refused as it unpacks (a zip bomb)


def read_text(path: Path, flag: str = "", *, most: int = MAX_UNPACKED_BYTES) -> str:
    """``path`` as UTF-8 text, unpacked first where it is gzip (``.json.gz``, by its bytes, to at most
    ``most`` bytes); a missing, unreadable or binary file is a ``UsageError`` naming ``flag`` and it."""
    where = f"{flag} {path}" if flag else str(path)
    try:
        data = path.read_bytes()
        if data.startswith(GZIP_MAGIC):
            data = _gunzip(data, where, most)
        return data.decode("utf-8-sig")  # a BOM (Excel writes one into CSV) is not the first column's
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read ({exc})") from None


def logical_suffix(path: Path) -> str:
    """The suffix that names a file's format, under a ``.gz`` (``t.csv.gz`` is ``.csv``)."""
    name = path.name.lower()
    return Path(name.removesuffix(".gz")).suffix


def _gunzip(data: bytes, where: str, most: int) -> bytes:
    """The unpacked bytes, at most ``most``."""
    unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = unpack.decompress(data, most)
    except zlib.error as exc:
        raise UsageError(f"{where}: a broken gzip file ({exc})") from None
    if unpack.unconsumed_tail:
        raise UsageError(f"{where}: unpacks to more than {most:,} bytes")
    if not unpack.eof:
        raise UsageError(f"{where}: a broken gzip file (it ends before its data does)")
    return out
