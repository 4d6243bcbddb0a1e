"""Images for vision-language requests: generated here (seeded, no download) or read from a folder.

A vision model's prefill grows with each image's patches, and engines cache
what they have seen by the image's bytes (vLLM hashes each image for its
processor and encoder caches). So every generated image is distinct: a
request's images are PNGs that share one seeded picture and differ in their
first row of pixels, drawn per image. Encoding a 512x512 PNG takes ~20 ms,
too slow to do per request at load, so the shared rows are compressed once
and each image only adds its own row as a stored deflate block in front of
them (a deflate stream may mix stored and compressed blocks; the zlib
checksum is combined, not recomputed): about 0.1 ms an image.

Images read from a folder are sent as they are, in a seeded order, each as
often as the load needs: a server's caches may serve a repeat (the run says so).
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.errors import UsageError

MAX_SIDE = 8192  # pixels: past any vision encoder's input; a row must fit one stored deflate block (65,535 bytes)
MAX_IMAGES = 64  # per request
MAX_FOLDER_FILES = 10_000
MAX_FOLDER_BYTES = 512 * 1024 * 1024
#: a request's images as base64, at most: every request in flight holds its own body (a 200 MB file sent 8 times a
#: request at 2 clients once held 3.5 GB); OpenAI's API takes images of at most 20 MB, and most servers far less
MAX_REQUEST_IMAGE_BYTES = 64 * 1024 * 1024
MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif"}
CELL = 16  # the shared picture is random colours in CELL x CELL squares: compressible, not blank


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSpec:
    """The images each request carries: ``count`` generated ones of ``width`` x ``height``, or from ``folder``."""

    count: int = 1
    width: int = 512
    height: int = 512
    folder: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_IMAGES:
            raise ValueError(f"images per request must be from 1 to {MAX_IMAGES}, got {self.count}")
        if not (1 <= self.width <= MAX_SIDE and 1 <= self.height <= MAX_SIDE):
            raise ValueError(f"image sides must be from 1 to {MAX_SIDE} pixels, got {self.width}x{self.height}")
        if self.folder is None and (body := self.count * base64_bytes(png_bytes(self.width, self.height))) > (
            MAX_REQUEST_IMAGE_BYTES
        ):
            raise ValueError(
                f"{self.count} images of {self.width}x{self.height} make each request's body about {body >> 20} MiB; "
                f"at most {MAX_REQUEST_IMAGE_BYTES >> 20} MiB a request (fewer or smaller images)"
            )

    def describe(self) -> str:
        source = f"from {Path(self.folder).name}" if self.folder else f"{self.width}x{self.height} PNG"
        return f"{self.count} image{'s' * (self.count > 1)} {source}"


class ImageSource:
    """Data URLs for a level's requests: ``next()`` is a new image each call (generated) or the folder's next."""

    def __init__(self, spec: ImageSpec, seed: int) -> None:
        self._rng = np.random.default_rng([seed, 7])
        self._spec = spec
        if spec.folder is not None:
            self._files = read_folder(Path(spec.folder), spec.count)
            self._order = self._rng.permutation(len(self._files))
            self._next = 0
        else:
            self._png = _SharedPng(spec.width, spec.height, self._rng)

    def next(self) -> str:
        if self._spec.folder is None:
            return "data:image/png;base64," + base64.b64encode(self._png.with_first_row(self._rng)).decode()
        url = self._files[int(self._order[self._next % len(self._files)])]
        self._next += 1
        return url


def base64_bytes(n: int) -> int:
    """The length of ``n`` bytes in base64."""
    return 4 * ((n + 2) // 3)


def png_bytes(width: int, height: int) -> int:
    """A generated image's size at most: its rows stored (3 bytes a pixel and a filter byte), and the framing."""
    return height * (3 * width + 1) + 64 * (height // 20_000 + 1) + 128


def read_folder(folder: Path, count: int = 1) -> tuple[str, ...]:
    """Every image file in ``folder`` (by suffix), as data URLs, sorted by name; refused before any is read
    where ``count`` of its largest would pass ``MAX_REQUEST_IMAGE_BYTES`` a request."""
    if not folder.is_dir():
        raise UsageError(f"images folder {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in MIME and p.is_file())[: MAX_FOLDER_FILES + 1]
    if not files:
        raise UsageError(f"images folder {folder}: no image files ({', '.join(MIME)})")
    if len(files) > MAX_FOLDER_FILES:
        raise UsageError(f"images folder {folder}: more than {MAX_FOLDER_FILES:,} images; use a smaller folder")
    _check_request_bytes(folder, files, count)
    urls, total, inside = [], 0, folder.resolve()
    for path in files:
        data = _read_image(path, inside, MAX_FOLDER_BYTES - total)
        total += len(data)
        urls.append(f"data:{MIME[path.suffix.lower()]};base64,{base64.b64encode(data).decode()}")
    return tuple(urls)


def _check_request_bytes(folder: Path, files: list[Path], count: int) -> None:
    """Refuse, by the files' sizes alone, a folder whose largest image sent ``count`` times a request passes
    ``MAX_REQUEST_IMAGE_BYTES``."""
    try:
        size, largest = max((p.stat().st_size, p.name) for p in files)
    except OSError:
        return  # a file that cannot be read is named when it is read
    if (body := count * base64_bytes(size)) > MAX_REQUEST_IMAGE_BYTES:
        raise UsageError(
            f"images folder {folder}: {largest} ({size / 2**20:,.1f} MiB) sent {count} time{'s' * (count > 1)} a "
            f"request makes a body of {body / 2**20:,.0f} MiB; at most {MAX_REQUEST_IMAGE_BYTES >> 20} MiB a request "
            "(fewer --images, or smaller files)"
        )


#: the bytes each image format starts with (WebP: a RIFF container whose form, at byte 8, is WEBP)
MAGIC = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",), "image/gif": (b"GIF87a", b"GIF89a"),
         "image/webp": (b"RIFF",)}  # fmt: skip


def _read_image(path: Path, folder: Path, room: int) -> bytes:
    """One image file's bytes, read no further than ``room`` (what the folder's cap leaves): a file that
    leads out of the folder (a link), cannot be read, is larger than the room or is not the image its
    suffix says is one line naming it, before its bytes are held."""
    where = f"images folder {folder}: {path.name}"
    try:
        if not path.resolve().is_relative_to(folder):
            raise UsageError(f"{where}: a link out of the folder; give the image files themselves")
        if path.stat().st_size > room:  # refused before its bytes are read
            raise UsageError(f"images folder {folder}: more than {MAX_FOLDER_BYTES >> 20} MiB of images")
        with path.open("rb") as f:
            data = f.read(room + 1)  # a file whose size lies (a device, /proc) is still read no further
    except OSError as exc:
        raise UsageError(f"{where}: cannot read ({exc.strerror or exc})") from None
    if len(data) > room:
        raise UsageError(f"images folder {folder}: more than {MAX_FOLDER_BYTES >> 20} MiB of images")
    mime = MIME[path.suffix.lower()]
    if not data.startswith(MAGIC[mime]) or (mime == "image/webp" and data[8:12] != b"WEBP"):
        raise UsageError(f"{where}: not a {mime.removeprefix('image/').upper()} image (its first bytes say otherwise)")
    return data


class _SharedPng:
    """A seeded RGB picture whose rows after the first are compressed once; each image adds its first row."""

    def __init__(self, width: int, height: int, rng: np.random.Generator) -> None:
        cells = rng.integers(0, 256, ((height + CELL - 1) // CELL, (width + CELL - 1) // CELL, 3), dtype=np.uint8)
        pixels = np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)[:height, :width]
        rows = np.concatenate([np.zeros((height, 1), np.uint8), pixels.reshape(height, width * 3)], axis=1)
        rest = rows[1:].tobytes()  # each row: filter byte 0 (none), then its pixels
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw deflate: the stream's header and checksum are ours
        self._rest = packer.compress(rest) + packer.flush()
        self._rest_adler = zlib.adler32(rest)
        self._rest_len = len(rest)
        self._width = width
        self._head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))

    def with_first_row(self, rng: np.random.Generator) -> bytes:
        """The PNG with a first row of random pixels: a stored block in front of the shared rows' blocks."""
        row = b"\x00" + rng.integers(0, 256, self._width * 3, dtype=np.uint8).tobytes()
        if self._rest:
            stored = b"\x00" + struct.pack("<HH", len(row), len(row) ^ 0xFFFF) + row  # BFINAL 0, BTYPE 00
            body = stored + self._rest
            adler = adler32_combine(zlib.adler32(row), self._rest_adler, self._rest_len)
        else:  # a one-row image: the stored block is the last
            body = b"\x01" + struct.pack("<HH", len(row), len(row) ^ 0xFFFF) + row
            adler = zlib.adler32(row)
        stream = b"\x78\x01" + body + struct.pack(">I", adler)
        return self._head + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")


def adler32_combine(first: int, second: int, second_len: int) -> int:
    """The Adler-32 of two byte strings joined, from each one's (zlib's ``adler32_combine``)."""
    base = 65521
    a1, b1, a2, b2 = first & 0xFFFF, first >> 16, second & 0xFFFF, second >> 16
    rem = second_len % base
    a = (a1 + a2 - 1) % base
    b = (rem * a1 + b1 + b2 - rem) % base
    return (b << 16) | a


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
