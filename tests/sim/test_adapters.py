"""Multi-LoRA serving: the engine's adapter slots, loads and mixing cost (sans-IO, virtual time), and a
70/20/10 split over three adapters measured per model through the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.engine import Engine, EngineConfig
from loadgen.errors import ProfileError
from loadgen.inputs.model_mix import ModelMix, parse_model_mix
from loadgen.inputs.profile import parse_profile
from loadgen.quantity import Metric, Quantity
from loadgen.results import load
from tests.sim.test_engine import run_to_idle, token_times

runner = CliRunner()
LAW = EngineConfig(base_ms=10, per_seq_ms=0, adapter_slots=2, adapter_load_ms=50, per_adapter_ms=5)


def test_a_step_pays_for_each_adapter_it_mixes_and_each_it_loads() -> None:
    engine = Engine(config=LAW)
    engine.submit(0, prompt_tokens=1, max_tokens=3, now_ms=0, adapter="a")
    engine.submit(1, prompt_tokens=1, max_tokens=3, now_ms=0, adapter="b")
    engine.submit(2, prompt_tokens=1, max_tokens=3, now_ms=0)  # the base model: no adapter cost
    steps = run_to_idle(engine)
    # the first step loads both adapters and mixes them: 10 + 2 * 5 + 2 * 50; then 10 + 2 * 5 a step
    assert [s.duration_ms for s in steps] == [120, 20, 20]
    assert engine.counters.adapter_loads == 2


def test_an_adapter_past_the_slots_waits_for_one_to_leave_and_is_loaded_in_its_place() -> None:
    engine = Engine(config=LAW)
    for seq, adapter in enumerate(["a", "b", "c", "a"]):
        engine.submit(seq, prompt_tokens=1, max_tokens=2, now_ms=0, adapter=adapter)
    steps = run_to_idle(engine)
    # c is passed over while a and b run (the second a is not: a is in the batch already)
    assert steps[0].admitted == (0, 1, 3)
    assert 2 in steps[2].admitted  # admitted once a and b left, loading c in a slot nobody holds
    assert token_times(steps, 2)[0] == steps[2].end_ms and engine.counters.adapter_loads == 3
    assert steps[2].duration_ms == 10 + 5 + 50


def test_resident_adapters_cost_no_load_the_next_time() -> None:
    engine = Engine(config=LAW)
    for round_ in range(3):
        engine.submit(round_, prompt_tokens=1, max_tokens=1, now_ms=0, adapter="a")
        run_to_idle(engine)
    assert engine.counters.adapter_loads == 1


def test_a_mix_draws_each_model_at_its_share() -> None:
    mix = parse_model_mix("sql=70,chat=20,base=10")
    rng = np.random.default_rng(0)
    drawn = [mix.draw(rng) for _ in range(20_000)]
    shares = {name: drawn.count(name) / len(drawn) for name in mix.names}
    assert shares == pytest.approx({"sql": 0.7, "chat": 0.2, "base": 0.1}, abs=0.01)
    zipf = parse_model_mix("a,b,c", zipf=1.0)
    assert zipf.shares == pytest.approx((6 / 11, 3 / 11, 2 / 11))
    assert parse_model_mix("a,b").shares == (0.5, 0.5)


@pytest.mark.parametrize(
    ("text", "message"),
    [("a=1,b", "every name a weight"), ("a=0,b=1", "positive"), ("a=x", "a=x: a weight is a positive number"),
     ("a,a", "each model name once"), (",", "expected NAME")],
)  # fmt: skip
def test_a_bad_mix_says_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_model_mix(text)


def test_a_profile_splits_by_weight_or_zipf() -> None:
    assert parse_profile({"models": {"a": 3, "b": 1}}, "p.yaml").models == ModelMix(("a", "b"), (0.75, 0.25))
    zipf = parse_profile({"models": {"zipf": 0, "names": ["a", "b"]}}, "p.yaml").models
    assert zipf == ModelMix(("a", "b"), (0.5, 0.5))
    with pytest.raises(ProfileError, match="models: splits requests over several models: no 'model' beside it"):
        parse_profile({"model": "m", "models": {"a": 1}}, "p.yaml")


@pytest.fixture(scope="module")
def split_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 76/20/4 split over three adapters of the simulator, in virtual time, with a TTFT p95 SLO of 400 ms.
    Only two adapters fit at once and loading one costs 40 ms: the rare adapter's requests wait for a slot
    and pay for its load, so its tail breaks the SLO while the pooled tail (mostly sql's) holds."""
    folder = tmp_path_factory.mktemp("lora")
    profile = folder / "lora.yaml"
    profile.write_text(
        "target: {sim: {base_ms: 10, per_seq_ms: 0.2, adapter_slots: 2, adapter_load_ms: 40, per_adapter_ms: 2}}\n"
        "models: {sql: 76, chat: 20, rare: 4}\n"
        "workload: {prompt_tokens: 32, output_tokens: 16}\n"
        "load: {levels: [8], requests: 2000, warmup_s: 0}\nslo: {ttft_p95_ms: 400}\n"
    )
    out = folder / "s.json"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "--quiet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_a_split_is_measured_per_model(split_run: Path) -> None:
    results = load(split_run)
    level = results.levels[0]
    assert results.settings.models == pytest.approx({"sql": 0.76, "chat": 0.2, "rare": 0.04})
    assert level.by_model is not None and set(level.by_model) == {"sql", "chat", "rare"}
    counts = {name: part.completed for name, part in level.by_model.items()}
    assert sum(counts.values()) == level.completed
    assert counts["sql"] / level.completed == pytest.approx(0.76, abs=0.03)
    assert counts["rare"] / level.completed == pytest.approx(0.04, abs=0.015)
    ttft = {name: part.histograms[Metric.TTFT].percentile_us(50) or 0 for name, part in level.by_model.items()}
    # the rare adapter waits for a slot and pays its load: its median TTFT is the slowest
    assert ttft["rare"] > max(ttft["sql"], ttft["chat"])
    # the per-model view has that model's requests alone
    view = level.model_view("rare")
    assert view.completed == counts["rare"] and view.histograms[Metric.TTFT].count == counts["rare"]
    summary = level.summary()["by_model"]
    assert summary["rare"]["completed"] == counts["rare"] and summary["rare"]["failed"] == 0


def test_the_gate_fails_the_one_adapter_that_breaks_its_slo_and_names_it(split_run: Path) -> None:
    level = load(split_run).levels[0]
    assert (level.statistic_ms(Quantity.parse("ttft_p95")) or 0) < 400  # the pooled tail holds
    result = runner.invoke(app, ["gate", str(split_run), "--json"])
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.stdout)
    failed = [c for c in verdict["checks"] if not c["passed"]]
    assert [(c["level"], c["model"]) for c in failed] == [("c=8", "rare")]
    assert failed[0]["value"] > 400 and verdict["side"] == "service"
    judged = {c["model"] for c in verdict["checks"] if c["passed"] and c["absent"] is None}
    assert judged == {None, "sql", "chat"}
