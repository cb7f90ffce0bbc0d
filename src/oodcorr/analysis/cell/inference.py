"""A cell's interval and p-value: a modified t-test whose effective n comes from the residuals' autocorrelation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .correlate import FINITE_CAP, fisher_z
from .resample import block_permutation_p, bootstrap_ci

PHI_MAX = 0.99  # largest AR(1) coefficient used: beyond it a series holds about one independent point
_GRID = np.linspace(0.0, PHI_MAX, 100)


def _lag_sums(M: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``out[..., d]``: the sum of ``M[..., i, j]`` over units i, j ``d`` checkpoints apart."""
    d = np.abs(pos[:, None] - pos[None, :]).ravel()
    size = int(d.max()) + 1 if len(d) else 1
    if np.all(np.diff(pos) == 1):  # consecutive checkpoints: lag d is the d-th diagonals
        out = np.empty((*M.shape[:-2], size))
        out[..., 0] = np.trace(M, axis1=-2, axis2=-1)
        for k in range(1, size):
            out[..., k] = np.trace(M, k, axis1=-2, axis2=-1) + np.trace(M, -k, axis1=-2, axis2=-1)
        return out
    per_lag = np.zeros((len(d), size))
    per_lag[np.arange(len(d)), d] = 1.0
    return M.reshape(*M.shape[:-2], -1) @ per_lag


def ar1_corr(phi, pos: np.ndarray) -> np.ndarray:
    """AR(1) correlation matrix of units at checkpoint positions ``pos`` (whole numbers), one per coefficient of
    ``phi``: each power computed once per coefficient, then gathered."""
    lags = np.abs(pos[:, None] - pos[None, :]).astype(int)
    return (np.asarray(phi, dtype=float)[..., None] ** np.arange(lags.max() + 1, dtype=float))[..., lags]


