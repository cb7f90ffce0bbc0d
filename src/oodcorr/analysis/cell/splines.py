"""The spline residualiser's basis of a stack of runs at once, for the design command's simulated runs."""

from __future__ import annotations

import numpy as np

from .residualise import GamSettings, knots, penalty_directions


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


def spline_bases(Z: np.ndarray, settings: GamSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`.residualise.spline_basis` of each run's covariates ``Z`` (B, n, k), built for the stack at once."""
    B, n, k = Z.shape
    distinct = 1 + (np.diff(np.sort(Z, axis=1), axis=1) > 0).sum(1)  # (B, k)
    if np.any(distinct < 4):
        return None  # that run is the line (spline_basis): built run by run
    size = settings.basis_size(n)
    scaled = (Z - Z.min(1, keepdims=True)) / np.ptp(Z, axis=1)[:, None, :]
    t = np.broadcast_to(knots(size), (B, size + 4))  # each column as :func:`.residualise._cubic_penalised` has it
    parts = [_design(np.clip(scaled[:, :, j], 0.0, 1.0), t, 3) @ penalty_directions(size) for j in range(k)]
    Q0, _ = np.linalg.qr(np.concatenate([np.ones((B, n, 1)), scaled], axis=2))
    Xp = np.concatenate(parts, axis=2)
    Xp = Xp - Q0 @ (np.swapaxes(Q0, -1, -2) @ Xp)
    W, sv, _ = np.linalg.svd(Xp, full_matrices=False)
    # a direction the run's points do not reach (a knot interval without points, ties) is dropped by
    # spline_basis; here it keeps its place with d = 0, which no penalty lets into a fit
    d = np.where(sv > 1e-8 * sv.max(axis=1, keepdims=True), sv**2, 0.0)
    return Q0, W, d
