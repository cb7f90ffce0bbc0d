"""Partial correlation of two score series given covariates, by residualising."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .residualise import (
    Degenerate,
    GamSettings,
    Spec,
    gam_residuals,
    linear,
    linear_maker,
    parse,
    spline_basis,
)

METHODS = ("pearson", "spearman", "kendall")

# Fisher's z = atanh(r) is infinite at |r| = 1; each use caps |r| first, at one of these, by purpose:
# a statistical cap (z at most 4.95): one perfect r from a short run cannot dominate a mean
POOLING_CAP = 0.9999
# numerical guards, which change nothing below them: a resampled |r| of 1 in the bootstrap's spread ...
RESAMPLED_CAP = 1 - 1e-9
# ... and a cell's own |r| of 1 (3 units) in the modified t-test's interval
FINITE_CAP = 1 - 1e-15
# not a cap of z: a simulated run's true partial correlation stays inside it, so its series can be drawn
SIMULATED_CAP = 0.999


def fisher_z(r, cap: float) -> np.ndarray:
    """Fisher's z, ``atanh(r)``, of ``r`` (any shape) with ``|r|`` capped at ``cap`` (one of the caps above) first."""
    return np.arctanh(np.clip(np.asarray(r, dtype=float), -cap, cap))


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"unknown correlation method {method!r}; choose from {', '.join(METHODS)}")
    return method


def transform(method: str, a: np.ndarray) -> np.ndarray:
    """What every variable goes through before residualising: ranks for Spearman."""
    return stats.rankdata(a) if method == "spearman" else a


def corr(rx: np.ndarray, ry: np.ndarray, method: str) -> float:
    """Correlation of two residual series (Pearson, or Kendall's tau-b): :func:`corr_batch` of one row."""
    return float(corr_batch(rx[None], ry[None], method)[0])


def corr_batch(RX: np.ndarray, RY: np.ndarray, method: str, chunk: int = 256) -> np.ndarray:
    """Row-wise correlations of two (B, n) arrays; NaN for a row where either is constant."""
    RX = np.asarray(RX, dtype=float)
    RY = np.asarray(RY, dtype=float)
    if method == "kendall":
        n = RX.shape[1]
        i, j = np.triu_indices(n, 1)
        out = np.empty(len(RX))
        for s in range(0, len(RX), chunk):
            dx = np.sign(RX[s : s + chunk, i] - RX[s : s + chunk, j])
            dy = np.sign(RY[s : s + chunk, i] - RY[s : s + chunk, j])
            den = np.sqrt(np.count_nonzero(dx, axis=1) * np.count_nonzero(dy, axis=1).astype(float))
            with np.errstate(invalid="ignore", divide="ignore"):
                out[s : s + chunk] = (dx * dy).sum(1) / den
        out[~np.isfinite(out)] = np.nan
        return out
    A = RX - RX.mean(1, keepdims=True)
    Bm = RY - RY.mean(1, keepdims=True)
    sa, sb = (A * A).sum(1), (Bm * Bm).sum(1)
    scale = np.maximum(np.abs(RX).max(1), np.abs(RY).max(1)) ** 2 * RX.shape[1] + 1e-300
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (A * Bm).sum(1) / np.sqrt(sa * sb)
    r[(sa <= 1e-24 * scale) | (sb <= 1e-24 * scale)] = np.nan
    return np.clip(r, -1.0, 1.0)


def min_points(spec: Spec, gam: GamSettings) -> int:
    """Complete points a pair needs: k + 3 with k covariates, at least the GAM's ``min_points`` for the GAM."""
    need = spec.n_covariates + 3
    return max(need, gam.min_points) if spec.kind == "gam" else need


def residual_pair(
    x,
    y,
    covars,
    method: str = "pearson",
    residualiser: str = "spline",
    gam: GamSettings | None = None,
    cache: dict | None = None,
    names=("x", "y"),
    lams: tuple | None = None,
) -> dict:
    """Residuals of x and y given the covariates, on the complete rows."""
    spec = parse(residualiser)
    check_method(method)
    gam = gam or GamSettings()
    cache = {} if cache is None else cache
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    Z = np.asarray(covars, dtype=float)
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.shape[1] != spec.n_covariates:
        raise ValueError(
            f"residualiser {residualiser!r} needs {spec.n_covariates} covariate column(s), got {Z.shape[1]}"
        )
    mask = np.isfinite(x) & np.isfinite(y) & np.all(np.isfinite(Z), axis=1)
    n = int(mask.sum())
    need = min_points(spec, gam)
    if n < need:
        what = "" if n == len(x) else f" of {len(x)} (the others have a missing value)"
        raise Degenerate(f"only {n} complete points{what}; the {residualiser} residualiser needs at least {need}")
    all_rows = n == len(x)
    xm, ym = (x, y) if all_rows else (x[mask], y[mask])
    for label, v in ((names[0], xm), (names[1], ym)):
        if v.max() == v.min():
            raise Degenerate(f"{label} is constant across the {n} points")
    key_mask = mask.tobytes()
    zkey = ("covariates", method, spec.name, key_mask, Z.tobytes())
    Zt = cache.get(zkey)
    if Zt is None:
        Zm = Z if all_rows else Z[mask]
        const = [j for j in range(Zm.shape[1]) if np.ptp(Zm[:, j]) == 0]
        if const:
            Zt = Degenerate(
                "the covariate (in-domain score) is constant" if const[0] == 0 else "the training step is constant"
            )
        else:
            Zt = np.column_stack([transform(method, Zm[:, j]) for j in range(Zm.shape[1])])
            basis = spline_basis(Zt, gam) if spec.kind == "spline" else None
            line = spec.kind == "linear" or (spec.kind == "spline" and basis is None)
            Zt = (Zt, linear_maker(Zt) if line else None, basis)
        cache[zkey] = Zt
    if isinstance(Zt, Degenerate):
        raise Zt
    Zt, maker, basis = Zt
    note = ""  # a spline cell's, where :func:`.residualise.spline_basis` fitted no curve
    if spec.kind == "spline" and basis is None and n < gam.min_points:
        note = f"only {n} complete points: the spline needs {gam.min_points}, so the line was used"
    elif spec.kind == "spline" and basis is None:
        note = "fewer than 4 distinct in-domain scores: no curve can be fitted, so the line was used"
    out = {"mask": mask, "n": n, "form_note": note}
    for label, name, v, lam in zip("xy", names, (xm, ym), lams or (None, None)):
        key = (name, method, spec.name, key_mask, repr(lam))
        if key in cache:
            res = cache[key]
        else:
            vt = transform(method, v)
            if maker is not None:  # OLS: the residual maker is shared by every series with these rows
                res = (*linear(vt, Zt), None, maker)
            elif basis is not None:  # the spline: the basis is shared, each series its own penalty
                lam = basis.choose(vt[:, None])[0] if lam is None else lam
                resid, edf = basis.residuals(vt[:, None], np.array([lam]))
                res = (resid[:, 0], float(edf[0]), lam, basis.maker(lam))
            else:
                res = gam_residuals(vt, Zt, gam, lam)  # pygam's GAM: one fit per series
            scale = max(float(np.abs(vt).max()), 1e-300)
            if math.sqrt(res[0] @ res[0]) <= 1e-10 * scale * math.sqrt(n):
                res = Degenerate(f"the covariate explains {name} exactly (zero residual)")
            cache[key] = res
        if isinstance(res, Degenerate):
            raise res
        out[f"r{label}"], out[f"dof_{label}"], out[f"lam_{label}"], out[f"R{label}"] = res
    return out