def lag1(resid: np.ndarray, pos: np.ndarray):
    """Lag-1 autocorrelation of residual series ``resid`` (..., n) over consecutive checkpoints (gaps skipped)."""
    nxt = np.flatnonzero(np.diff(pos) == 1)
    den = np.einsum("...i,...i->...", resid, resid)
    num = np.einsum("...i,...i->...", resid[..., nxt], resid[..., nxt + 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((den > 0) & bool(len(nxt)), num / np.where(den > 0, den, 1.0), 0.0)


def expected_lag1(R: np.ndarray, pos: np.ndarray, phis: np.ndarray = _GRID) -> np.ndarray:
    """Expected lag-1 autocorrelation of the residuals ``R e`` (``R`` (..., n, n)) when ``e`` is AR(1) with
    each coefficient in ``phis`` (a ratio of expectations): (..., len(phis))."""
    Rt = np.swapaxes(R, -1, -2)
    A = (np.abs(pos[:, None] - pos[None, :]) == 1) / 2.0  # r'Ar = sum r_t r_{t+1}: 1/2 at consecutive checkpoints
    num = _lag_sums(Rt @ A @ R, pos)
    den = _lag_sums(Rt @ R, pos)
    powers = phis[:, None] ** np.arange(num.shape[-1])[None, :]
    return (num @ powers.T) / (den @ powers.T)


def corrected_phis(
    resid: np.ndarray, R: np.ndarray, pos: np.ndarray, psi: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(observed lag-1 autocorrelation, design-corrected AR(1) coefficient in [0, PHI_MAX]) of residual series
    ``resid`` (..., n) with their residual makers ``R`` (..., n, n) at the checkpoint positions ``pos``: the
    coefficient at which the expected lag-1 autocorrelation of the residuals equals the observed one (interpolated
    on a grid); 0 at or below what independent units give, PHI_MAX above what any coefficient gives."""
    raw = np.asarray(lag1(resid, pos), dtype=float)
    if len(pos) < 3 or not np.any(np.diff(pos) == 1):
        return raw, np.zeros_like(raw)
    psi = expected_lag1(R, pos) if psi is None else psi
    above = psi >= raw[..., None]
    j = np.argmax(above, axis=-1)[..., None]
    lo = np.maximum(j - 1, 0)
    psi_j, psi_lo = np.take_along_axis(psi, j, -1)[..., 0], np.take_along_axis(psi, lo, -1)[..., 0]
    g_j, g_lo = _GRID[j[..., 0]], _GRID[lo[..., 0]]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (raw - psi_lo) / (psi_j - psi_lo)
        phi = g_lo + t * (g_j - g_lo)
    phi = np.where(above.any(axis=-1), phi, PHI_MAX)
    return raw, np.where(raw <= psi[..., 0], 0.0, phi)


@dataclass(frozen=True)
class Dependence:
    """One residual series' dependence: its AR(1) coefficients and its covariance ``C = R S_phi R'`` (up to scale)."""

    phi: float
    C: np.ndarray
    C0: np.ndarray  # R R': the residuals' covariance if the units were independent


def dependence(resid: np.ndarray, R: np.ndarray, pos: np.ndarray | None) -> Dependence:
    """``pos``: checkpoint positions of the units (None: exchangeable units, phi = 0)."""
    C0 = R @ R.T
    if pos is None:
        return Dependence(0.0, C0, C0)
    phi = float(corrected_phis(resid, R, pos)[1])
    C = C0 if phi == 0 else residual_covariances(R, phi, pos)
    return Dependence(phi, C, C0)


def dutilleul_n(tx, ty, cross):
    """Dutilleul's effective sample size ``1 + tr(A) tr(B) / tr(AB)``; NaN where ``cross`` is not positive."""
    ok = np.asarray(cross) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, 1.0 + tx * ty / np.where(ok, cross, 1.0), np.nan)


def residual_covariances(R: np.ndarray, phi, pos: np.ndarray) -> np.ndarray:
    """``C = R S_phi R'``: the residuals' covariance (up to scale) when ``e`` is AR(1) with coefficient ``phi``."""
    return R @ ar1_corr(phi, pos) @ np.swapaxes(R, -1, -2)


def effective_ns(Cx: np.ndarray, Cy: np.ndarray, C0x: np.ndarray, C0y: np.ndarray) -> np.ndarray:
    """:func:`effective_n` of stacks of pairs, never above the one of independent units (``C0x``, ``C0y``)."""

    def dutilleul(A, B):
        trace = np.trace(A, axis1=-2, axis2=-1), np.trace(B, axis1=-2, axis2=-1)
        return dutilleul_n(*trace, np.einsum("...ij,...ij->...", A, B))

    ar1, iid = dutilleul(Cx, Cy), dutilleul(C0x, C0y)
    return np.where(iid < ar1, iid, ar1)  # Python's min, as effective_n takes it: NaN where ar1 is


def effective_n(dx: Dependence, dy: Dependence, iid: bool = False) -> float:
    """Dutilleul's effective sample size of the pair, never above the one of independent units (``iid``: that one,
    n - 1 for OLS on one covariate)."""
    return float(effective_ns(dx.C0 if iid else dx.C, dy.C0 if iid else dy.C, dx.C0, dy.C0))


def modified_tests(method: str, r, n_eff, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`modified_test` over arrays of r and n_eff (one method): (p, ci_low, ci_high, se_z)."""
    r = np.asarray(r, dtype=float)
    n_eff = np.asarray(n_eff, dtype=float)
    q = 0.5 + level / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "kendall":
            ok = np.isfinite(r) & (n_eff > 1)
            m = np.where(ok, n_eff, 2.0)
            sd = np.sqrt(2 * (2 * m + 5) / (9 * m * (m - 1)))  # Kendall's tau's sd at m independent units
            p = 2 * stats.norm.sf(np.abs(r) / sd)
            c = np.minimum(stats.norm.ppf(q) * sd, 1.0)
        else:
            dof = n_eff - 2
            ok = np.isfinite(r) & (dof >= 1)
            d = np.where(ok, dof, 1.0)
            rr = np.clip(r, -1.0, 1.0)
            t = np.abs(rr) * np.sqrt(d / np.maximum(1 - rr * rr, 1e-300))
            p = np.where(np.abs(rr) >= 1, 0.0, 2 * stats.t.sf(t, d))
            tc = stats.t.ppf(q, d)
            c = tc / np.sqrt(d + tc * tc)
        full = c >= 1  # the interval is [-1, 1]: its half-width below is replaced
        h = np.arctanh(np.where(full, 0.0, c))
        z = fisher_z(r, FINITE_CAP)
        lo = np.where(full, -1.0, np.tanh(z - h))
        hi = np.where(full, 1.0, np.tanh(z + h))
        se = np.where(full, np.inf, h / stats.norm.ppf(q))
    nan = np.full(r.shape, np.nan)
    return tuple(np.where(ok, v, nan) for v in (p, lo, hi, se))


def modified_test(method: str, r: float, n_eff: float, level: float) -> tuple[float, float, float, float]:
    """(p, ci_low, ci_high, se_z): the modified test of r = 0 and the interval that inverts it."""
    return tuple(float(v[0]) for v in modified_tests(method, [r], [n_eff], level))


INFERENCES = ("modified-t", "iid", "block")


def assess(
    rp: dict,
    r: float,
    method: str,
    pos: np.ndarray | None,
    opts,
    deps: tuple[Dependence, Dependence] | None = None,
    rng: np.random.Generator | None = None,
    defer: bool = False,
) -> dict:
    """Everything the table reports about the uncertainty of the correlation ``r`` of the residual pair ``rp``."""
    rx, ry = rp["rx"], rp["ry"]
    level, inference = opts.level, opts.inference
    out = dict.fromkeys(("n_eff", "phi_x", "phi_y", "p_perm", "block_length"), math.nan)
    if inference == "block":
        n = len(rx)
        b = min(int(opts.block_length), n) if opts.block_length != "auto" else 1
        if opts.block_length == "auto" and pos is not None and n > 0:  # ordered units: the cube root of n
            b = max(1, math.ceil(n ** (1 / 3) - 1e-9))
        lo, hi, _, se = bootstrap_ci(rx, ry, method, b, opts.n_boot, level, rng, opts.interval)
        pperm, exact = block_permutation_p(rx, ry, method, b, opts.n_perm, rng)
        if b > 1:
            p, how = pperm, ("exact " if exact else "") + "block-permutation"
        else:
            dx, dy = deps or (dependence(rx, rp["Rx"], None), dependence(ry, rp["Ry"], None))
            p = modified_test(method, r, effective_n(dx, dy, iid=True), 0.95)[0]
            how = "kendall-test" if method == "kendall" else "t-test"
        out.update(p=p, ci_low=lo, ci_high=hi, se_z=se, p_method=how, p_perm=pperm, block_length=b)
        return out
    dx, dy = deps or (dependence(rx, rp["Rx"], pos), dependence(ry, rp["Ry"], pos))
    if inference == "iid":
        n_eff, how = effective_n(dx, dy, iid=True), "t-test (units independent)"
    else:
        n_eff = effective_n(dx, dy)
        how = "modified t-test (AR(1) effective n)" if pos is not None else "t-test (exchangeable units)"
    if method == "kendall":
        how = how.replace("t-test", "Kendall z-test")
    out.update(n_eff=n_eff, p_method=how)
    if pos is not None:
        out.update(phi_x=dx.phi, phi_y=dy.phi)
    if not defer:
        p, lo, hi, se = modified_test(method, r, n_eff, level)
        out.update(p=p, ci_low=lo, ci_high=hi, se_z=se)
    return out
