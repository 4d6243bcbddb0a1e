"""The raw records file (``--records``): each line reads back as the record it was written from."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.errors import ErrorKind
from loadgen.load import Load
from loadgen.wire.records import RecordsWriter, RequestRecord


def test_a_line_reads_back_as_its_record_to_the_last_bit_of_every_timestamp(tmp_path: Path) -> None:
    times = (19714.732953473, 19714.742318699, 1e-05, 123456789.00000001, 0.1 + 0.2)
    record = RequestRecord(
        t_intended=19714.681362406, t_slot=None, t_sent=19714.682040169, t_first=times[0], t_last=times[-1], t_done=19716.0026, chunk_times=times, chunk_tokens=(1, 2, 1, 1, 3),
        output_tokens=8, output_tokens_estimated=False, prompt_tokens=31, error=None, http_status=200, response_id="cmpl-é✓", turn=2,
    )  # fmt: skip
    failed = RequestRecord(
        t_intended=1.5,
        t_slot=1.25,
        t_sent=1.75,
        t_first=None,
        t_last=None,
        t_done=2.0,
        chunk_times=(),
        chunk_tokens=None,
        output_tokens=None,
        output_tokens_estimated=True,
        prompt_tokens=None,
        error=ErrorKind.HTTP_5XX,
        http_status=503,
        error_detail="overloaded",
    )
    path = tmp_path / "records.jsonl"
    writer = RecordsWriter(path)
    writer.set_level(Load(kind="concurrency", value=4))
    writer.write(record)
    writer.write(failed)
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first.pop("load") == second.pop("load") == Load(kind="concurrency", value=4).label
    assert first == {**{name: getattr(record, name) for name in RecordsWriter.FIELDS}, "chunk_times": list(times),
                     "chunk_tokens": [1, 2, 1, 1, 3]}  # fmt: skip
    assert second["error"] == "http_5xx" and second["error_detail"] == "overloaded" and second["chunk_times"] == []


def test_text_the_fast_encoder_refuses_is_still_written(tmp_path: Path) -> None:
    """A hostile server's id with a lone surrogate (``"\\ud800"`` read by a lenient JSON parser): escaped, not lost."""
    record = RequestRecord(
        t_intended=0.0,
        t_slot=None,
        t_sent=0.0,
        t_first=0.5,
        t_last=0.5,
        t_done=1.0,
        chunk_times=(0.5,),
        chunk_tokens=None,
        output_tokens=1,
        output_tokens_estimated=False,
        prompt_tokens=None,
        error=None,
        http_status=200,
        response_id="id-\ud800",
    )
    path = tmp_path / "records.jsonl"
    writer = RecordsWriter(path)
    writer.write(record)
    writer.write(record)
    writer.close()
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [row["response_id"] for row in rows] == ["id-\ud800", "id-\ud800"] and writer.failed is None
