"""Images in chat requests: distinct seeded PNGs, sent as OpenAI vision content parts; the simulator charges
each image's tokens to prefill and says them apart in its usage, and the level records them."""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadgen.api import Api
from loadgen.cli import app
from loadgen.engine import EngineConfig
from loadgen.errors import UsageError
from loadgen.inputs.images import ImageSource, ImageSpec, adler32_combine, read_folder
from loadgen.inputs.profile import LoadSpec, Profile, WorkloadSpec
from loadgen.lengths import Lengths
from loadgen.results import load
from loadgen.run.requests import RequestFactory, Workload
from loadgen.sim.framing import Tokenizer
from loadgen.sim.openai_app import SimOptions
from tests.virtual import run_virtual

runner = CliRunner()


def png_pixels(url: str) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a data-URL PNG, every chunk's CRC and the zlib
    checksum checked (``zlib.decompress`` refuses a wrong Adler-32)."""
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64"
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, dict[bytes, bytes]()
    while at < len(png):
        (n,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + n]
        assert struct.unpack(">I", png[at + 8 + n : at + 12 + n])[0] == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        at += 12 + n
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    return width, height, zlib.decompress(chunks[b"IDAT"])


def test_generated_images_are_valid_pngs_of_the_size_asked_and_all_distinct() -> None:
    source = ImageSource(ImageSpec(count=1, width=64, height=48), seed=3)
    images = [png_pixels(source.next()) for _ in range(20)]
    assert all((w, h) == (64, 48) and len(rows) == 48 * (1 + 64 * 3) for w, h, rows in images)
    assert len({rows for _, _, rows in images}) == 20  # every image its own bytes: no cache serves a repeat
    # the same seed gives the same images; another seed other ones
    again = ImageSource(ImageSpec(count=1, width=64, height=48), seed=3)
    assert png_pixels(again.next())[2] == images[0][2]
    assert png_pixels(ImageSource(ImageSpec(count=1, width=64, height=48), seed=4).next())[2] != images[0][2]
    assert png_pixels(ImageSource(ImageSpec(count=1, width=7, height=1), seed=0).next())[:2] == (
        7,
        1,
    )  # one row: the stored block alone


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_adler32_of_two_parts_combines_as_zlibs(first: bytes, second: bytes) -> None:
    combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])
def test_a_request_carries_its_images_as_the_apis_content_parts(api: Api) -> None:
    workload = Workload(api=api, model="m", prompt_tokens=Lengths(10), images=ImageSpec(count=2, width=8, height=8))
    body = json.loads(RequestFactory(workload, seed=0).next().body)
    field = "messages" if api is Api.CHAT else "input"
    content = body[field][-1]["content"]
    assert len(content[0]["text"].split()) == 10
    if api is Api.CHAT:
        assert [p["type"] for p in content] == ["text", "image_url", "image_url"]
        urls = [p["image_url"]["url"] for p in content[1:]]
    else:
        assert [p["type"] for p in content] == ["input_text", "input_image", "input_image"]
        urls = [p["image_url"] for p in content[1:]]
    assert urls[0] != urls[1] and all(png_pixels(u)[:2] == (8, 8) for u in urls)


def test_images_from_a_folder_are_sent_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0 a jpeg's head")
    (tmp_path / "notes.txt").write_text("skipped")
    source = ImageSource(ImageSpec(count=1, folder=str(tmp_path)), seed=0)
    assert source.next() == "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff\xe0 a jpeg's head").decode()


def _sparse(path: Path, size: int) -> None:
    """A file of ``size`` bytes that takes no disk (and, refused by its size, no memory)."""
    path.touch()
    os.truncate(path, size)


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (lambda d: (d / "x.png").symlink_to("/etc/passwd"), "x.png: a link out of the folder"),  # S9
        (lambda d: (d / "x.png").symlink_to("/proc/self/mem"), "x.png: a link out of the folder"),  # S7
        (lambda d: (d / "x.png").write_text("root:x:0:0"), "x.png: not a PNG image"),  # S9: text sent as image/png
        (lambda d: (d / "x.png").write_bytes(b""), "x.png: not a PNG image"),  # S9: a 0-byte .png
        (lambda d: _sparse(d / "x.png", 600 << 20), "x.png (600.0 MiB) sent 1 time a request"),  # S2, S3: unread
    ],
    ids=["link-to-a-file", "link-to-proc", "text", "empty", "600-MiB"],
)
def test_a_folder_image_that_is_not_one_is_one_line_before_its_bytes_are_held(
    tmp_path: Path, plant: Callable[[Path], object], message: str
) -> None:
    """Issue 70, S2, S7 and S9: a 4 GB .png was read whole before the cap; a link to /proc/self/mem was an
    OSError traceback; /etc/passwd linked as x.png, a text file and a 0-byte .png went out as image/png."""
    folder = tmp_path / "img"
    folder.mkdir()
    plant(folder)
    with pytest.raises(UsageError, match=re.escape(message)):
        read_folder(folder)


def test_a_folder_whose_largest_image_times_the_images_a_request_passes_the_body_cap_is_refused_unread(
    tmp_path: Path,
) -> None:
    """Issue 70, S3: a 200 MB file sent 8 times a request at 2 clients held 3.5 GB. Refused by the files' sizes
    before any is read; the same file once a request, or 8 smaller ones, pass."""
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    _sparse(folder / "big.png", 30 << 20)  # 40 MiB as base64: one a request fits, eight do not
    with pytest.raises(UsageError, match=re.escape("big.png (30.0 MiB) sent 8 times a request makes a body of 320")):
        read_folder(folder, 8)
    with pytest.raises(UsageError, match="not a PNG image"):  # once a request passes the cap: then read
        read_folder(folder, 1)
    with pytest.raises(ValueError, match="make each request's body about"):
        ImageSpec(count=64, width=2048, height=2048)
    assert ImageSpec(count=4, width=1024, height=1024).count == 4  # 4 x 4 MiB as base64: fits


def test_the_simulator_charges_each_images_tokens_to_prefill_and_the_level_records_them() -> None:
    # 1 ms of prefill a prompt token and 256 tokens an image: two images add 512 ms to an idle request's TTFT
    def run(images: ImageSpec | None) -> tuple[float, dict[str, object]]:
        sim = SimOptions(engine=EngineConfig(prefill_ms_per_token=1.0), tokenizer=Tokenizer(image_tokens=256))
        profile = Profile(
            name="vision",
            workload=WorkloadSpec(prompt_tokens=Lengths(100), output_tokens=Lengths(8), images=images),
            load=LoadSpec(levels=(1,), duration_s=None, requests=6, warmup_s=0),
        )
        results, _ = run_virtual(profile, sim)
        summary = results.levels[0].summary()
        return summary["ttft_ms"]["p50"], summary

    plain, without = run(None)
    shown, with_images = run(ImageSpec(count=2, width=64, height=64))
    assert shown - plain == pytest.approx(512, abs=2)
    assert with_images["prompt_tokens_mean"] == 100 + 512 and with_images["image_tokens_mean"] == 512
    assert "image_tokens_mean" not in without


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--images", "1", "--api", "completions"], "--images go in chat messages: --api chat (or responses)"),
        (["--images", "1", "--image-size", "512"], "--image-size 512: expected WIDTHxHEIGHT"),
        (["--images", "1", "--image-size", "9000x10"], "image sides must be from 1 to 8192"),
        (["--image-size", "64x64"], "shape the images of --images N"),
        (["--images", "1", "--images-folder", "nowhere"], "--images-folder nowhere: not a folder"),
    ],
)
def test_bad_image_flags_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["run", "--url", "sim", "--virtual-time", "--requests", "2", "--concurrency", "1",
                                 *args, "-o", str(tmp_path / "o.json")])  # fmt: skip
    assert result.exit_code == 2 and message in " ".join(result.stderr.split()), result.output


def test_a_profile_states_its_images(tmp_path: Path) -> None:
    profile = tmp_path / "v.yaml"
    profile.write_text("workload: {prompt_tokens: 20, output_tokens: 4, images: {count: 2, width: 32, height: 16}}\n"
                       "load: {levels: [1], requests: 3, warmup_s: 0}\n")  # fmt: skip
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load(out).settings.images == {"count": 2, "width": 32, "height": 16, "folder": None}
    profile.write_text("workload: {images: {count: 1, folder: nowhere}}\n")
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(out)])
    assert result.exit_code == 2 and "workload.images.folder: no such folder: nowhere" in result.stderr
