"""Scores as measurements: the partial correlation of the *tasks*, through the testsets' item noise."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ..cell.correlate import POOLING_CAP, fisher_z
from ..cell.inference import (
    corrected_phis,
    dependence,
    dutilleul_n,
    effective_n,
    expected_lag1,
    modified_tests,
    residual_covariances,
)
from ..cell.residualise import spline_basis

SPLITS = 8  # random halvings of the in-domain items per run (each in both orientations)
# a reliability (share of a residual series' variance that is not item noise) below this leaves a
# testset's series mostly noise: a pair the data cannot resolve is then "noise-limited", naming it
NOISE_LIMITED = 0.5


def instrumented_makers(zh: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residual makers of the instrumented fits, for every split and orientation ``o``: ``R = P - P z_o
    z_(1-o)' P / (z_(1-o)' P z_o)`` (..., splits, 2, T, T), and the denominators (..., splits, 2)."""
    za = zh
    zb = zh[..., ::-1, :]
    Pza = za @ P.T if P.ndim == 2 else np.einsum("...ij,...kj->...ki", P, za)
    Pzb = zb @ P.T if P.ndim == 2 else np.einsum("...ij,...kj->...ki", P, zb)
    den = np.einsum("...t,...t->...", Pzb, za)
    with np.errstate(invalid="ignore", divide="ignore"):
        R = P[..., None, None, :, :] - Pza[..., :, None] * Pzb[..., None, :] / den[..., None, None]
    return R, den


