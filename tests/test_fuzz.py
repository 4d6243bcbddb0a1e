"""hypothesis fuzzing of everything that reads user input: only our own errors may come out."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.errors import ProfileError, ResultsError
from loadgen.profile import load_profile, parse_profile
from loadgen.results import Results
from planner.gate import parse_check
from planner.slo import parse_slo

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
