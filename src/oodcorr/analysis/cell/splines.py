"""The spline residualiser (:class:`.residualise.SplineBasis`) of a stack of runs at once, for the
design command's simulated runs (:mod:`.stacked`)."""

from __future__ import annotations

import numpy as np

from .residualise import _LAM_RATIOS, GamSettings, knots, penalty_directions


def curve_fits(n: int, settings: GamSettings) -> bool:
    """Whether runs of ``n`` complete points get a curve (below ``settings.min_points`` the spline is
    the line, :func:`.residualise.spline_basis`)."""
    return n >= settings.min_points


def _design(x: np.ndarray, t: np.ndarray, deg: int) -> np.ndarray:
    """B-splines of degree ``deg`` on the clamped knots ``t`` (B, m) at the points ``x`` (B, n) in
    [t[0], t[-1]]: (B, n, m - deg - 1); a point at the right end belongs to the last interval."""
    m = t.shape[1]
    xe = x[..., None]
    N = ((t[:, None, :-1] <= xe) & (xe < t[:, None, 1:])).astype(float)
    end = x >= t[:, -1:]
    N[end] = 0.0
    N[..., m - deg - 2][end] = 1.0
    for p in range(1, deg + 1):
        lo, hi = t[:, : m - 1 - p], t[:, p + 1 :]
        d1, d2 = t[:, p : m - 1] - lo, hi - t[:, 1 : m - p]
        inv1 = np.divide(1.0, d1, out=np.zeros_like(d1), where=d1 > 0)[:, None]  # 0/0 is 0
        inv2 = np.divide(1.0, d2, out=np.zeros_like(d2), where=d2 > 0)[:, None]
        N = (xe - lo[:, None]) * inv1 * N[..., :-1] + (hi[:, None] - xe) * inv2 * N[..., 1:]
    return N


def _penalised(x: np.ndarray, size: int) -> np.ndarray:
    """:func:`.residualise._cubic_penalised` of every row of ``x`` (B, n), scaled to [0, 1]:
    (B, n, size - 2)."""
    t = np.broadcast_to(knots(size), (x.shape[0], size + 4))
    return _design(np.clip(x, 0.0, 1.0), t, 3) @ penalty_directions(size)


def spline_bases(Z: np.ndarray, settings: GamSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`.residualise.spline_basis` of each run's covariates ``Z`` (B, n, k), built for the stack at once."""
    B, n, k = Z.shape
    distinct = 1 + (np.diff(np.sort(Z, axis=1), axis=1) > 0).sum(1)  # (B, k)
    if np.any(distinct < 4):
        return None  # that run is the line (spline_basis): built run by run
    size = settings.basis_size(n)
    scaled = (Z - Z.min(1, keepdims=True)) / np.ptp(Z, axis=1)[:, None, :]
    parts = [_penalised(scaled[:, :, j], size) for j in range(k)]
    Q0, _ = np.linalg.qr(np.concatenate([np.ones((B, n, 1)), scaled], axis=2))
    Xp = np.concatenate(parts, axis=2)
    Xp = Xp - Q0 @ (np.swapaxes(Q0, -1, -2) @ Xp)
    W, sv, _ = np.linalg.svd(Xp, full_matrices=False)
    # a direction the run's points do not reach (a knot interval without points, ties) is dropped by
    # spline_basis; here it keeps its place with d = 0, which no penalty lets into a fit
    d = np.where(sv > 1e-8 * sv.max(axis=1, keepdims=True), sv**2, 0.0)
    return Q0, W, d


def reml_grid(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What REML's choice needs of each run's basis alone (``d`` (B, q)), for :func:`choose`: the
    penalties on the grid (B, L), each direction's share kept at each (B, L, q), and the log
    determinant term (B, L)."""
    lams = np.concatenate([_LAM_RATIOS[None] * d.max(1, keepdims=True), np.full((len(d), 1), np.inf)], axis=1)
    keep = shrink(d, lams)
    with np.errstate(divide="ignore"):
        logdet = -np.log1p(-keep).sum(-1)
    return lams, keep, logdet


def choose(Q0: np.ndarray, W: np.ndarray, grid: tuple, Y: np.ndarray) -> np.ndarray:
    """:meth:`.residualise.SplineBasis.choose` of each run's columns ``Y`` (B, n, m) on its stacked
    basis and its :func:`reml_grid`: (B, m) penalties, ``inf`` where the line is likeliest."""
    n, p0 = Q0.shape[1:]
    lams, keep, logdet = grid
    Yp = Y - Q0 @ (np.swapaxes(Q0, -1, -2) @ Y)
    c2 = (np.swapaxes(W, -1, -2) @ Yp) ** 2  # (B, q, m)
    total = np.einsum("bnm,bnm->bm", Yp, Yp)
    quad = total[:, None] - keep @ c2  # (B, L, m)
    crit = logdet[..., None] + (n - p0) * np.log(np.maximum(quad, 1e-300) / (n - p0))
    return np.take_along_axis(lams, np.argmin(crit, axis=1), axis=1)


def shrink(d: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """(B, L, q): each direction's share kept at each run's penalties ``lam`` (B, L)."""
    lam = lam[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isinf(lam), 0.0, d[:, None, :] / (d[:, None, :] + lam))


def makers(Q0: np.ndarray, W: np.ndarray, d: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``I - S`` of each run at each of its penalties ``lam`` (B, m): (B, m, n, n)."""
    n = Q0.shape[1]
    keep = shrink(d, lam)  # (B, m, q)
    line = np.eye(n) - Q0 @ np.swapaxes(Q0, -1, -2)
    Wt = np.swapaxes(W, -1, -2)[:, None]
    return line[:, None] - (W[:, None] * keep[:, :, None, :]) @ Wt
