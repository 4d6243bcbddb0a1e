"""Workload profiles: YAML a human edits and CI validates, loaded into frozen dataclasses.

``yaml.safe_load`` only; validation by hand (no pydantic). Unknown keys are
rejected with the nearest known key suggested, and every error names the
file and the field path: ``profiles/chat.yaml: load.levels[3]: must be a
positive integer, got -4``. Field names are the same in YAML, dataclasses
and the results file.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from loadgen.api import Api
from loadgen.choices import DRAWN_ARRIVALS, MOONCAKE_BLOCK_TOKENS, Arrival, LengthDist, LoadMode, Mode
from loadgen.engine import EngineConfig
from loadgen.errors import ProfileError
from loadgen.inputs.images import MAX_IMAGES, MAX_SIDE, ImageSpec
from loadgen.inputs.model_mix import ModelMix
from loadgen.inputs.profile_rules import NAMES, broken_rules
from loadgen.inputs.tune_spec import TuneSpec, tune_spec
from loadgen.inputs.workload import DatasetFormat, owned_key_problem
from loadgen.inputs.yaml_node import Node
from loadgen.lengths import Lengths
from loadgen.limits import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_FLEET_RPS,
    MAX_LEVELS,
    MAX_RATE_RPS,
    MAX_RETRIES,
    MAX_THINK_TIME_S,
    MAX_TIME_SCALE,
    MAX_TOKENS,
    MAX_TURNS,
)
from loadgen.plan_defaults import MAX_UTILIZATION
from loadgen.sim.faults import FaultConfig
from loadgen.slo_target import SloTarget
from loadgen.wire.target import header_problem, redact_url

SCHEMA_VERSION: Final = 1
TOP_KEYS = ("schema_version", "name", "description", "target", "api", "model", "models", "headers", "extra_body",
            "workload", "load", "slo", "stop", "plan", "gate", "tune", "seed")  # fmt: skip
#: Mappings a profile may leave out: read as empty, so their own keys take their defaults.
SECTIONS = frozenset({"workload", "load", "slo", "stop", "plan", "gate", "tune", "headers", "extra_body"})


def _shipped_profiles() -> Path:
    """The profiles that come with loadgen: ``profiles/`` in a checkout, ``loadgen/builtin_profiles`` in a wheel."""
    package = Path(__file__).resolve().parents[1]  # loadgen/ (this module is in loadgen/inputs/)
    installed = package / "builtin_profiles"
    return installed if installed.is_dir() else package.parent / "profiles"


#: Searched in order: the user's own ``profiles/`` in the working directory, then the shipped ones.
PROFILE_DIRS: Final = (Path("profiles"), _shipped_profiles())


@dataclass(frozen=True, slots=True)
class Bound:
    """A numeric field's range: a profile's key and the flag that sets it are held to the same one."""

    minimum: float | None = None
    exclusive: bool = False  # the minimum itself is refused
    maximum: float | None = None

    def integers(self) -> tuple[int | None, int | None]:
        """The range of an integer field (its minimum is never exclusive)."""
        low, high = self.minimum, self.maximum
        return None if low is None else int(low), None if high is None else int(high)


#: Every bounded numeric field of a profile, by its path: the one table the profile reader and the flags
#: of ``run`` and ``sweep`` check against (``--rate 1e9`` once built a 112 GiB schedule: only the
#: profile's levels were bounded).
BOUNDS: Final[dict[str, Bound]] = {
    "load.levels (closed)": Bound(1, maximum=MAX_CONCURRENCY),
    "load.levels (open)": Bound(0, exclusive=True, maximum=MAX_RATE_RPS),
    "load.levels (trace)": Bound(0, exclusive=True, maximum=MAX_TIME_SCALE),
    "load.duration_s": Bound(0, exclusive=True),
    "load.requests": Bound(1),
    "load.warmup_s": Bound(0),
    "load.ramp_up_s": Bound(0),
    "load.burstiness": Bound(0, exclusive=True),
    "load.max_in_flight": Bound(1, maximum=MAX_CONCURRENCY),
    "load.min_requests": Bound(1),
    "load.retries": Bound(0, maximum=MAX_RETRIES),
    "load.trace_block_tokens": Bound(1, maximum=MAX_TOKENS),
    "workload.*_tokens.mean": Bound(1, maximum=MAX_TOKENS),
    "workload.*_tokens.spread": Bound(0),
    "workload.dataset_max_words": Bound(1, maximum=MAX_TOKENS),
    "workload.turns": Bound(1, maximum=MAX_TURNS),
    "workload.think_time_s": Bound(0, maximum=MAX_THINK_TIME_S),
    "workload.batch_sizes": Bound(1, maximum=MAX_BATCH),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    prompt_tokens: Lengths = field(default_factory=lambda: Lengths(128))
    output_tokens: Lengths = field(default_factory=lambda: Lengths(128))
    dataset: str | None = None
    dataset_format: DatasetFormat = DatasetFormat.AUTO
    dataset_max_words: int | None = None  # drop entries longer than this (prompt + recorded answer, words)
    output_from_dataset: bool = False  # max_tokens = the dataset's recorded answer lengths
    turns: int = 1  # closed-loop chat conversations: turns each, the history sent back every turn
    think_time_s: float = 0.0  # mean pause between a conversation's turns
    shared_prefix: bool = False  # False: every prompt starts with a nonce (prefix caches cannot help)
    images: ImageSpec | None = None  # images in each request (chat, responses): a vision model's workload
    # pooling APIs (embeddings, rerank): inputs per request; each batch size is swept over every load level
    batch_sizes: tuple[int, ...] = (1,)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """How hard each level pushes. ``closed``: levels are client counts; ``open``: request rates;
    ``trace``: ``trace`` replayed at its recorded times, levels are time scales (0.5 = twice as fast)."""

    mode: LoadMode = LoadMode.CLOSED
    levels: tuple[float, ...] = (1, 2, 4, 8, 16, 32)
    duration_s: float | None = 30.0
    requests: int | None = None
    warmup_s: float = 5.0
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    max_in_flight: int | None = None
    min_requests: int | None = None  # request floor per level (None: what the profile's SLO percentiles need)
    ramp_up_s: float | None = None  # closed loop: clients start over this span (None: one probe request's duration)
    trace: str | None = None  # mode trace: the trace file (arrivals and each request's lengths)
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS  # the tokens each of the trace's hash_ids names
    retries: int = 0  # a level untrusted for the measurement's sake (client, window) is measured again this often


@dataclass(frozen=True, slots=True)
class StopSpec:
    slo_breach_factor: float | None = 2.0  # stop after a level breaches an SLO by this factor
    min_throughput_gain: float | None = None  # opt-in heuristic: two levels in a row gaining less than this
    stop_on_saturation: bool = True  # stop once a level's verdict is saturated (planner.evidence.verdicts)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSpec:
    """What the sweep is for: size the fleet for this traffic (optional)."""

    qps: float | None = None
    output_tokens: int | None = None
    max_utilization: float = MAX_UTILIZATION
    variants: tuple[str, ...] = ()  # a fleet plan's variants, as --variant spells each: NAME=RESULTS[,cost=][,gpus=]


@dataclass(frozen=True, slots=True)
class GateSpec:
    """Where the profile's SLOs are promised: the levels ``loadgen gate`` checks them at (None: every level).

    A sweep that shows where an SLO breaks runs levels past it on purpose;
    those are not a failure of the service, so a gate names its operating levels.
    """

    levels: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class SimAnswers:
    """What the simulated model answers with (``target.sim``; ``serve-sim``'s flags of the same names): a reasoning
    model's phase before its answer, an agent's share of tool calls. A virtual-time sweep needs them here."""

    reasoning_tokens: int = 0  # each answer's first tokens stream as reasoning
    tool_call_share: float = 0.0  # chat, responses: the share of turns answered with a tool call


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    name: str
    description: str = ""
    url: str | None = None  # a real endpoint; None with ``sim`` set means the built-in simulator
    sim: EngineConfig | None = None
    sim_faults: FaultConfig = field(default_factory=FaultConfig)  # fault injection on the simulator target
    sim_answers: SimAnswers = field(default_factory=SimAnswers)
    api: Api = Api.CHAT
    model: str | None = None  # None: first id from /models
    models: ModelMix | None = None  # requests split over several model names (LoRA adapters); None: ``model``
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    slo: tuple[SloTarget, ...] = ()
    stop: StopSpec = field(default_factory=StopSpec)
    plan: PlanSpec = field(default_factory=PlanSpec)
    gate: GateSpec = field(default_factory=GateSpec)
    tune: TuneSpec = field(default_factory=TuneSpec)
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        """The resolved profile as stored in results (header values redacted)."""
        out = asdict(self)
        out["headers"] = {k: "<redacted>" for k in self.headers}
        out["slo"] = {s.key: s.limit for s in self.slo}
        out["target"] = "sim" if self.url is None else "url"
        out["url"] = None if self.url is None else redact_url(self.url)
        return out

    def with_overrides(self, **changes: Any) -> Profile:
        """CLI flags over profile values (None means: not given)."""
        given = {k: v for k, v in changes.items() if v is not None}
        load_keys = {f.name for f in dataclasses.fields(LoadSpec)}
        load = replace(self.load, **{k: v for k, v in given.items() if k in load_keys})
        rest = {k: v for k, v in given.items() if k not in load_keys}
        return replace(self, load=load, **rest)


def find_profile(name_or_path: str) -> Path:
    """A path as given, else ``profiles/NAME.yaml`` in the working directory or the project."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    for folder in PROFILE_DIRS:
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.exists():
            return candidate
    names = sorted({p.stem for folder in PROFILE_DIRS if folder.is_dir() for p in folder.glob("*.yaml")})
    hint = difflib.get_close_matches(name_or_path, names, n=1)
    raise ProfileError(
        f"--profile {name_or_path}: no such profile"
        + (f"; did you mean {hint[0]!r}?" if hint else "")
        + (f" (known: {', '.join(names)})" if names else "")
    )


def list_profiles() -> list[Path]:
    seen: dict[str, Path] = {}
    for folder in PROFILE_DIRS:
        if folder.is_dir():
            for p in sorted(folder.glob("*.yaml")):
                seen.setdefault(p.stem, p)
    return sorted(seen.values(), key=lambda p: p.stem)


class _NoAliasLoader(yaml.SafeLoader):
    """``safe_load`` without aliases: a profile never needs one, and nested aliases expand
    exponentially (a few hundred bytes can stand for gigabytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("aliases (*name) are not allowed in a profile")
        return super().compose_node(parent, index)


def load_profile(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not a text file (a profile is UTF-8 YAML)") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ProfileError(f"{path}: invalid YAML: {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: invalid YAML ({exc})") from None
    except ValueError:  # PyYAML's int() of a literal past Python's 4,300-digit limit
        raise ProfileError(f"{path}: a number with thousands of digits; no profile field takes one") from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to read (a profile is a few levels deep)") from None
    return parse_profile(data, str(path))


def parse_profile(data: Any, source: str) -> Profile:
    root = Node(source, "", data if data is not None else {}, sections=SECTIONS)
    root.require_mapping()
    root.known(*TOP_KEYS)
    version = root.integer("schema_version", SCHEMA_VERSION, minimum=1)
    if version > SCHEMA_VERSION:
        root.child("schema_version").fail(f"this loadgen reads profiles up to version {SCHEMA_VERSION}, got {version}")
    url, sim, sim_faults, sim_answers = _target(root.child("target"))
    model = root.string("model", "auto")
    models = _models(root.child("models")) if "models" in root.value else None
    if models is not None and "model" in root.value:
        root.child("models").fail("splits requests over several models: no 'model' beside it")
    load = _load(root.child("load"))
    if load.mode == "trace":
        _trace_owns(root.child("workload"), root.child("gate"))
    profile = Profile(
        name=root.string("name", Path(source).stem),
        description=root.string("description", ""),
        url=url,
        sim=sim,
        sim_faults=sim_faults,
        sim_answers=sim_answers,
        api=root.choice("api", Api.CHAT, tuple(Api)),
        model=None if model == "auto" else model,
        models=models,
        headers=_headers(root.child("headers")),
        extra_body=_extra_body(root.child("extra_body")),
        workload=_workload(root.child("workload")),
        load=load,
        slo=_slo(root.child("slo")),
        stop=_stop(root.child("stop")),
        plan=_plan(root.child("plan")),
        gate=_gate(root.child("gate"), load.mode),
        tune=tune_spec(root.child("tune")),
        seed=root.integer("seed", 0, minimum=0),
    )
    if (broken := next(broken_rules(profile), None)) is not None:
        section, key = NAMES[broken.field][0].split(".")
        root.child(section).child(key).fail(broken.words("profile"))
    return profile


def _target(node: Node) -> tuple[str | None, EngineConfig | None, FaultConfig, SimAnswers]:
    if node.value is None or node.value == "sim":
        return None, EngineConfig(), FaultConfig(), SimAnswers()
    if isinstance(node.value, str):
        if not re.match(r"^https?://", node.value):
            node.fail(f"expected 'sim', an http(s) URL, or a mapping with 'url' or 'sim', got {node.value!r}")
        return node.value, None, FaultConfig(), SimAnswers()
    node.require_mapping()
    node.known("url", "sim")
    if "url" in node.value:
        return node.string("url", ""), None, FaultConfig(), SimAnswers()
    law = node.child("sim")
    if law.value is None:
        return None, EngineConfig(), FaultConfig(), SimAnswers()
    law.require_mapping()
    names = (
        "base_ms",
        "per_seq_ms",
        "prefill_ms_per_token",
        "max_num_seqs",
        "mode",
        "static_batch",
        "static_wait_ms",
        "noise_cv",
        "seed",
        "per_kv_ms",
        "max_num_batched_tokens",
        "kv_capacity_tokens",
        "prefill_attention_ms",
        "spec_draft_tokens",
        "spec_acceptance",
        "adapter_slots",
        "adapter_load_ms",
        "per_adapter_ms",
        "faults",
        "reasoning_tokens",
        "tool_call_share",
    )
    law.known(*names)
    answers = SimAnswers(
        reasoning_tokens=law.integer("reasoning_tokens", 0, minimum=0, maximum=MAX_TOKENS),
        tool_call_share=law.number("tool_call_share", 0.0, minimum=0, maximum=1.0),
    )
    return None, _engine(law, EngineConfig()), _faults(law.child("faults")), answers


def _faults(node: Node) -> FaultConfig:
    if node.value is None:
        return FaultConfig()
    node.require_mapping()
    kinds = tuple(f.name for f in dataclasses.fields(FaultConfig))
    node.known(*kinds)
    values = {k: node.number(k, 0.0, minimum=0, maximum=1.0) for k in node.value}
    try:
        return FaultConfig(**values)
    except ValueError as exc:
        node.fail(str(exc))


def _engine(law: Node, d: EngineConfig) -> EngineConfig:
    return EngineConfig(
        base_ms=law.number("base_ms", d.base_ms, minimum=0),
        per_seq_ms=law.number("per_seq_ms", d.per_seq_ms, minimum=0),
        prefill_ms_per_token=law.number("prefill_ms_per_token", d.prefill_ms_per_token, minimum=0),
        max_num_seqs=law.integer("max_num_seqs", d.max_num_seqs, minimum=1),
        mode=law.choice("mode", d.mode, tuple(Mode)),
        static_batch=law.integer("static_batch", d.static_batch, minimum=1),
        static_wait_ms=law.number("static_wait_ms", d.static_wait_ms, minimum=0),
        noise_cv=law.number("noise_cv", d.noise_cv, minimum=0),
        seed=law.integer("seed", d.seed, minimum=0),
        per_kv_ms=law.number("per_kv_ms", d.per_kv_ms, minimum=0),
        max_num_batched_tokens=law.optional_integer("max_num_batched_tokens", minimum=1, maximum=MAX_TOKENS),
        kv_capacity_tokens=law.optional_integer("kv_capacity_tokens", minimum=1, maximum=1_000_000_000),
        prefill_attention_ms=law.number("prefill_attention_ms", d.prefill_attention_ms, minimum=0),
        spec_draft_tokens=law.integer("spec_draft_tokens", d.spec_draft_tokens, minimum=0, maximum=64),
        spec_acceptance=law.number("spec_acceptance", d.spec_acceptance, minimum=0, maximum=1),
        adapter_slots=law.integer("adapter_slots", d.adapter_slots, minimum=1, maximum=1024),
        adapter_load_ms=law.number("adapter_load_ms", d.adapter_load_ms, minimum=0),
        per_adapter_ms=law.number("per_adapter_ms", d.per_adapter_ms, minimum=0),
    )


def _lengths(node: Node, default: int) -> Lengths:
    if node.value is None:
        return Lengths(default)
    if isinstance(node.value, int) and not isinstance(node.value, bool):
        return Lengths(node.positive_integer_value(maximum=BOUNDS["workload.*_tokens.mean"].integers()[1]))
    node.require_mapping()
    node.known("mean", "dist", "spread")
    return Lengths(
        node.integer("mean", default, **_integer(BOUNDS["workload.*_tokens.mean"])),
        node.choice("dist", LengthDist.FIXED, tuple(LengthDist)),
        node.number("spread", 0.0, **_number(BOUNDS["workload.*_tokens.spread"])),
    )


def _workload(node: Node) -> WorkloadSpec:
    node.require_mapping()
    node.known(
        "prompt_tokens",
        "output_tokens",
        "dataset",
        "dataset_format",
        "dataset_max_words",
        "output_from_dataset",
        "shared_prefix",
        "turns",
        "think_time_s",
        "images",
        "batch_sizes",
    )
    return WorkloadSpec(
        prompt_tokens=_lengths(node.child("prompt_tokens"), 128),
        output_tokens=_lengths(node.child("output_tokens"), 128),
        dataset=_existing_file(node, "dataset"),
        dataset_format=node.choice("dataset_format", DatasetFormat.AUTO, tuple(DatasetFormat)),
        dataset_max_words=node.optional_integer("dataset_max_words", **_integer(BOUNDS["workload.dataset_max_words"])),
        output_from_dataset=node.boolean("output_from_dataset", False),
        shared_prefix=node.boolean("shared_prefix", False),
        turns=node.integer("turns", 1, **_integer(BOUNDS["workload.turns"])),
        think_time_s=node.number("think_time_s", 0.0, **_number(BOUNDS["workload.think_time_s"])),
        images=_images(node.child("images")) if "images" in node.value else None,
        batch_sizes=_batch_sizes(node.child("batch_sizes")) if "batch_sizes" in node.value else (1,),
    )


def _batch_sizes(node: Node) -> tuple[int, ...]:
    """A pooling sweep's batch sizes: one number or a list (each level is measured at each)."""
    if not isinstance(node.value, list):
        return (node.positive_integer_value(maximum=MAX_BATCH),)
    if not node.value or len(node.value) > MAX_LEVELS:
        node.fail(f"expected 1 to {MAX_LEVELS} batch sizes, got {len(node.value)}")
    return tuple(dict.fromkeys(node.item(i).positive_integer_value(maximum=MAX_BATCH) for i in range(len(node.value))))


def _models(node: Node) -> ModelMix:
    """``{name: weight, ...}``, or ``{zipf: S, names: [...]}`` (the k-th name weighted 1 / k^S)."""
    node.require_mapping()
    try:
        if "zipf" in node.value or "names" in node.value:
            node.known("zipf", "names")
            names = node.value.get("names")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                node.child("names").fail("expected a list of model names, most requested first")
            return ModelMix.zipf(tuple(names), node.number("zipf", 1.0, minimum=0, maximum=10))
        weights = {}
        for key in node.value:
            if not isinstance(key, str):
                node.fail(f"model names are text, got {key!r}")
            weights[key] = node.child(key).positive_number_value()
        return ModelMix.weighted(weights)
    except ValueError as exc:
        node.fail(str(exc))


def _images(node: Node) -> ImageSpec:
    """``{count, width, height}`` generated images, or ``{count, folder}`` read from a folder."""
    node.require_mapping()
    node.known("count", "width", "height", "folder")
    folder = node.optional_string("folder")
    if folder is not None and not Path(folder).is_dir():
        node.child("folder").fail(f"no such folder: {folder}")
    if folder is not None and ("width" in node.value or "height" in node.value):
        node.fail("images from a folder are sent as they are: no width or height")
    count = node.integer("count", 1, minimum=1, maximum=MAX_IMAGES)
    side = {"minimum": 1, "maximum": MAX_SIDE}
    return ImageSpec(
        count=count, width=node.integer("width", 512, **side), height=node.integer("height", 512, **side), folder=folder
    )


def level_bound(mode: str) -> Bound:
    """The levels a load mode takes: clients, requests/s, or (a trace) time scales."""
    return BOUNDS[f"load.levels ({mode})"]


def _levels(node: Node, mode: str) -> tuple[float, ...]:
    if isinstance(node.value, list):
        if not node.value:
            node.fail("must list at least one level")
        if len(node.value) > MAX_LEVELS:
            node.fail(f"lists {len(node.value)} levels; at most {MAX_LEVELS}")
        levels: list[float] = []
        for i, _ in enumerate(node.value):
            item = node.item(i)
            if mode == "closed":
                levels.append(item.positive_integer_value(maximum=level_bound(mode).integers()[1]))
            else:
                levels.append(item.positive_number_value(maximum=level_bound(mode).maximum))
        return tuple(levels)
    node.require_mapping()
    node.known("start", "stop", "factor")
    start = node.number("start", 1, minimum=0, exclusive=True, maximum=level_bound(mode).maximum)
    stop = node.number("stop", start, minimum=start, maximum=level_bound(mode).maximum)
    factor = node.number("factor", 2.0, minimum=1.0, exclusive=True)
    value = start
    levels = []
    while value <= stop * (1 + 1e-9):
        levels.append(round(value) if mode == "closed" else value)
        if len(levels) > MAX_LEVELS:
            node.fail(f"start {start:g}, stop {stop:g}, factor {factor:g} make more than {MAX_LEVELS} levels")
        value *= factor
    return tuple(dict.fromkeys(levels))  # rounding can repeat small levels


def _load(node: Node) -> LoadSpec:
    node.require_mapping()
    node.known(
        "mode",
        "levels",
        "duration_s",
        "requests",
        "warmup_s",
        "arrival",
        "burstiness",
        "max_in_flight",
        "min_requests",
        "ramp_up_s",
        "trace",
        "trace_block_tokens",
        "retries",
    )
    d = LoadSpec()
    mode = node.choice("mode", d.mode, tuple(LoadMode))
    duration = node.optional_number("duration_s", **_number(BOUNDS["load.duration_s"]))
    requests = node.optional_integer("requests", **_integer(BOUNDS["load.requests"]))
    trace = _existing_file(node, "trace")
    if mode == "trace":
        if trace is None:
            node.child("mode").fail("mode trace replays load.trace; give the trace file")
        for key in ("duration_s", "arrival", "burstiness"):
            if key in node.value:
                node.child(key).fail("the trace sets the arrivals and the span (cut it with load.requests)")
    elif trace is not None:
        node.child("trace").fail(f"a trace is replayed in mode trace, not {mode}")
    if "trace_block_tokens" in node.value and mode != "trace":
        node.child("trace_block_tokens").fail("the tokens a trace's hash_ids name: mode trace only")
    elif duration is None and requests is None:
        duration = d.duration_s
    ramp_up = node.optional_number("ramp_up_s", **_number(BOUNDS["load.ramp_up_s"]))
    if ramp_up is not None and mode != "closed":
        node.child("ramp_up_s").fail("a ramp-up staggers closed-loop clients (mode closed)")
    return LoadSpec(
        mode=mode,
        levels=_levels(node.child("levels"), mode) if "levels" in node.value else (1.0,) if trace else d.levels,
        duration_s=duration,
        requests=requests,
        warmup_s=node.number("warmup_s", d.warmup_s, **_number(BOUNDS["load.warmup_s"])),
        arrival=node.choice("arrival", d.arrival, DRAWN_ARRIVALS),
        burstiness=node.number("burstiness", d.burstiness, **_number(BOUNDS["load.burstiness"])),
        max_in_flight=node.optional_integer("max_in_flight", **_integer(BOUNDS["load.max_in_flight"])),
        min_requests=node.optional_integer("min_requests", **_integer(BOUNDS["load.min_requests"])),
        ramp_up_s=ramp_up,
        trace=trace,
        trace_block_tokens=node.integer(
            "trace_block_tokens", d.trace_block_tokens, **_integer(BOUNDS["load.trace_block_tokens"])
        ),
        retries=node.integer("retries", d.retries, **_integer(BOUNDS["load.retries"])),
    )


def _slo(node: Node) -> tuple[SloTarget, ...]:
    node.require_mapping()
    out = []
    for key in node.value:
        child = node.child(key)
        try:
            out.append(SloTarget.from_key(str(key), child.positive_number_value()))
        except ValueError as exc:
            child.fail(str(exc))
    return tuple(out)


def _stop(node: Node) -> StopSpec:
    node.require_mapping()
    node.known("slo_breach_factor", "min_throughput_gain", "stop_on_saturation")
    d = StopSpec()
    return StopSpec(
        slo_breach_factor=node.optional_number("slo_breach_factor", minimum=1.0, default=d.slo_breach_factor),
        min_throughput_gain=node.optional_number("min_throughput_gain", minimum=0.0, default=d.min_throughput_gain),
        stop_on_saturation=node.boolean("stop_on_saturation", d.stop_on_saturation),
    )


def _plan(node: Node) -> PlanSpec:
    node.require_mapping()
    node.known("qps", "output_tokens", "max_utilization", "variants")
    variants = node.child("variants")
    listed = variants.value if variants.value is not None else []
    if not isinstance(listed, list) or not all(isinstance(v, str) and v.strip() for v in listed):
        variants.fail("expected a list of NAME=RESULTS[,cost=USD_PER_GPU_HOUR][,gpus=N], as --variant takes")
    return PlanSpec(
        qps=node.optional_number("qps", minimum=0, exclusive=True, maximum=MAX_FLEET_RPS),
        output_tokens=node.optional_integer("output_tokens", minimum=1, maximum=MAX_TOKENS),
        max_utilization=node.number("max_utilization", MAX_UTILIZATION, minimum=0, exclusive=True, maximum=1.0),
        variants=tuple(listed),
    )


def _existing_file(node: Node, key: str) -> str | None:
    """A file path that must exist (relative paths are read from the working directory, as at run time)."""
    path = node.optional_string(key)
    if path is not None and not Path(path).is_file():
        node.child(key).fail(f"no such file: {path}")
    return path


def _headers(node: Node) -> dict[str, str]:
    """The profile's headers, each one HTTP can carry (``target.header_problem``)."""
    if node.value is None:
        return {}
    node.require_mapping()
    out = {}
    for name, value in node.value.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            node.child(str(name)).fail("expected a string")
        if problem := header_problem(str(name), str(value)):
            node.child(str(name)).fail(problem)
        out[str(name)] = str(value)
    return out


def _extra_body(node: Node) -> dict[str, Any]:
    node.require_mapping()
    _require_json(node)
    body = dict(node.value)
    problem = owned_key_problem(body)
    if problem:
        node.fail(problem)
    return body


def _require_json(node: Node) -> None:
    """Every value is one JSON can carry: YAML's dates, ``!!binary`` and ``!!set`` validate as YAML but
    cannot be sent in a request body (they once passed here and crashed ``profile show`` and ``sweep``)."""
    value = node.value
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                node.fail(f"keys must be strings (JSON object keys), got {key!r}")
            _require_json(node.child(key))
    elif isinstance(value, list):
        for i in range(len(value)):
            _require_json(node.item(i))
    elif isinstance(value, float) and not math.isfinite(value):
        node.fail(f"must be a finite number (JSON has no {value}), got {value}")
    elif not (value is None or isinstance(value, str | int | float | bool)):
        node.fail(
            f"must be a JSON value (string, number, true/false, null, list, mapping), got a {type(value).__name__}"
        )


def _trace_owns(workload: Node, gate: Node) -> None:
    """A trace carries each request's lengths and its own rate: nothing else may claim them."""
    for key in ("prompt_tokens", "output_tokens", "dataset", "output_from_dataset", "turns"):
        if isinstance(workload.value, Mapping) and key in workload.value:
            workload.child(key).fail("load.mode trace takes each request's lengths from the trace")
    if isinstance(gate.value, Mapping) and "levels" in gate.value:
        gate.child("levels").fail("a trace replay is gated at every level (its levels are time scales)")


def _gate(node: Node, mode: str) -> GateSpec:
    node.require_mapping()
    node.known("levels")
    return GateSpec(levels=_levels(node.child("levels"), mode) if "levels" in node.value else None)


def _number(bound: Bound) -> dict[str, Any]:
    return {"minimum": bound.minimum, "exclusive": bound.exclusive, "maximum": bound.maximum}


def _integer(bound: Bound) -> dict[str, Any]:
    minimum, maximum = bound.integers()
    return {"minimum": minimum, "maximum": maximum}
