"""The per-run procedures on stacks of runs at once, for the design command and the item-level simulator: the
observed cell (equal to the workflow's to 1e-8: tests/analysis/test_design.py) and the cell as a measurement."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from ..cell.correlate import corr_batch
from ..cell.inference import corrected_phis, effective_ns, expected_lag1, modified_tests, residual_covariances
from ..cell.residualise import (
    GamSettings,
    linear_maker,
    parse,
    reml_choose,
    reml_grid,
    shrink,
    spline_bases,
    spline_basis,
    spline_makers,
)
from ..items.measurement import cross_fitted
from .measured import cross_fit_columns, exact_maker


def run_statistics(
    scores: np.ndarray,
    level: float = 0.95,
    chunk: int = 512,
    residualiser: str = "linear",
    gam: GamSettings | None = None,
    bases: dict | None = None,
) -> dict:
    """The per-run procedure of the analysis (Pearson) on a stack of runs ``scores`` (runs, checkpoints, 3)."""
    spec = parse(residualiser)
    if not spec.smoother:
        raise ValueError("the batched runs residualise by the line or the spline; pygam's GAM is one fit per series")
    gam = gam or GamSettings()
    scores = np.asarray(scores, dtype=float)
    B, n, _ = scores.shape
    pos = np.arange(n)
    out = {k: np.empty(B) for k in ("r", "n_eff", "phi_x", "phi_y")}
    curve = spec.kind == "spline"
    if curve:
        out["edf_x"], out["edf_y"] = np.empty(B), np.empty(B)
    with threadpool_limits(limits=1, user_api="blas"):
        for s in range(0, B, chunk):
            sc = scores[s : s + chunk]
            Rx, Ry, edf = _makers(sc, spec, gam, bases)
            rx = np.einsum("bij,bj->bi", Rx, sc[:, :, 1])
            ry = np.einsum("bij,bj->bi", Ry, sc[:, :, 2])
            psi = expected_lag1(Rx, pos)  # the line: x and y share their residual maker
            _, px = corrected_phis(rx, Rx, pos, psi)
            _, py = corrected_phis(ry, Ry, pos, psi if Ry is Rx else None)
            C0x = Rx @ np.swapaxes(Rx, -1, -2)
            C0y = C0x if Ry is Rx else Ry @ np.swapaxes(Ry, -1, -2)
            Cx, Cy = residual_covariances(Rx, px, pos), residual_covariances(Ry, py, pos)
            out["n_eff"][s : s + chunk] = effective_ns(Cx, Cy, C0x, C0y)
            out["r"][s : s + chunk] = corr_batch(rx, ry, "pearson")
            out["phi_x"][s : s + chunk], out["phi_y"][s : s + chunk] = px, py
            if curve:
                e = edf if edf is not None else np.full((len(sc), 2), float(spec.n_covariates + 1))
                out["edf_x"][s : s + chunk], out["edf_y"][s : s + chunk] = e[:, 0], e[:, 1]
    p, lo, hi, se = modified_tests("pearson", out["r"], out["n_eff"], level)
    out.update(p=p, ci_low=lo, ci_high=hi, se_z=se)
    return out


def _makers(sc: np.ndarray, spec, gam: GamSettings, bases: dict | None):
    """Each run's residual makers of x and y (B, n, n) and, for the spline, the fits' effective dof (B, 2)."""
    Z = sc[:, :, :1]  # the in-domain score, and the checkpoint's position with a step
    if spec.step:
        Z = np.concatenate([Z, np.broadcast_to(np.arange(sc.shape[1], dtype=float)[None, :, None], Z.shape)], axis=2)
    if spec.kind == "linear" or sc.shape[1] < gam.min_points:
        R = linear_maker(Z)
        return R, R, None
    key = Z.tobytes()
    got = bases.get(key) if bases is not None else None
    if got is None:
        got = spline_bases(Z, gam)
        got = (*got, reml_grid(got[2])) if got else [spline_basis(z, gam) for z in Z]
        if bases is not None:
            bases[key] = got
    if isinstance(got, list):  # built run by run (ties); fewer than 4 distinct scores: that run is the line
        line = linear_maker(Z)
        Rx, Ry, edf = line.copy(), line.copy(), np.full((len(got), 2), Z.shape[2] + 1.0)
        for i, b in enumerate(got):
            if b is not None:
                lam = b.choose(sc[i, :, 1:])
                Rx[i], Ry[i] = b.maker(lam[0]), b.maker(lam[1])
                edf[i] = b.residuals(sc[i, :, 1:], lam)[1]
        return Rx, Ry, edf
    Q0, W, d, grid = got
    lam = reml_choose(Q0, W, grid, sc[:, :, 1:])
    R = spline_makers(Q0, W, d, lam)
    edf = Q0.shape[2] + shrink(d[:, None], lam).sum(-1)
    return R[:, 0], R[:, 1], edf


def measured_statistics(scores: np.ndarray, halves: np.ndarray, level: float = 0.95, chunk: int = 500) -> dict:
    """The measurement columns of a stack of runs whose every testset's items are known (linear residualiser)."""
    scores, halves = np.asarray(scores, dtype=float), np.asarray(halves, dtype=float)
    B, T, _ = scores.shape
    P = exact_maker(T, None)
    pairs, pos = np.array([[0, 1]]), np.arange(T)
    cols: dict = {}
    with threadpool_limits(limits=1, user_api="blas"):
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
