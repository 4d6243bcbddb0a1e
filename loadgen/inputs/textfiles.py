"""Reading a file the user named: its text, or one line saying why not (never a traceback)."""

from __future__ import annotations

import codecs
import zlib
from pathlib import Path

from loadgen.errors import UsageError

GZIP_MAGIC = b"\x1f\x8b"
MAX_UNPACKED_BYTES = 1 << 30  # a gzip file that unpacks past 1 GiB is refused as it unpacks (a zip bomb)
# ... and past this many times its own size (and 64 MiB): JSON and CSV pack 5-20x, a bomb 1000x, so a
# 1 MB file costs at most ~100 MB before it is refused, not the 2 GB a 1 GiB cap alone let it cost
MAX_PACK_RATIO = 100
PACK_RATIO_FLOOR = 64 << 20
UNPACK_PIECE = 1 << 20  # unpacked and decoded a MiB at a time: the bytes are never held beside their text


def read_text(path: Path, flag: str = "", *, most: int = MAX_UNPACKED_BYTES) -> str:
    """``path`` as UTF-8 text, unpacked first where it is gzip (``.json.gz``, by its bytes, to at most
    ``most`` bytes); a missing, unreadable or binary file is a ``UsageError`` naming ``flag`` and it."""
    where = f"{flag} {path}" if flag else str(path)
    try:
        data = path.read_bytes()
        if data.startswith(GZIP_MAGIC):
            return _gunzip(data, where, min(most, max(PACK_RATIO_FLOOR, MAX_PACK_RATIO * len(data))))
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


def _gunzip(data: bytes, where: str, most: int) -> str:
    """The unpacked text, of at most ``most`` bytes: unpacked and decoded a piece at a time, so a bomb
    costs no more than ``most`` before it is refused, and the bytes are never held whole beside the text."""
    unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
    decode = codecs.getincrementaldecoder("utf-8-sig")()
    pieces: list[str] = []
    size = 0
    try:
        piece = unpack.decompress(data, UNPACK_PIECE)
        while piece:
            size += len(piece)
            if size > most:
                raise UsageError(f"{where}: unpacks to more than {most:,} bytes (a gzip bomb? at most "
                                 f"{MAX_PACK_RATIO}x its size or {PACK_RATIO_FLOOR >> 20} MiB is read)")  # fmt: skip
            try:
                pieces.append(decode.decode(piece))
            except UnicodeDecodeError as exc:
                raise UsageError(
                    f"{where}: not UTF-8 text ({exc.reason} at byte {size - len(piece) + exc.start})"
                ) from None
            piece = unpack.decompress(unpack.unconsumed_tail, UNPACK_PIECE)
        pieces.append(decode.decode(b"", final=True))
    except zlib.error as exc:
        raise UsageError(f"{where}: a broken gzip file ({exc})") from None
    if not unpack.eof:
        raise UsageError(f"{where}: a broken gzip file (it ends before its data does)")
    return "".join(pieces)
