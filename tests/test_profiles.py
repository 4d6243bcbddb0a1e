"""Every shipped profile loads; broken profiles fail with the file and the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ProfileError
from loadgen.inputs.profile import find_profile, load_profile, parse_profile

PROFILES = sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml"))
SHIPPED = {
    "quickstart",
    "chat",
    "long-context",
    "long-output",
    "bursty",
    "ci-gate",
    "static-vs-continuous",
    "calibration",
    "embeddings",
}


def test_the_shipped_profiles_are_all_there() -> None:
    assert {p.stem for p in PROFILES} == SHIPPED


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_shipped_profile_loads_and_documents_itself(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name == path.stem
    assert profile.description
    assert path.read_text().startswith(f"# {path.stem}:")  # a header comment says what it is for
    assert profile.load.levels


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"load": {"levels": [1, 2, 3, -4]}}, "load.levels[3]: must be a positive integer, got -4"),
        ({"load": {"levels": []}}, "load.levels: must list at least one level"),
        ({"load": {"levels": {"start": 1, "stop": 8, "factor": 1}}}, "load.levels.factor: must be > 1"),
        ({"load": {"mode": "half-open"}}, "load.mode: must be one of closed, open"),
        ({"load": {"duration_s": "long"}}, "load.duration_s: must be a finite number, got 'long'"),
        ({"lod": {}}, "lod: unknown key; did you mean 'load'?"),
        ({"load": {"warmup": 3}}, "load.warmup: unknown key; did you mean 'warmup_s'?"),
        ({"slo": {"tpot_p95": 50}}, "slo.tpot_p95: unknown SLO key"),
        ({"slo": {"tpot_p95_ms": -1}}, "slo.tpot_p95_ms: must be a positive finite number"),
        ({"slo": {"error_rate": 5}}, "slo.error_rate: error_rate must be a fraction"),
        ({"target": {"sim": {"max_num_seqs": 0}}}, "target.sim.max_num_seqs: must be an integer >= 1, got 0"),
        ({"target": "ftp://x"}, "target: expected 'sim', an http(s) URL"),
        ({"workload": {"output_tokens": {"dist": "zipf"}}}, "workload.output_tokens.dist: must be one of"),
        ({"workload": {"prompt_tokens": 0}}, "workload.prompt_tokens: must be a positive integer, got 0"),
        ({"api": "images"}, "api: must be one of chat, completions, responses, embeddings, rerank"),
        ({"schema_version": 9}, "schema_version: this loadgen reads profiles up to version 1"),
        ({"plan": {"max_utilization": 1.5}}, "plan.max_utilization: must be <= 1"),
        ([1, 2], "(top level): expected a mapping"),
    ],
)
def test_broken_profiles_name_the_field(doc: object, message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(doc, "profiles/chat.yaml")
    assert str(info.value).startswith("profiles/chat.yaml: ")
    assert message in str(info.value)


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nload:\n  levels: [1, 2\n")
    with pytest.raises(ProfileError, match=r"bad.yaml: invalid YAML: line \d+, column \d+"):
        load_profile(path)


def test_geometric_levels() -> None:
    profile = parse_profile({"load": {"levels": {"start": 1, "stop": 256, "factor": 2}}}, "x.yaml")
    assert profile.load.levels == (1, 2, 4, 8, 16, 32, 64, 128, 256)


def test_flags_override_the_profile() -> None:
    profile = parse_profile({"load": {"levels": [1, 2], "duration_s": 30}}, "x.yaml")
    changed = profile.with_overrides(levels=(4,), duration_s=None, seed=7)
    assert (changed.load.levels, changed.load.duration_s, changed.seed) == ((4,), 30, 7)


def test_unknown_profile_name_suggests_the_nearest() -> None:
    with pytest.raises(ProfileError, match="did you mean 'quickstart'"):
        find_profile("quikstart")


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["profile", "validate", *map(str, PROFILES)])
    assert ok.exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("load: {levels: [0]}\n")
    result = runner.invoke(app, ["profile", "validate", str(bad)])
    assert result.exit_code == 2 and "load.levels[0]" in result.stderr and "Traceback" not in result.output
    shown = runner.invoke(app, ["profile", "show", "quickstart"])
    assert shown.exit_code == 0 and '"name": "quickstart"' in shown.stdout


def test_profile_list_json_names_every_shipped_profile() -> None:
    result = CliRunner().invoke(app, ["profile", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    names = {row["name"] for row in rows}
    assert {"quickstart", "chat", "ci-gate"} <= names
    quick = next(row for row in rows if row["name"] == "quickstart")
    assert quick["target"] == "simulator" and quick["levels"][0] == 2
