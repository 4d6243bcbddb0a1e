"""The step model with lengths, fitted on all levels of several sweeps at once (pure).

docs/design.md's step law (one definition for the simulator, this fit and the sizing simulation)::

    step_ms = base + per_seq * decoding + per_kv * KV tokens read / 1000 + prefill * prompt tokens prefilled

A sweep measures it through two windows (methodology §2.3, M2):

- a request's TPOT is the mean of the O - 1 steps after its first token. At mean batch b, prompt P
  and output O each of them decodes b sequences, reads b * (P + (O - 1) / 2) KV tokens, and carries
  the prefill of the prompts the *other* b - 1 sequences admit: (b - 1) * P / O per step (at
  concurrency 1 a request's TPOT holds no prefill; the simulator shows it exactly);
- a request's TTFT at concurrency 1 (an idle engine) is its prefill steps: ceil(P / budget) steps,
  the last one decoding it, reading its prompt as it grows, prefilling P tokens, plus an overhead
  the engine does not see (network, tokenisation, HTTP).

With one output length, per_kv and prefill both scale with b * P in TPOT; TTFT at concurrency 1
separates them (its slope in P is prefill + per_kv / 1000, TPOT's is per_kv / 1000 + prefill / O).
What the data cannot separate is found exactly: a coefficient, or a prediction, is answered only
when its feature vector lies in the row space of the calibration's design (an estimable function);
otherwise the model says which terms it could not separate, and never guesses them.

The fit is least squares on relative residuals (latency noise grows with the latency), made robust
by Huber weights (one bad level cannot drag it), with 95% intervals by a two-stage bootstrap: the
sweeps of each mix, then the levels within each sweep and each kind of row. Every resample keeps
the calibration's design, and where a mix was swept more than once the intervals hold the engine's
drift between sweeps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from loadgen.choices import LengthDist
from loadgen.level.aggregates import mean_output_tokens, mean_prompt_tokens
from loadgen.level.result import LevelResult
from loadgen.quantity import Metric
from loadgen.results import Results
from planner.evidence.observations import LevelObservation
from planner.evidence.verdicts import judge
from planner.laws.mix_error import HeldOut
from planner.laws.nonnegative import RANK_TOL, nonnegative_lstsq
from planner.laws.stepmodel import StepModel, context_tokens, prompt_pairs

TERMS = ("base_ms", "per_seq_ms", "per_kv_ms", "prefill_ms_per_token", "prefill_attention_ms", "overhead_ms")
COEFFICIENTS = TERMS[: TERMS.index("overhead_ms")]  # the engine's; overhead_ms is what TTFT holds beyond it
ATTENTION = TERMS.index("prefill_attention_ms")
#: prompt lengths (each 10% apart) before prefill's square term is fitted: with two, a line and a square
#: through two TTFT points are exactly determined, and the fit takes the noise (vLLM's CPU build gave
#: a TTFT of 17.5 s for prompts of 1,024 tokens from two sweeps at 64 and 256)
ATTENTION_MIN_PROMPTS = 3
ATTENTION_NOTE = (
    "not fitted (it needs a third prompt length): prefill is taken as linear in the prompt, and attention's "
    "square share of a longer prompt is not measured"
)
ESTIMABLE_TOL = 1e-6  # a feature vector this far (relative) outside the row space is not estimable
HUBER_K = 1.345
MIN_SPREAD = 0.01  # relative residual spread never taken below 1%: a noiseless sweep flags no outliers
BOOTSTRAP = 300

Kind = Literal["tpot", "ttft_idle"]


@dataclass(frozen=True, slots=True)
class Mix:
    """Mean prompt and output tokens per request."""

    prompt_tokens: float
    output_tokens: float
    context: float | None = None  # KV tokens per sequence-step, where lengths vary (``LengthSample.mix``)

    def __post_init__(self) -> None:
        if not (self.prompt_tokens >= 0 and self.output_tokens >= 1):
            raise ValueError(f"a mix needs prompt_tokens >= 0 and output_tokens >= 1, got {self}")

    @property
    def context_tokens(self) -> float:
        """Mean KV tokens a decoding sequence holds: its prompt and half its answer (or as given)."""
        return context_tokens(self.prompt_tokens, self.output_tokens) if self.context is None else self.context

    @property
    def label(self) -> str:
        return f"prompt {self.prompt_tokens:.0f} / output {self.output_tokens:.0f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationPoint:
    """One row of the fit: a level's TPOT statistic, or its TTFT at concurrency 1."""

    group: str  # the sweep it came from (its file): the bootstrap resamples within it
    label: str  # e.g. "calib-256.json c=8"
    kind: Kind
    batch: float
    mix: Mix
    value_ms: float


