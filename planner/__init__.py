"""planner: pure capacity-planning math on recorded results (no network, clock or event loop)."""

from planner.capacity.batch_limit import BatchLimit, isotonic_increasing, max_batch_under_slo, model_limit, parse_slo
from planner.capacity.capacity_plan import CapacityPlan
from planner.capacity.diagnose import Finding, diagnose
from planner.capacity.plan import plan_from_law, plan_from_results
from planner.capacity.plan_mix import plan_for_mix
from planner.capacity.request import PlanRequest
from planner.capacity.sizing import (
    Estimate,
    ReplicaPlan,
    SimOutcome,
    Traffic,
    replicas_by_simulation,
    replicas_for,
    simulate_replicas,
)
from planner.evidence.knee import Saturation, classify
from planner.evidence.observations import LevelObservation, Observations, from_results, percentile_ci_ms
from planner.front_door import PlanInputs, PlanOutcome, plan
from planner.laws.batching import BatchUtilization, batch_utilization
from planner.laws.lengthmodel import LengthModel, Mix, fit_length_model
from planner.laws.stepmodel import StepModel, fit_step_model
from planner.simulation.replica_sim import Timeline, simulate

__all__ = [
    "BatchLimit",
    "BatchUtilization",
    "CapacityPlan",
    "Estimate",
    "Finding",
    "LengthModel",
    "LevelObservation",
    "Mix",
    "Observations",
    "PlanInputs",
    "PlanOutcome",
    "PlanRequest",
    "ReplicaPlan",
    "Saturation",
    "SimOutcome",
    "StepModel",
    "Timeline",
    "Traffic",
    "batch_utilization",
    "classify",
    "diagnose",
    "fit_length_model",
    "fit_step_model",
    "from_results",
    "isotonic_increasing",
    "max_batch_under_slo",
    "model_limit",
    "parse_slo",
    "percentile_ci_ms",
    "plan",
    "plan_for_mix",
    "plan_from_law",
    "plan_from_results",
    "replicas_by_simulation",
    "replicas_for",
    "simulate",
    "simulate_replicas",
]
