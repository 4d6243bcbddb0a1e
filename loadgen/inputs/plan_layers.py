"""The one precedence rule of a plan's settings: defaults < the stored profile < ``--profile`` < flags.

A sweep's results file stores the profile it ran with; ``sweep``'s headline, ``plan``, ``report`` and a
fleet plan all read that stored profile, a ``--profile`` given beside it, and their flags through this
module alone, so one question gets one answer whichever command asks it (a profile's
``plan.max_utilization`` and ``seed`` once sized ``sweep``'s headline and nothing else).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from loadgen.errors import UsageError
from loadgen.inputs.profile import Profile
from loadgen.limits import MAX_FLEET_RPS, MAX_TOKENS
from loadgen.plan_defaults import MAX_UTILIZATION
from loadgen.run_settings import RunSettings
from loadgen.slo_target import SloTarget


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanLayer:
    """What one source says about a plan; None or empty: it says nothing, and the source below it holds."""

    slos: tuple[SloTarget, ...] = ()
    qps: float | None = None
    output_tokens: float | None = None
    max_utilization: float | None = None
    seed: int | None = None

    def over(self, below: PlanLayer) -> PlanLayer:
        """This layer's values where it states them, ``below``'s elsewhere."""
        return PlanLayer(
            **{
                f.name: mine if (mine := getattr(self, f.name)) not in (None, ()) else getattr(below, f.name)
                for f in dataclasses.fields(self)
            }
        )


#: The bottom layer: what a plan assumes where nothing is said.
DEFAULTS: Final = PlanLayer(max_utilization=MAX_UTILIZATION, seed=0)


def resolve(*layers: PlanLayer) -> PlanLayer:
    """The layers from the bottom up (``DEFAULTS`` first), each over the ones before it."""
    resolved = PlanLayer()
    for layer in layers:
        resolved = layer.over(resolved)
    return resolved


def profile_layer(profile: Profile) -> PlanLayer:
    """What a profile (``--profile``) says about a plan."""
    spec = profile.plan
    return PlanLayer(
        slos=profile.slo,
        qps=spec.qps,
        output_tokens=spec.output_tokens,
        max_utilization=spec.max_utilization,
        seed=profile.seed,
    )


def stored_layer(settings: RunSettings, source: str, *, slos: bool = True) -> PlanLayer:
    """What the profile stored in a results file (``source``) says, typed and checked: a field that is not
    what a profile allows is a one-line error naming the file and the field. ``slos=False``: a layer above
    states the SLOs, so the stored ones are not read (a file older than an SLO key's removal still plans)."""
    stored = settings.profile or {}
    plan = settings.profile_section("plan")
    seed = stored.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise UsageError(f"{source}: the stored profile's seed: expected a whole number >= 0, got {seed!r}")
    return PlanLayer(
        slos=_stored_slos(settings.profile_section("slo"), source) if slos else (),
        qps=_number(plan, "qps", source, upper=MAX_FLEET_RPS),
        output_tokens=_number(plan, "output_tokens", source, upper=MAX_TOKENS),
        max_utilization=_number(plan, "max_utilization", source, upper=1.0),
        seed=seed,
    )


def _number(section: Mapping[str, Any], key: str, source: str, *, upper: float) -> float | None:
    """A stored plan field: a number in (0, ``upper``], or absent."""
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= upper:
        raise UsageError(
            f"{source}: the stored profile's plan.{key}: expected a number in (0, {upper:g}], got {value!r}"
        )
    return float(value)


def _stored_slos(section: Mapping[str, Any], source: str) -> tuple[SloTarget, ...]:
    """The SLOs the stored profile states (its ``slo`` section)."""
    try:
        return tuple(SloTarget.from_key(k, float(v)) for k, v in section.items())
    except (TypeError, ValueError) as exc:  # a file written before a key stopped being an SLO (lag, queue)
        raise UsageError(
            f"{source}: the profile stored in the results file: slo: {exc}; give the SLOs with --slo"
        ) from None
