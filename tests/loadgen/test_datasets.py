"""Prompt datasets: ShareGPT JSON and OpenAI chat JSONL, sampled from the seed, answers' lengths kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.api import Api
from loadgen.cli import app
from loadgen.errors import UsageError
from loadgen.inputs.workload import DatasetFormat, load_dataset
from loadgen.results import load
from loadgen.run.requests import RequestFactory, Workload
from loadgen.sim.server import SimProcess


def sharegpt(path: Path, n: int = 12) -> Path:
    doc = [
        {"id": str(i), "conversations": [{"from": "human", "value": " ".join(["ask"] * (10 + i))},
                                         {"from": "gpt", "value": " ".join(["answer"] * (4 + i))},
                                         {"from": "human", "value": "and then?"}]}
        for i in range(n)
    ]  # fmt: skip
    doc += [{"id": "no-answer", "conversations": [{"from": "human", "value": "hi"}]}, {"id": "empty"}]
    path.write_text(json.dumps(doc))
    return path


def test_sharegpt_takes_the_first_human_turn_and_the_answer_after_it(tmp_path: Path) -> None:
    entries = load_dataset(sharegpt(tmp_path / "s.json"))
    assert len(entries) == 12  # the conversation without an answer and the empty one are skipped
    assert entries[0].prompt == " ".join(["ask"] * 10) and entries[0].answer_words == 4


def test_chat_jsonl_sends_the_messages_before_the_assistants_answer(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"},
                      {"role": "assistant", "content": "four five"}]},
        {"messages": [{"role": "user", "content": "no answer recorded"}]},
        {"prompt": "plain prompt", "completion": "a b c"},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(line) for line in lines))
    first, second, third = load_dataset(path)
    assert first.messages is not None and [m["role"] for m in first.messages] == ["system", "user"]
    assert (first.answer_words, second.answer_words, third.answer_words) == (2, None, 3)
    with pytest.raises(UsageError, match="not valid ShareGPT JSON"):
        load_dataset(path, DatasetFormat.SHAREGPT)


def test_the_dataset_order_comes_from_the_seed(tmp_path: Path) -> None:
    entries = load_dataset(sharegpt(tmp_path / "s.json"))
    workload = Workload(api=Api.COMPLETIONS, model="m", dataset=entries, output_from_dataset=True)

    def prompts(seed: int) -> list[str]:
        factory = RequestFactory(workload, seed)
        return [json.loads(factory.next().body)["prompt"] for _ in range(12)]

    assert prompts(1) == prompts(1) and prompts(1) != prompts(2)
    assert sorted(prompts(1)) == sorted(e.prompt or "" for e in entries)  # each visited once per pass


def test_a_sharegpt_run_sends_its_prompts_and_answers_their_recorded_lengths(tmp_path: Path) -> None:
    # The simulator counts one token a word, so usage must equal the dataset's word counts.
    data = sharegpt(tmp_path / "s.json")
    out = tmp_path / "r.json"
    with SimProcess() as sim:
        result = CliRunner().invoke(app, ["run", "--url", sim.base_url, "--api", "completions", "--concurrency", "2",
                                          "--requests", "12", "--dataset", str(data), "--output-from-dataset",
                                          "-o", str(out), "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    level = load(out).levels[0]
    summary = level.summary()
    assert summary["prompt_tokens_mean"] == pytest.approx(10 + 5.5, abs=0.01)  # ask x (10..21)
    assert summary["output_tokens_mean"] == pytest.approx(4 + 5.5, abs=0.01)  # answer x (4..15)
    assert load(out).settings.output_from_dataset is True and "stopped early" not in result.stderr


def test_a_profile_reads_the_dataset_format_and_answer_lengths(tmp_path: Path) -> None:
    from loadgen.errors import ProfileError
    from loadgen.inputs.profile import parse_profile

    data = sharegpt(tmp_path / "s.json")
    spec = parse_profile({"workload": {"dataset": str(data), "dataset_format": "sharegpt",
                                       "output_from_dataset": True}}, "p.yaml").workload  # fmt: skip
    assert spec.dataset_format == "sharegpt" and spec.output_from_dataset
    with pytest.raises(ProfileError, match=r"workload.output_from_dataset: reads answer lengths"):
        parse_profile({"workload": {"output_from_dataset": True}}, "p.yaml")
    with pytest.raises(ProfileError, match=r"workload.dataset_format"):
        parse_profile({"workload": {"dataset": str(data), "dataset_format": "csv"}}, "p.yaml")


def test_entries_longer_than_the_word_limit_are_dropped(tmp_path: Path) -> None:
    # entry i: 10 + i prompt words and 4 + i answer words, 14 + 2i in all
    path = sharegpt(tmp_path / "s.json")
    assert len(load_dataset(path, max_words=20)) == 4  # i = 0..3
    with pytest.raises(UsageError, match="no entry is 5 words or shorter"):
        load_dataset(path, max_words=5)
