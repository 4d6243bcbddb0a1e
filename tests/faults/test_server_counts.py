"""A server's token counts are bounded before they are believed (issue 70, S1 and S5)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from loadgen.errors import ErrorKind
from loadgen.results import load
from loadgen.run.believable import believable
from loadgen.wire.records import RequestRecord
from tests.faults.rawserver import SSE_HEAD, chunked, read_request

HUGE = 10**18


def stream(*running: int, final: int) -> bytes:
    """A chat stream with continuous usage: one token event per running count, then the final usage."""
    events = b"".join(
        b'data: {"choices":[{"index":0,"delta":{"content":"w "}}],"usage":{"completion_tokens":%d}}\n\n' % n
        for n in running
    )
    events += b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % final
    head = SSE_HEAD.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n")  # each answer on its own connection
    return head + chunked(events) + b"0\r\n\r\n"


MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'


async def run_against(reply: bytes, tmp_path: Path) -> tuple[int, str, Path, Path]:
    """``loadgen run`` (a process of its own) against a server that lists one model and answers every
    completion with ``reply``."""
    out, records = tmp_path / "r.json", tmp_path / "records.jsonl"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await read_request(reader)
            if head.startswith(b"GET") and b"/models" in head.split(b"\r\n", 1)[0]:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (len(MODELS), MODELS))  # fmt: skip
            else:
                writer.write(reply)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadgen", "run", "--url", url, "--model", "m", "--concurrency", "2",
            "--requests", "6", "--max-tokens", "8", "--scrape-metrics", "off", "--quiet",
            "--records", str(records), "-o", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, err.decode(), out, records


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (stream(1, 2, HUGE, final=HUGE), f"counted {HUGE} output tokens where max_tokens was 8"),  # S1
        (stream(1, 2, 3, final=HUGE), f"usage said {HUGE} output tokens where max_tokens was 8"),  # S5
        (stream(5, 4, 3, 2, 1, 0, 1, 2, final=2), "running output token count went backwards"),  # S5
    ],
    ids=["a-chunk-of-1e18-tokens", "final-usage-1e18", "usage-going-backwards"],
)
async def test_counts_no_request_could_produce_are_a_malformed_stream(reply: bytes, said: str, tmp_path: Path) -> None:
    """Before: a chunk of 10^18 tokens expanded into that many ITL samples (MemoryError, no results file);
    a final usage of 10^18 read as 4.5x10^19 tok/s; a count going backwards gave a wrong TPOT unsaid."""
    code, err, out, records = await run_against(reply, tmp_path)
    assert code == 3 and "Traceback" not in err, err  # every request failed: an untrusted level, results kept
    level = load(out).levels[0]
    assert level.completed == 0 and level.errors == {ErrorKind.MALFORMED_CHUNK: 6}
    assert level.output_tokens == 0 and level.window_output_tokens == 0
    details = {json.loads(line)["error_detail"] for line in records.read_text().splitlines()}
    assert len(details) == 1 and said in details.pop()


@pytest.mark.asyncio
async def test_counts_within_the_ask_are_believed(tmp_path: Path) -> None:
    code, err, out, _ = await run_against(stream(1, 2, 4, 8, final=8), tmp_path)
    assert code == 0, err
    level = load(out).levels[0]
    assert level.completed == 6 and not level.errors and level.output_tokens == 48


def test_a_request_that_asked_no_bound_is_left_as_it_came() -> None:
    record = RequestRecord(
        t_intended=0.0, t_slot=None, t_sent=0.0, t_first=0.1, t_last=0.2, t_done=0.3, chunk_times=(0.1, 0.2),
        chunk_tokens=(1, HUGE), output_tokens=HUGE + 1, output_tokens_estimated=False, prompt_tokens=3,
        error=None, http_status=200,
    )  # fmt: skip
    assert believable(record, 0) is record  # an --extra-body that set no count we can read
    assert believable(record, 8).error == ErrorKind.MALFORMED_CHUNK
