"""hypothesis fuzzing of everything that reads user input: only our own errors may come out."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.errors import ProfileError, ResultsError
from loadgen.inputs.profile import load_profile, parse_profile
from loadgen.results import Results
from planner.capacity.batch_limit import parse_slo
from planner.ci.gate import parse_check

KEYS = [
    "schema_version",
    "name",
    "target",
    "api",
    "model",
    "workload",
    "load",
    "slo",
    "stop",
    "plan",
    "seed",
    "levels",
    "mode",
    "duration_s",
    "warmup_s",
    "sim",
    "url",
    "prompt_tokens",
    "output_tokens",
    "mean",
    "dist",
    "tpot_p95_ms",
    "error_rate",
    "max_num_seqs",
    "start",
    "stop",
    "factor",
    "headers",
    "extra_body",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["sim", "closed", "open", "chat", "http://x/v1", "auto"]),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), children, max_size=5),
    ),
    max_leaves=25,
)


@given(documents)
def test_random_profile_documents_never_escape_as_tracebacks(doc: object) -> None:
    try:
        parse_profile(doc, "fuzz.yaml")
    except ProfileError as exc:
        assert str(exc).startswith("fuzz.yaml: ")


@settings(max_examples=50)
@given(st.text(max_size=200))
def test_random_yaml_text_never_escapes(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        path.write_text(text, encoding="utf-8")
        with contextlib.suppress(ProfileError):
            load_profile(path)


@given(st.text(max_size=40))
def test_slo_and_check_grammars_raise_only_value_errors(text: str) -> None:
    for parse in (parse_slo, parse_check):
        with contextlib.suppress(ValueError):
            parse(text)


FIXTURE = json.loads((Path(__file__).parent / "data" / "results_v1.json").read_text())
mutations = st.lists(
    st.tuples(st.sampled_from(["drop", "retype", "garble"]), st.integers(0, 10**6)), min_size=1, max_size=4
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:  # type: ignore[type-arg]
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@given(mutations, st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))
def test_mutated_results_files_raise_only_results_errors(muts: list[tuple[str, int]], junk: object) -> None:
    doc = json.loads(json.dumps(FIXTURE))
    for action, pick in muts:
        paths = [p for p in _paths(doc) if p]
        path = paths[pick % len(paths)]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "garble" and isinstance(parent[path[-1]], str):
            parent[path[-1]] = parent[path[-1]][::-1] + "!"
        else:
            parent[path[-1]] = json.loads(json.dumps(junk))  # a fresh copy: no shared or circular nodes
    with contextlib.suppress(ResultsError):
        Results.from_json(json.dumps(doc))


# Imports, traces and datasets: whatever the file holds, the one error that comes out is ours (UsageError,
# one line naming the file); never a traceback (issue 31: 13 of 44 malformed imports were tracebacks).
IMPORTS = {name: json.loads((Path(__file__).parent / "data" / name).read_text())
           for name in ("vllm_bench/vllm-c4.json", "aiperf/profile_export_aiperf-c4.json")}  # fmt: skip
TABLE_COLUMNS = ["concurrency", "rate", "ttft_p50_ms", "tpot_p95_ms", "itl_mean_ms", "e2e_mean_ms",
                 "requests_per_s", "output_tokens_per_s", "output_tokens", "prompt_tokens", "duration_s"]  # fmt: skip
cells = st.one_of(
    st.sampled_from(["", "nan", "inf", "-1", "1e400", "0", "1", "12.5", "true", "x"]),
    st.integers(-5, 10**9).map(str),
    st.text(max_size=6),
)


def _mutate(doc: object, muts: list[tuple[str, int]], junk: object) -> object:
    doc = json.loads(json.dumps(doc))
    for action, pick in muts:
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = paths[pick % len(paths)]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]  # type: ignore[index]
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = json.loads(json.dumps(junk))  # type: ignore[index]
    return doc


def _only_usage_errors(write: str, name: str, read: object) -> None:
    from loadgen.errors import UsageError

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(write, encoding="utf-8")
        try:
            read(path)  # type: ignore[operator]
        except UsageError as exc:
            assert "\n" not in str(exc).strip() and str(exc)


def _import(path: Path) -> None:
    from loadgen.inputs.imports import read_levels, to_results

    levels, fmt = read_levels(path)
    to_results(levels, source=path.name, fmt=fmt, model="m")


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(IMPORTS)), mutations,
       st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))  # fmt: skip
def test_mutated_imports_raise_only_usage_errors(name: str, muts: list[tuple[str, int]], junk: object) -> None:
    _only_usage_errors(json.dumps(_mutate(IMPORTS[name], muts, junk)), "bench.json", _import)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(TABLE_COLUMNS), min_size=1, max_size=6, unique=True),
       st.lists(st.lists(cells, min_size=6, max_size=6), max_size=4))  # fmt: skip
def test_random_import_tables_raise_only_usage_errors(columns: list[str], rows: list[list[str]]) -> None:
    import csv
    import io

    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(columns)
    writer.writerows(row[: len(columns)] for row in rows)
    _only_usage_errors(text.getvalue(), "table.csv", _import)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([("time_s", "prompt_tokens", "output_tokens"), ("timestamp", "input_length", "output_length"),
                        ("TIMESTAMP", "ContextTokens", "GeneratedTokens")]),
       st.lists(st.lists(cells, min_size=3, max_size=3), max_size=4), st.booleans())  # fmt: skip
def test_random_traces_raise_only_usage_errors(columns: tuple[str, ...], rows: list[list[str]], as_csv: bool) -> None:
    from loadgen.inputs.trace import load_trace

    if as_csv:
        text = ",".join(columns) + "\n" + "".join(",".join(row) + "\n" for row in rows)
    else:
        text = "".join(json.dumps(dict(zip(columns, row, strict=True))) + "\n" for row in rows)
    _only_usage_errors(text, "trace.csv" if as_csv else "trace.jsonl", load_trace)


DATASET_KEYS = ["prompt", "messages", "max_tokens", "completion", "response", "conversations", "from", "value",
                "role", "content", "human", "gpt", "user", "assistant"]  # fmt: skip
dataset_documents = st.recursive(
    scalars | st.sampled_from(DATASET_KEYS),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(DATASET_KEYS), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(dataset_documents, max_size=4), st.booleans())
def test_random_datasets_raise_only_usage_errors(lines: list[object], sharegpt: bool) -> None:
    from loadgen.inputs.workload import load_dataset

    def safe(value: object) -> str:
        return json.dumps(value, allow_nan=True)

    text = safe(lines) if sharegpt else "".join(safe(line) + "\n" for line in lines)
    _only_usage_errors(text, "data.jsonl", load_dataset)
