"""A profile's ``tune:`` block: ``loadgen tune``'s search as its flags name it (docs/tuning.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from loadgen.inputs.yaml_node import Node
from loadgen.limits import MAX_FLEET_RPS

SEQS = "max_num_seqs"  # the server's batch cap, as a --serve-cmd template names it
BUDGET = "max_num_batched_tokens"  # its token budget per step


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneSpec:
    """``loadgen tune``'s search, as its flags name it (docs/tuning.md): each flag given overrides its key."""

    serve_cmd: str | None = None  # --serve-cmd: the server's command template
    url: str | None = None  # --url: where the started server answers
    values: Mapping[str, int] = field(default_factory=dict)  # --set NAME=N, one per template name
    max_restarts: int | None = None
    qps: float | None = None
    start_timeout_s: float | None = None


def tune_spec(node: Node) -> TuneSpec:
    """A profile's ``tune:`` block, each key checked as its flag is."""
    node.require_mapping()
    node.known("serve_cmd", "url", "set", "max_restarts", "qps", "start_timeout_s")
    values = node.child("set")
    if values.value is not None:
        values.require_mapping()
        for name, value in values.value.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                values.child(str(name)).fail(f"expected a whole number >= 1, got {value!r}")
    return TuneSpec(
        serve_cmd=node.optional_string("serve_cmd"),
        url=node.optional_string("url"),
        values={str(k): int(v) for k, v in (values.value or {}).items()},
        max_restarts=node.optional_integer("max_restarts", minimum=1, maximum=100),
        qps=node.optional_number("qps", minimum=0, exclusive=True, maximum=MAX_FLEET_RPS),
        start_timeout_s=node.optional_number("start_timeout_s", minimum=1),
    )