def tpot_features(batch: float, mix: Mix) -> np.ndarray:
    """What a request's mean decode step holds at mean batch ``batch`` (one per ``TERMS``)."""
    q = mix.prompt_tokens / mix.output_tokens
    others = max(batch - 1.0, 0.0)
    pairs = others * prompt_pairs(mix.prompt_tokens) / mix.output_tokens / 1e6
    return np.array([1.0, batch, batch * mix.context_tokens / 1000.0, others * q, pairs, 0.0])


def slope_features(mix: Mix) -> np.ndarray:
    """What one more decoding sequence adds to a step at ``mix`` (one per ``TERMS``): the law at the mix is
    linear in the batch, with the prompts the others admit, (b - 1) * P / O, continued below b = 1."""
    q = mix.prompt_tokens / mix.output_tokens
    return np.array(
        [0.0, 1.0, mix.context_tokens / 1000.0, q, prompt_pairs(mix.prompt_tokens) / mix.output_tokens / 1e6, 0.0]
    )


def ttft_idle_features(mix: Mix, budget: int | None) -> np.ndarray:
    """What TTFT holds at an idle engine: the prompt's prefill steps (chunked by ``budget``) and the overhead."""
    p = mix.prompt_tokens
    chunks = max(1, math.ceil(p / budget)) if budget else 1
    read = sum(min((k + 1) * budget, p) for k in range(chunks)) if budget else p  # its prompt, as it grows
    return np.array([float(chunks), 1.0, read / 1000.0, p, prompt_pairs(p) / 1e6, 1.0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Coefficient:
    name: str
    value: float | None  # None: the calibration cannot separate it, or (``note``) the fit left it out
    ci: tuple[float, float] | None
    note: str = ""  # why a term was left out of the fit (taken as zero), e.g. too few prompt lengths


@dataclass(frozen=True, slots=True)
class Prediction:
    value_ms: float
    low_ms: float
    high_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthModel:
    """The fitted step model with lengths, with what it can answer and how sure it is."""

    statistic: str  # the TPOT statistic its rows were, e.g. tpot_p95
    coefficients: tuple[Coefficient, ...]  # one per ``TERMS``
    points: tuple[CalibrationPoint, ...]
    budget: int | None  # the calibration's token budget per step (None: unchunked)
    r_squared: float | None
    residual_mad: float  # median absolute relative residual
    residual_max: float  # the TPOT rows' largest |relative residual|: no prediction is surer than its own fit
    outliers: tuple[str, ...]  # labels of rows the Huber weights discounted below one half
    _beta: tuple[float, ...]  # the minimum-norm solution in scaled units
    _scale: tuple[float, ...]
    _basis: tuple[tuple[float, ...], ...]  # orthonormal row space of the scaled design
    _boot: tuple[tuple[float, ...], ...]  # bootstrap solutions, scaled units
    _mask: tuple[float, ...]  # 0 for a term left out of the fit (taken as zero in every prediction)
    held_out: HeldOut | None = None  # each mix predicted from the others (``planner.laws.held_out``)

    def coefficient(self, name: str) -> Coefficient:
        return self.coefficients[TERMS.index(name)]

    @property
    def ttft_overhead_ms(self) -> float | None:
        """What every predicted TTFT adds beyond the engine: the fitted overhead, never below zero (None: not
        estimable; a prediction then adds nothing)."""
        value = self.coefficient("overhead_ms").value
        return None if value is None else max(value, 0.0)

    @property
    def separated(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.coefficients[: len(COEFFICIENTS)] if c.value is not None)

    @property
    def not_separated(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.coefficients[: len(COEFFICIENTS)] if c.value is None and not c.note)

    def estimable(self, features: np.ndarray) -> bool:
        """Whether the calibration determines ``features . coefficients`` (whatever the inseparable split)."""
        x = np.asarray(features, dtype=np.float64) * self._mask / np.asarray(self._scale)
        return in_row_space(np.asarray(self._basis), x)

    def predict(self, features: np.ndarray) -> Prediction | None:
        """``features . coefficients`` with its 95% bootstrap interval; None when not estimable."""
        if not self.estimable(features):
            return None
        x = np.asarray(features, dtype=np.float64) * self._mask / np.asarray(self._scale)
        value = float(x @ np.asarray(self._beta))
        if not self._boot:
            return Prediction(value, value, value)
        draws = np.asarray(self._boot) @ x
        low, high = (float(v) for v in np.percentile(draws, [2.5, 97.5]))
        return Prediction(value, min(low, value), max(high, value))

    def tpot_range(self, batch: float, mix: Mix) -> Prediction | None:
        """The mean step at ``batch`` and ``mix`` with its 95% interval widened to the held-out error (None: not
        estimable): what a TPOT predicted for a mix not measured is said and decided with."""
        p = self.predict(tpot_features(batch, mix))
        if p is None:
            return None
        reach = self.reach(mix)
        w = max(self.held_out.widening(batch, reach) if self.held_out is not None else 0.0, self.residual_max)
        return Prediction(p.value_ms, min(p.low_ms, p.value_ms * (1 - w)), max(p.high_ms, p.value_ms * (1 + w)))

    def draw_at(self, features: np.ndarray, q: float) -> dict[str, float] | None:
        """The bootstrap replicate's coefficients (by term, in ms units; a term left out is 0) whose prediction
        for ``features`` is the ``q``-th percentile of all replicates' (None: no bootstrap, or not estimable):
        one coherent engine at that end of the interval, where setting every term at its own end would not
        be one the calibration allows."""
        if not self._boot or not self.estimable(features):
            return None
        scale, mask = np.asarray(self._scale), np.asarray(self._mask)
        boot = np.asarray(self._boot)
        draws = boot @ (np.asarray(features, dtype=np.float64) * mask / scale)
        k = int(np.argsort(draws)[min(len(draws) - 1, max(0, round(q / 100.0 * (len(draws) - 1))))])
        return {name: float(v) for name, v in zip(TERMS, boot[k] * mask / scale)}

    def fitted(self, point: CalibrationPoint) -> Prediction | None:
        """What the model says for one of its own rows (the report sets it beside the measured value)."""
        return self.predict(_features(point, self.budget))

    def at_mix(self, mix: Mix) -> StepModel | None:
        """The one-variable law this model predicts for ``mix`` (mean step = base + per_seq * b), or None
        when the calibration cannot answer for that mix. Its intervals are the bootstrap's."""
        slope = slope_features(mix)
        base, per_seq = self.predict(tpot_features(1.0, mix) - slope), self.predict(slope)
        if base is None or per_seq is None:
            return None
        batches = [p.batch for p in self.points if p.kind == "tpot"]
        return StepModel(
            base_ms=base.value_ms,
            per_seq_ms=per_seq.value_ms,
            fitted_batch_range=(min(batches), max(batches)),
            n_levels=len(batches),
            r_squared=self.r_squared,
            residual_mad_ms=self.residual_mad,
            outlier_levels=(),
            base_ci_ms=(base.low_ms, base.high_ms),
            per_seq_ci_ms=(per_seq.low_ms, per_seq.high_ms),
        )

    def ranges(self) -> dict[str, tuple[float, float]]:
        """The calibrated range of each length and the batch (what a prediction extrapolates beyond)."""
        tpot = [p for p in self.points if p.kind == "tpot"]
        return {
            "batch": (min(p.batch for p in tpot), max(p.batch for p in tpot)),
            "prompt_tokens": (
                min(p.mix.prompt_tokens for p in self.points),
                max(p.mix.prompt_tokens for p in self.points),
            ),
            "output_tokens": (
                min(p.mix.output_tokens for p in self.points),
                max(p.mix.output_tokens for p in self.points),
            ),
            "context_tokens": (min(p.mix.context_tokens for p in tpot), max(p.mix.context_tokens for p in tpot)),
        }

    def reach(self, mix: Mix) -> float:
        """How far ``mix`` lies outside the calibrated lengths (``reach``)."""
        return reach(mix, [p.mix for p in self.points])

    def extrapolation(self, mix: Mix, batch: float | None = None) -> tuple[str, ...]:
        """Where ``mix`` (and ``batch``) leave the calibrated range, in words (empty: inside it)."""
        ranges = self.ranges()
        asked = {
            "prompt_tokens": mix.prompt_tokens,
            "output_tokens": mix.output_tokens,
            "context_tokens": mix.context_tokens,
        }
        if batch is not None:
            asked["batch"] = batch
        out = []
        for name, value in asked.items():
            low, high = ranges[name]
            if value > high * 1.05 or value < low * 0.95:
                out.append(f"{name.replace('_', ' ')} {value:.0f} outside the calibrated {low:.0f}..{high:.0f}")
        return tuple(out)

    def drift_note(self) -> str:
        """Why the intervals may be too narrow: a mix swept once shows only its own levels' noise, not
        how far the engine's speed moves between sweeps ("" when every mix was swept at least twice)."""
        once = [sweeps[0] for sweeps in strata(self.points) if len(sweeps) == 1]
        if not once:
            return ""
        return (
            f"{len(once)} of the calibration's mixes {'was' if len(once) == 1 else 'were'} swept once "
            f"({', '.join(once)}): the 95% intervals hold the noise between a sweep's levels, not the engine's "
            "drift between sweeps, which can be larger on a shared machine; sweep each length twice, interleaved "
            "(e.g. 64, 256, 64, 256), and give plan all the files"
        )

    def separation_note(self) -> str:
        """What the calibration could not separate and what would (empty when every term is fitted)."""
        missing = self.not_separated
        if not missing:
            return ""
        kinds = {p.kind for p in self.points}
        mixes = {(round(p.mix.prompt_tokens), round(p.mix.output_tokens)) for p in self.points}
        needs = []
        if len({m[0] for m in mixes}) < 2:
            needs.append("a sweep at a second prompt length")
        if "ttft_idle" not in kinds and len({m[1] for m in mixes}) < 2:
            needs.append("a level at concurrency 1 (or a second output length)")
        how = f" (needs {' and '.join(needs)})" if needs else ""
        return f"the calibration cannot separate {', '.join(missing)}{how}: a mix it did not measure is not predicted"


def fit_length_model(
    points: Sequence[CalibrationPoint],
    *,
    statistic: str = "tpot_p50",
    budget: int | None = None,
    bootstrap: int = BOOTSTRAP,
    seed: int = 0,
) -> LengthModel:
    """Fit the step model with lengths on every row at once.

    Raises
    ------
    ValueError
        Fewer than two TPOT rows, or a non-finite or non-positive value.
    """
    rows = tuple(points)
    if sum(p.kind == "tpot" for p in rows) < 2:
        raise ValueError("a length model needs at least 2 levels with TPOT")
    y = np.array([p.value_ms for p in rows], dtype=np.float64)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("every calibration value must be a positive number of ms")
    mask = np.ones(len(TERMS))
    if _distinct(p.mix.prompt_tokens for p in rows) < ATTENTION_MIN_PROMPTS:
        mask[ATTENTION] = 0.0
    x = np.array([_features(p, budget) for p in rows]) * mask
    scale = np.max(np.abs(x), axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    _, s, vt = np.linalg.svd(xs, full_matrices=False)
    basis = vt[: design_rank(s)]
    beta, weights = _huber(xs, y)
    fitted = xs @ beta
    rel = (y - fitted) / y
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - fitted) ** 2)) / total if total > 0 else None
    boot = _bootstrap(rows, xs, y, bootstrap, seed)
    return LengthModel(
        statistic=statistic,
        coefficients=_coefficients(beta, scale, basis, boot, mask),
        points=rows,
        budget=budget,
        r_squared=r2,
        residual_mad=float(np.median(np.abs(rel))),
        residual_max=float(np.max(np.abs(rel[[p.kind == "tpot" for p in rows]]))),
        outliers=tuple(p.label for p, w in zip(rows, weights) if w < 0.5),
        _beta=tuple(float(v) for v in beta),
        _scale=tuple(float(v) for v in scale),
        _basis=tuple(tuple(float(v) for v in row) for row in basis),
        _boot=tuple(tuple(float(v) for v in b) for b in boot),
        _mask=tuple(float(v) for v in mask),
    )