def cross_fitted(
    zh: np.ndarray,
    P: np.ndarray,
    X: np.ndarray,
    XH: np.ndarray | None,
    pairs: np.ndarray,
    pos: np.ndarray | None,
    level: float = 0.95,
) -> dict:
    """Cross-fitted partial correlations (docs/measurement.md) of one or many runs at once."""
    zh, X = np.asarray(zh, float), np.asarray(X, float)
    R, _ = instrumented_makers(zh, P)  # (B, K, 2, T, T)
    rho = R @ X[:, None, None]  # (B, K, 2, T, S)
    r, norm = _split_mean_r(rho, pairs)
    # Dutilleul's effective sample size of each pair of cross-fitted series of the first split, as
    # :func:`.inference.effective_n` gives it, averaged over the two orientations
    R0 = R[:, 0]
    res = np.swapaxes(rho[:, 0], -1, -2)  # (B, 2, S, T)
    C0 = R0 @ np.swapaxes(R0, -1, -2)  # (B, 2, T, T)
    if pos is None:
        C = np.broadcast_to(C0[:, :, None], (*res.shape[:3], *C0.shape[-2:]))
    else:
        psi = expected_lag1(R0, pos)  # (B, 2, grid)
        _, phi = corrected_phis(res, R0[:, :, None], pos, psi[:, :, None, :])
        C = residual_covariances(R0[:, :, None], phi, pos)  # (B, 2, S, T, T)
    tr = np.trace(C, axis1=-2, axis2=-1)  # (B, 2, S)
    G = np.einsum("bitu,bjtu->bij", C[:, 0], C[:, 1])  # tr(C_x(o=0) C_y(o=1))
    i, j = pairs[:, 0], pairs[:, 1]
    tr0 = np.trace(C0, axis1=-2, axis2=-1)  # (B, 2)
    g0 = np.einsum("btu,btu->b", C0[:, 0], C0[:, 1])
    iid = dutilleul_n(tr0[:, 0], tr0[:, 1], g0)
    a = dutilleul_n(tr[:, 0, i], tr[:, 1, j], G[:, i, j])
    b = dutilleul_n(tr[:, 1, i], tr[:, 0, j], G[:, j, i])
    n_eff = 0.5 * (np.fmin(a, iid[:, None]) + np.fmin(b, iid[:, None]))
    p, lo, hi, se = modified_tests("pearson", r, n_eff, level)
    sq = (norm**2).mean((1, 2))  # (B, S): the cross-fitted series' sums of squares
    out = {
        "r": r,
        "n_eff": n_eff,
        "p": p,
        "ci_low": lo,
        "ci_high": hi,
        "se_z": se,
        "eiv_x": sq[:, i],
        "eiv_y": sq[:, j],
    }
    # the sums of squares and products of the tasks' residuals, each free of item noise in expectation,
    # averaged over the splits and both orientations (arrays (B, m))
    Pz = np.einsum("tu,bkhu->bkht", P, zh)  # (B, K, 2, T)
    PX = np.einsum("tu,bus->bts", P, X)
    zab = np.einsum("bkt,bkt->bk", Pz[:, :, 0], zh[:, :, 1])  # z_a' P z_b
    xz = np.einsum("bts,bkht->bkhs", PX, zh)  # x' P z_h
    xy = np.einsum("bti,bti->bi", PX[:, :, i], X[:, :, j])
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = xy[:, None] - 0.5 * (xz[:, :, 1, i] * xz[:, :, 0, j] + xz[:, :, 0, i] * xz[:, :, 1, j]) / zab[:, :, None]
    z = zh.mean(2).mean(1)  # the whole set's score (the halves' mean: exact for even sizes)
    Pzf = np.einsum("tu,bu->bt", P, z)
    zz = np.einsum("bt,bt->b", Pzf, z)
    xzf = np.einsum("bts,bt->bs", PX, z)
    xx = np.einsum("bts,bts->bs", PX, X)
    with np.errstate(invalid="ignore", divide="ignore"):
        obs = xx - xzf**2 / zz[:, None]
    if XH is None:
        var = np.full(obs.shape, np.nan)
    else:
        XH = np.asarray(XH, float)
        PXH = np.einsum("tu,bkhus->bkhts", P, XH)
        hz = np.einsum("bkhts,bkgt->bkhgs", PXH, zh)  # x_h' P z_g
        h12 = np.einsum("bkts,bkts->bks", PXH[:, :, 0], XH[:, :, 1])  # x_1' P x_2
        ab = zab[:, :, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            # (x_1 - b_1 z_a)'P(x_2 - b_2 z_b) = x_1'P x_2 - (x_1'P z_b)(x_2'P z_a) / (z_a'P z_b), and with a, b swapped
            parts = [h12 - hz[:, :, 0, 1 - g] * hz[:, :, 1, g] / ab for g in (0, 1)]
        var = 0.5 * (parts[0] + parts[1]).mean(1)
    out.update({"cov": cov.mean(1), "var_x": var[:, i], "var_y": var[:, j], "obs_x": obs[:, i], "obs_y": obs[:, j]})
    return out


def _split_mean_r(rho: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each pair's correlation, x on half 0 and y on half 1 and the other way round, averaged over the
    splits on Fisher's z (B, m); the series' norms (B, K, 2, S)) of cross-fitted series ``rho`` (B, K, 2, T, S)."""
    norm = np.sqrt(np.einsum("bkots,bkots->bkos", rho, rho))
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = rho / norm[:, :, :, None, :]
    C = np.einsum("bkts,bktu->bksu", unit[:, :, 0], unit[:, :, 1])
    i, j = pairs[:, 0], pairs[:, 1]
    z = 0.5 * (fisher_z(C[:, :, i, j], POOLING_CAP) + fisher_z(C[:, :, j, i], POOLING_CAP))  # (B, K, m)
    return np.tanh(z.mean(1)), norm


def bounded(z: np.ndarray, P: np.ndarray, X: np.ndarray, pairs: np.ndarray, noise_z: float) -> np.ndarray:
    """The partial correlation of each pair corrected for in-domain item noise of ``noise_z``, on the observed scale."""
    Pz, PX = P @ z, P @ X
    szz = float(Pz @ Pz)
    sxz = PX.T @ Pz
    sxx = np.einsum("ts,ts->s", PX, PX)
    i, j = pairs[:, 0], pairs[:, 1]
    sxy = np.einsum("ti,ti->i", PX[:, i], PX[:, j])
    ox, oy = sxx[i] - sxz[i] ** 2 / szz, sxx[j] - sxz[j] ** 2 / szz
    left = szz - noise_z
    if not left > 1e-12 * szz:
        return np.full(len(pairs), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (sxy - sxz[i] * sxz[j] / left) / np.sqrt(ox * oy)
    return np.clip(r, -1.0, 1.0)


def disattenuate(r, lo, hi, rel_x, rel_y, rel_lo_x, rel_lo_y, rel_hi_x, rel_hi_y):
    """The tasks' correlation of a run from its cross-fitted one: ``r / sqrt(rel_x rel_y)`` (NaN
    where a reliability is not positive or the result leaves [-1, 1]) and its interval, the
    observed interval divided by the attenuation's range (a bound that reaches 0 leaves that side
    open: +-1; an attenuation that may be 0 at its high end too leaves [-1, 1])."""
    r, lo, hi = (np.asarray(v, float) for v in (r, lo, hi))
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.sqrt(np.asarray(rel_x, float) * np.asarray(rel_y, float))
        a_lo = np.sqrt(np.clip(rel_lo_x, 0, 1) * np.clip(rel_lo_y, 0, 1))
        a_hi = np.sqrt(np.clip(rel_hi_x, 0, 1) * np.clip(rel_hi_y, 0, 1))
        est = np.where((a > 0) & np.isfinite(a), r / a, np.nan)
        est = np.where(np.abs(est) <= 1, est, np.nan)
        low = np.where(lo >= 0, lo / a_hi, np.where(a_lo > 0, lo / a_lo, -1.0))
        high = np.where(hi <= 0, hi / a_hi, np.where(a_lo > 0, hi / a_lo, 1.0))
        # even the attenuation's high end is 0 (the series may be all item noise): nothing bounds the tasks'
        none = ~(a_hi > 0)
        low, high = np.where(none, -1.0, low), np.where(none, 1.0, high)
    ok = np.isfinite(lo) & np.isfinite(hi)
    return est, np.where(ok, np.clip(low, -1, 1), np.nan), np.where(ok, np.clip(high, -1, 1), np.nan)


def ratio_of_means(num, att_x, att_y, level: float = 0.95) -> tuple[float, float, float]:
    """The tasks' correlation pooled over units: the ratio of means with Fieller's interval, clipped to [-1, 1]."""
    num, ax, ay = (np.asarray(v, float) for v in (num, att_x, att_y))
    ok = np.isfinite(num) & np.isfinite(ax) & np.isfinite(ay)
    num, ax, ay = num[ok], ax[ok], ay[ok]
    k = len(num)
    if k == 0:
        return math.nan, math.nan, math.nan
    mx, my = ax.mean(), ay.mean()
    if not (mx > 0 and my > 0):
        return math.nan, -1.0, 1.0
    D = math.sqrt(mx * my)
    est = float(np.clip(num.mean() / D, -1.0, 1.0))  # a ratio of noisy means may pass +-1: read as the bound
    if k < 3:
        return est, math.nan, math.nan
    d = D * (ax / (2 * mx) + ay / (2 * my))
    a_bar, d_bar = num.mean(), d.mean()
    s_aa, s_dd = num.var(ddof=1) / k, d.var(ddof=1) / k
    s_ad = float(np.cov(num, d, ddof=1)[0, 1]) / k
    t2 = float(stats.t.ppf(0.5 + level / 2, k - 1)) ** 2
    qa = d_bar**2 - t2 * s_dd
    qb = a_bar * d_bar - t2 * s_ad
    qc = a_bar**2 - t2 * s_aa
    disc = qb * qb - qa * qc
    if qa <= 0 or disc < 0:
        return est, -1.0, 1.0
    root = math.sqrt(disc)
    lo, hi = (qb - root) / qa, (qb + root) / qa
    return est, float(np.clip(lo, -1, 1)), float(np.clip(hi, -1, 1))


def pool_measured(runs, parts: list, level: float = 0.95) -> dict:
    """The pooled rows' measurement columns, one value per group of run rows (``parts``)."""
    sums = ("task_cov", "task_var_x", "task_var_y", "eiv_var_x", "eiv_var_y", "obs_var_x", "obs_var_y")
    corr = ("r_corrected", "ci_low_corrected", "ci_high_corrected")
    rel = [f"reliability_{s}{e}" for s in ("x", "y", "in_domain") for e in ("", "_low", "_high")]
    out = {c: np.full(len(parts), np.nan) for c in (*corr, *sums, *rel)}
    out["noise"] = np.full(len(parts), "", dtype=object)
    out["eiv_from"] = np.full(len(parts), "", dtype=object)
    arr = {c: runs[c].to_numpy(float) for c in (*corr, *sums, *rel)}
    noise = runs["noise"].to_numpy(object)
    how = runs["eiv_from"].to_numpy(object)
    for g, p in enumerate(parts):
        for c in (*sums, *rel):  # summed, reliabilities averaged
            v = arr[c][p]
            out[c][g] = float(v.sum() if c in sums else np.mean(v)) if len(v) and np.isfinite(v).all() else np.nan
        for side in ("x", "y"):  # with several runs, the ratio of the sums (a mean of ratios is biased)
            task, obs = out[f"task_var_{side}"][g], out[f"obs_var_{side}"][g]
            if len(p) > 1 and np.isfinite(task) and obs > 0:
                out[f"reliability_{side}"][g] = task / obs
        if len(p) == 1:
            for c in corr:
                out[c][g] = arr[c][p[0]]
        else:
            est, lo, hi = ratio_of_means(arr["task_cov"][p], arr["task_var_x"][p], arr["task_var_y"][p], level)
            out["r_corrected"][g], out["ci_low_corrected"][g], out["ci_high_corrected"][g] = est, lo, hi
        out["noise"][g] = "; ".join(dict.fromkeys(t for t in noise[p] if isinstance(t, str) and t))
        kinds = set(how[p])
        out["eiv_from"][g] = "bound" if "bound" in kinds else ("items" if kinds == {"items"} else "")
    return out


