"""No secret cut in half reaches an artefact: the wire cuts a server's text before the scrub sees it (issue 70,
S4), so the scrub also takes a cut text's tail that is a secret's head."""

from __future__ import annotations

import json

import pytest

from loadgen.api import Api
from loadgen.wire.records import RecordsWriter, RequestRecord
from loadgen.wire.secrets import scrub
from loadgen.wire.sse import ID_CHARS, parse_chunk

KEY = "sk-proj-Zq8xW3vT9mLk2Rb7Yc4Nd6Hf1Gj5Pa0Es"  # 41 characters


@pytest.mark.parametrize("at", [160, 178, 195])  # the key's first 40, 22 and 5 characters before the cut
def test_a_key_straddling_the_cut_of_an_in_stream_error_leaves_nothing_of_itself(at: int) -> None:
    message = "x" * at + KEY + " was refused"
    chunk = parse_chunk(json.dumps({"error": {"message": message}}), Api.CHAT)
    assert chunk.error is not None and len(chunk.error) == 200 and KEY not in chunk.error  # cut mid-key
    said = scrub(chunk.error, (KEY,))
    assert said.endswith("<redacted>") and not any(KEY[:n] in said for n in range(4, len(KEY)))


def test_a_key_straddling_the_cut_of_a_chunk_id_reaches_no_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rid = "chatcmpl-" + "y" * (ID_CHARS - 9 - 20) + KEY
    chunk = parse_chunk(json.dumps({"id": rid, "choices": [{"delta": {"content": "a"}}]}), Api.CHAT)
    assert chunk.id is not None and len(chunk.id) == ID_CHARS
    record = RequestRecord(
        t_intended=0.0, t_slot=None, t_sent=0.0, t_first=0.1, t_last=0.1, t_done=0.2, chunk_times=(0.1,),
        chunk_tokens=None, output_tokens=1, output_tokens_estimated=False, prompt_tokens=3, error=None,
        http_status=200, response_id=chunk.id,
    )  # fmt: skip
    path = tmp_path / "records.jsonl"
    writer = RecordsWriter(path, (KEY,))
    writer.write(record)
    writer.close()
    text = path.read_text()
    assert "<redacted>" in text and KEY[:8] not in text


def test_text_that_merely_ends_like_a_short_word_is_left_alone() -> None:
    assert scrub("status: sk", (KEY,)) == "status: sk"  # under four characters of the key: an ordinary word
    assert scrub("all good", (KEY,)) == "all good"
    assert scrub(f"{KEY} and {KEY[:10]}", (KEY,)) == "<redacted> and <redacted>"