def reach(mix: Mix, calibrated: Sequence[Mix]) -> float:
    """How far ``mix`` lies outside the calibrated mixes' prompt and output lengths: the larger log-ratio by
    which either falls beyond their range (0 between them)."""
    out = 0.0
    for asked, seen in (
        (mix.prompt_tokens, [m.prompt_tokens for m in calibrated]),
        (mix.output_tokens, [m.output_tokens for m in calibrated]),
    ):
        low, high = max(min(seen), 1.0), max(max(seen), 1.0)
        value = max(asked, 1.0)
        out = max(out, math.log(low / value) if value < low else math.log(value / high) if value > high else 0.0)
    return out


def _coefficients(
    beta: np.ndarray, scale: np.ndarray, basis: np.ndarray, boot: list[np.ndarray], mask: np.ndarray
) -> tuple[Coefficient, ...]:
    """Each term's value and 95% bootstrap interval, in ms units; None where the calibration does not separate
    it from the others (or the attention term, masked with too few prompt lengths)."""
    coefficients = []
    for j, name in enumerate(TERMS):
        if not mask[j]:
            coefficients.append(Coefficient(name=name, value=None, ci=None, note=ATTENTION_NOTE))
            continue
        if not in_row_space(basis, np.eye(len(TERMS))[j]):
            coefficients.append(Coefficient(name=name, value=None, ci=None))
            continue
        ci = None
        if boot:
            draws = np.asarray(boot)[:, j] / scale[j]
            ci = (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5)))
        coefficients.append(Coefficient(name=name, value=float(beta[j] / scale[j]), ci=ci))
    return tuple(coefficients)