def spline_cross_fitted(zh, X, steps, pairs, lams, pos, level: float, settings) -> dict | None:
    """Cross-fitted partial correlations of a spline residualiser (one run), as :func:`cross_fitted` for the line:
    x fitted on half ``a``'s spline and y on half ``b``'s, each series at its own penalty ``lams``."""
    K, T, S = zh.shape[0], X.shape[0], X.shape[1]
    lams = np.asarray(lams, float)
    rho = np.empty((K, 2, T, S))
    first: dict = {}
    for k in range(K):
        for o in (0, 1):
            za, zb = zh[k, o], zh[k, 1 - o]
            cov = za[:, None] if steps is None else np.column_stack([za, steps])
            basis = spline_basis(cov, settings)
            if basis is None:
                return None
            inst, _ = np.linalg.qr(np.column_stack([np.ones(T), zb] + ([steps] if steps is not None else [])))
            pen = basis.W * np.sqrt(basis.d)
            Xr, G = np.hstack([basis.Q0, pen]), np.hstack([inst, pen])
            GX = G.T @ Xr
            p0 = basis.Q0.shape[1]
            for s in range(S):
                A = GX.copy()
                if np.isfinite(lams[s]):
                    A[p0:, p0:] += lams[s] * np.eye(pen.shape[1])
                    M = Xr @ np.linalg.solve(A, G.T)
                else:  # the line: the instrumented fit alone
                    M = basis.Q0 @ np.linalg.solve(inst.T @ basis.Q0, inst.T)
                R = np.eye(T) - M
                rho[k, o, :, s] = R @ X[:, s]
                if k == 0:
                    first[(o, s)] = dependence(rho[0, o, :, s], R, pos)
    r = _split_mean_r(rho[None], pairs)[0][0]
    n_eff = np.array(
        [
            0.5 * (effective_n(first[(0, a)], first[(1, b)]) + effective_n(first[(0, b)], first[(1, a)]))
            for a, b in pairs
        ]
    )
    p, lo, hi, se = modified_tests("pearson", r, n_eff, level)
    return {"r": r, "n_eff": n_eff, "p": p, "ci_low": lo, "ci_high": hi, "se_z": se}
