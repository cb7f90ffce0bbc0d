"""The per-run procedures of the analysis on stacks of runs at once: what the design command
(:mod:`.design`) and the item-level simulator (:mod:`.simulate_items`) read for every simulated run.
:func:`run_statistics` is the observed cell (equal to :func:`.pipeline.analyse`'s per-run rows,
Pearson, the linear residualiser, ordered complete units, to 1e-8: tests/analysis/test_design.py);
:func:`measured_statistics` the same cell as a measurement, every testset's items known (the
cross-fitted correlation, the tasks' moments and the reliabilities of :mod:`.run_measurement`)."""

from __future__ import annotations

import numpy as np

from .correlate import corr_batch
from .inference import corrected_phis, effective_ns, expected_lag1, modified_tests, residual_covariances
from .measurement import cross_fitted
from .residualise import linear_maker, one_blas_thread
from .run_measurement import cross_fit_columns, exact_maker


def _python_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Python's ``min(a, b)`` elementwise (``a`` unless ``b < a``), as :func:`.inference.effective_n` takes it."""
    return np.where(b < a, b, a)


def run_statistics(scores: np.ndarray, level: float = 0.95, chunk: int = 512) -> dict:
    """The per-run procedure of the analysis (:func:`.pipeline.analyse`'s per-run rows, method
    ``pearson``, residualiser ``linear``, ordered complete units) on a stack of runs: ``scores``
    (runs, checkpoints, 3) with the in-domain score, x and y. Returns arrays ``r``, ``p``,
    ``ci_low``, ``ci_high``, ``se_z``, ``n_eff``, ``phi_x``, ``phi_y``, one value per run."""
    with one_blas_thread():
        return _run_statistics(np.asarray(scores, dtype=float), level, chunk)


def _run_statistics(scores: np.ndarray, level: float, chunk: int) -> dict:
    B, n, _ = scores.shape
    pos = np.arange(n)
    out = {k: np.empty(B) for k in ("r", "n_eff", "phi_x", "phi_y")}
    for s in range(0, B, chunk):
        sc = scores[s : s + chunk]
        R = linear_maker(sc[:, :, :1])
        rx = np.einsum("bij,bj->bi", R, sc[:, :, 1])
        ry = np.einsum("bij,bj->bi", R, sc[:, :, 2])
        psi = expected_lag1(R, pos)  # x and y share their residual maker (OLS on the same in-domain score)
        _, px = corrected_phis(rx, R, pos, psi)
        _, py = corrected_phis(ry, R, pos, psi)
        C0 = R @ np.swapaxes(R, -1, -2)
        Cx, Cy = residual_covariances(R, px, pos), residual_covariances(R, py, pos)
        both = effective_ns(Cx, Cy, Cx, Cy)  # the Dutilleul n of the AR(1) covariances ...
        iid = effective_ns(C0, C0, C0, C0)  # ... never above the independent-units one
        out["n_eff"][s : s + chunk] = _python_min(both, iid)
        out["r"][s : s + chunk] = corr_batch(rx, ry, "pearson")
        out["phi_x"][s : s + chunk], out["phi_y"][s : s + chunk] = px, py
    p, lo, hi, se = modified_tests("pearson", out["r"], out["n_eff"], level)
    out.update(p=p, ci_low=lo, ci_high=hi, se_z=se)
    return out


def measured_statistics(scores: np.ndarray, halves: np.ndarray, level: float = 0.95, chunk: int = 500) -> dict:
    """The measurement columns of a stack of runs whose every testset's items are known, as
    :func:`.run_measurement.run_measurements` gives them for the pair (x, y) with the linear
    residualiser: the cross-fitted correlation, the tasks' moments, the reliabilities
    (:func:`.measurement.cross_fitted`, :func:`.run_measurement.cross_fit_columns`) and the in-domain
    series' reliability (the product of its halves over its variance). ``scores`` (runs, checkpoints,
    3): the in-domain score, x and y; ``halves`` (runs, splits, 2, checkpoints, 3): each testset's two
    halves of its items per split. Returns {column: array (runs,)}."""
    scores, halves = np.asarray(scores, dtype=float), np.asarray(halves, dtype=float)
    B, T, _ = scores.shape
    P = exact_maker(T, None)
    pairs, pos = np.array([[0, 1]]), np.arange(T)
    cols: dict = {}
    with one_blas_thread():
        for s in range(0, B, chunk):
            sl = slice(s, s + chunk)
            h = halves[sl]
            got = cross_fit_columns(cross_fitted(h[..., 0], P, scores[sl, :, 1:], h[..., 1:], pairs, pos, level), level)
            z = scores[sl, :, 0]
            total = np.einsum("bt,tu,bu->b", z, P, z)
            prod = np.einsum("bkt,tu,bku->b", h[:, :, 0, :, 0], P, h[:, :, 1, :, 0]) / h.shape[1]
            with np.errstate(invalid="ignore", divide="ignore"):
                got["reliability_in_domain"] = (prod / total)[:, None]
            for c, v in got.items():
                cols.setdefault(c, []).append(v[:, 0])
    return {c: np.concatenate(parts) for c, parts in cols.items()}