PROMPT_APART = 1.1  # realised mean prompts within 10% are one asked length (they differ a little per sweep)


def prompt_group(prompts: Iterable[float]) -> dict[float, float]:
    """Each prompt length mapped to the shortest of its group: lengths within 10% of a group's shortest
    are one asked length swept again (sweeps of 64 tokens realise 63.9 and 64.2)."""
    groups: dict[float, float] = {}
    anchor = -math.inf
    for p in sorted(set(prompts)):
        if p > anchor * PROMPT_APART:
            anchor = p
        groups[p] = anchor
    return groups


def _distinct(prompts: Iterable[float]) -> int:
    """Prompt lengths at least 10% apart."""
    return len(set(prompt_group(prompts).values()))


def design_rank(singular_values: np.ndarray) -> int:
    """Directions the design sees: singular values above ``RANK_TOL`` of the largest."""
    return int(np.sum(singular_values > RANK_TOL * singular_values[0]))


def in_row_space(basis: np.ndarray, x: np.ndarray) -> bool:
    """Whether ``x`` (scaled units) lies in the row space spanned by the orthonormal rows of ``basis``."""
    norm = float(np.linalg.norm(x))
    rest = x - basis.T @ (basis @ x)
    return norm == 0 or float(np.linalg.norm(rest)) <= ESTIMABLE_TOL * norm


