"""How far a mix's decode slope rests on the idle engine's prefill, and the range it could take (pure).

A step grows with each decoding sequence by per_seq + per_kv * context + prefill * P / O (+ attention):
``slope_features``. Each calibrated mix measures that sum. Where the asked mix's terms are a linear
combination of the calibrated mixes' terms, the calibrated slopes determine its slope whatever the split
between the terms. Where they are not (two mixes that differ in prompt and output both, asked for a third
off their line), the length model splits them with the prefill a prompt cost at an idle engine (TTFT at
concurrency 1): a prefill chunk carried in a step of decodes then costs what it cost alone. Real engines
break that: NVIDIA's published 70B table, calibrated at 200/200 and 5,000/500 and asked for 1,000/1,000,
was predicted a slope of 0.136 ms a sequence where it measures 0.167 (max batch 83 where it is 74).

Without that assumption, every split of the calibrated slopes into non-negative terms is as good as the
fitted one: the asked slope's range over them is found at the vertices of that polytope (a few terms, a
few mixes: each choice of as many non-zero terms as the mixes determine, solved exactly), and the batch
limits size on its high end.
"""

from __future__ import annotations

import itertools

import numpy as np

from planner.laws.lengthmodel import TERMS, LengthModel, Mix, design_rank, in_row_space, slope_features

SLOPE_TERMS = ("per_seq_ms", "per_kv_ms", "prefill_ms_per_token", "prefill_attention_ms")
EXACT_TOL = 1e-6  # a vertex reproduces every calibrated slope within this share


def slope_range(model: LengthModel, mix: Mix) -> tuple[float, float] | None:
    """The per-sequence slope at ``mix`` over every non-negative split of the calibrated mixes' fitted slopes
    (the fitted split among them), or None where those slopes determine it (or a term was not fitted).
    Bounded: every calibrated mix has each term (a prompt, a context), so no split grows a term for free."""
    active, calibrated = _calibrated_slopes(model)
    if len(active) < len([t for t in SLOPE_TERMS if not model.coefficient(t).note]):
        return None  # a term the calibration could not separate: the mix is not predicted at all
    theta = np.array([model.coefficients[i].value or 0.0 for i in active])
    asked = slope_features(mix)[active]
    scale = np.max(np.abs(np.vstack([calibrated, asked])), axis=0)
    scale[scale == 0] = 1.0
    g, a = calibrated / scale, asked / scale
    _, singular, vt = np.linalg.svd(g)
    rank = design_rank(singular)
    if in_row_space(vt[:rank], a):  # the asked terms combine the calibrated mixes': their slopes determine it
        return None
    values = [float(asked @ theta), *_vertices(g, a, g @ (theta * scale), rank)]
    return min(values), max(values)


def slopes_determined(model: LengthModel) -> bool:
    """Whether the calibrated mixes' slopes determine every slope term, so that no asked mix has a range of
    splits (``slope_range`` is then None for every mix)."""
    active, calibrated = _calibrated_slopes(model)
    scale = np.max(np.abs(calibrated), axis=0)
    scale[scale == 0] = 1.0
    return design_rank(np.linalg.svd(calibrated / scale, compute_uv=False)) >= len(active)


def _calibrated_slopes(model: LengthModel) -> tuple[list[int], np.ndarray]:
    """The slope terms the model fitted (their indices in ``TERMS``), and each calibrated mix's slope features
    over them, one row a mix."""
    active = [TERMS.index(t) for t in SLOPE_TERMS if model.coefficient(t).value is not None]
    mixes = {
        (p.mix.prompt_tokens, p.mix.output_tokens, p.mix.context_tokens): p.mix
        for p in model.points
        if p.kind == "tpot"
    }
    return active, np.array([slope_features(m)[active] for m in mixes.values()])


def _vertices(g: np.ndarray, a: np.ndarray, slopes: np.ndarray, rank: int) -> list[float]:
    """The asked slope at each vertex of {theta >= 0: g theta = slopes}: ``rank`` terms non-zero, solved."""
    out = []
    for subset in itertools.combinations(range(g.shape[1]), rank):
        sub = g[:, list(subset)]
        solution, *_ = np.linalg.lstsq(sub, slopes, rcond=None)
        exact = np.allclose(sub @ solution, slopes, rtol=EXACT_TOL, atol=EXACT_TOL * float(np.max(np.abs(slopes))))
        if exact and np.all(solution >= -EXACT_TOL * float(np.max(np.abs(solution), initial=1.0))):
            out.append(float(a[list(subset)] @ solution))
    return out