def _features(point: CalibrationPoint, budget: int | None) -> np.ndarray:
    if point.kind == "tpot":
        return tpot_features(point.batch, point.mix)
    return ttft_idle_features(point.mix, budget)


def _huber(xs: np.ndarray, y: np.ndarray, iterations: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Least squares on relative residuals over non-negative terms (``nonnegative_lstsq``), reweighted by
    Huber's rule."""
    weights = np.ones(len(y))
    beta = np.zeros(xs.shape[1])
    for _ in range(iterations):
        w = np.sqrt(weights) / y
        beta_new = nonnegative_lstsq(xs * w[:, None], y * w)
        rel = (y - xs @ beta_new) / y
        middle = statistics.median(rel.tolist())  # a few dozen rows: a list's median, not numpy's call overhead
        spread = max(1.4826 * statistics.median(np.abs(rel - middle).tolist()), MIN_SPREAD)
        u = np.abs(rel) / (HUBER_K * spread)
        new_weights = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
        done = bool(np.all(np.abs(beta_new - beta) <= 1e-12 + 1e-10 * np.abs(beta)))  # allclose, without its overhead
        beta, weights = beta_new, new_weights
        if done:
            break
    return beta, weights


def _bootstrap(
    rows: tuple[CalibrationPoint, ...], xs: np.ndarray, y: np.ndarray, n: int, seed: int
) -> list[np.ndarray]:
    """Refits on resamples that keep the calibration's design, in two stages: the sweeps of each mix
    (``strata``) are drawn with replacement, then each drawn sweep's rows within each kind. Where a mix
    was swept more than once, the first stage carries the engine's drift between sweeps into every
    interval (vLLM's CPU build prefilled 256-token prompts in 13.6 and 12.0 ms in two sweeps minutes apart,
    with prompts the server had not seen in either); where it was swept once it cannot
    (``LengthModel.drift_note``). Resamples that lose a direction the full design sees are skipped
    (they would answer a different question)."""
    if n <= 0:
        return []
    rows_of: dict[str, dict[str, list[int]]] = {}
    for i, p in enumerate(rows):
        rows_of.setdefault(p.group, {}).setdefault(p.kind, []).append(i)
    sweeps_of_mix = strata(rows)
    full_rank = design_rank(np.linalg.svd(xs, compute_uv=False))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        drawn = [sweeps[k] for sweeps in sweeps_of_mix for k in rng.integers(len(sweeps), size=len(sweeps))]
        pick = np.concatenate([rng.choice(idx, size=len(idx)) for group in drawn for idx in rows_of[group].values()])
        sub = xs[pick]
        if design_rank(np.linalg.svd(sub, compute_uv=False)) < full_rank:
            continue
        out.append(_huber(sub, y[pick])[0])
    return out


def strata(rows: Iterable[CalibrationPoint]) -> list[list[str]]:
    """The sweeps (groups) of each mix: sweeps whose prompt and output lengths are each within 10% of
    the mix's shortest (``_distinct``'s rule) repeat one mix."""
    mixes: dict[str, Mix] = {}
    for p in rows:
        mixes.setdefault(p.group, p.mix)
    found: list[list[str]] = []
    first: list[Mix] = []
    for group, mix in sorted(mixes.items(), key=lambda item: (item[1].prompt_tokens, item[1].output_tokens)):
        for k, m in enumerate(first):
            if (
                mix.prompt_tokens <= m.prompt_tokens * 1.1
                and m.output_tokens / 1.1 <= mix.output_tokens <= m.output_tokens * 1.1
            ):
                found[k].append(group)
                break
        else:
            first.append(mix)
            found.append([group])
    return found


IDLE_CONCURRENCY = 1.5  # a level below this achieved concurrency met an idle engine


def calibrated_levels(results: Results, group: str) -> tuple[Mix, list[tuple[LevelObservation, LevelResult]]]:
    """A sweep's realised mix and the levels a calibration reads: trusted, unsaturated."""
    verdicts = judge(results.levels)
    obs = verdicts.observations
    prompt = mean_prompt_tokens(obs.results)
    output = mean_output_tokens(obs.results)
    if prompt is None or output is None or output < 1:
        raise ValueError(f"{group}: the server reported no prompt or output usage: its mix is unknown")
    levels = [(obs.levels[i], obs.results[i]) for i in verdicts.saturation.unsaturated if verdicts.levels[i].trusted]
    return Mix(prompt, output, context=shaped_context(prompt, output, results.settings.output_tokens)), levels


def shaped_context(prompt: float, output: float, asked: Mapping[str, Any] | None) -> float | None:
    """KV tokens per sequence-step where the answers' lengths varied as ``asked`` (``{"dist", "spread"}``): a
    long answer holds its growing context for more steps, so the mean is ``P + (O (1 + cv^2) - 1) / 2``
    (``sum(O P + O (O - 1) / 2) / sum(O)``, prompts drawn apart from answers); None: fixed answers."""
    spec = asked or {}
    cv2 = LengthDist(spec.get("dist", LengthDist.FIXED)).relative_variance(float(spec.get("spread", 0.0)))
    return prompt + (output * (1 + cv2) - 1) / 2 if cv2 > 0 else None


def points_from_results(results: Results, group: str, percentile: float | None) -> list[CalibrationPoint]:
    """A sweep's rows: each calibrated level's TPOT (``percentile``; None: the mean) at its batch, and its
    TTFT where it ran at concurrency 1, all at the sweep's realised mix."""
    mix, levels = calibrated_levels(results, group)
    rows = []
    for lv, level in levels:
        tpot = level.mean_ms(Metric.TPOT) if percentile is None else level.percentile_ms(Metric.TPOT, percentile)
        if tpot is not None and lv.batch > 0:
            rows.append(
                CalibrationPoint(
                    group=group, label=f"{group} {lv.label}", kind="tpot", batch=lv.batch, mix=mix, value_ms=tpot
                )
            )
        if lv.concurrency < IDLE_CONCURRENCY and (ttft := ttft_at_idle(level)) is not None:
            rows.append(
                CalibrationPoint(
                    group=group,
                    label=f"{group} {lv.label} TTFT",
                    kind="ttft_idle",
                    batch=lv.concurrency,
                    mix=mix,
                    value_ms=ttft,
                )
            )
    return rows


def ttft_at_idle(level: LevelResult) -> float | None:
    """TTFT from sent at concurrency 1 (p50): an imported table has only TTFT (the same thing in a
    closed loop), often only its mean."""
    for value in (
        level.percentile_ms(Metric.TTFT_SENT, 50),
        level.percentile_ms(Metric.TTFT, 50),
        level.mean_ms(Metric.TTFT),
    ):
        if value is not None:
            return value
    return None
