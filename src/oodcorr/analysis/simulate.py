"""Simulated score series with a known partial correlation, for tests and benchmarks.

:func:`ar1_series` -- a learning-curve-like in-domain score z over n checkpoints, and
two OOD scores x = a z + e_x, y = b z + e_y whose noises (e_x, e_y) are a stationary
bivariate AR(1) with coefficient ``phi`` and innovation correlation ``rho``. The
partial correlation of x and y given z is then exactly ``rho`` (both noises share
phi, so their stationary correlation equals the innovations'), while consecutive
checkpoints are dependent as they are in a real run. ``phi`` may be a pair
``(phi_x, phi_y)``; then the noises' correlation is
``rho sqrt((1 - phi_x^2)(1 - phi_y^2)) / (1 - phi_x phi_y)`` (:func:`true_rho`).

:func:`drift_series` -- the same shape, but each noise is a random walk (a slow drift
of the checkpoint's ability) plus independent per-checkpoint noise (the testset's
sampling error): not AR(1), a check of the procedure's robustness.

:func:`calibrate` -- runs the analysis' own per-cell procedure (:func:`.inference.assess`)
on many simulated runs and counts rejections (p < 1 - level) and how often the
interval covers the truth.
"""

from __future__ import annotations

import math

import numpy as np

from .correlate import residual_pair
from .inference import assess, dependence
from .resample import cell_rng
from .residualise import GamSettings


def _curve(rng: np.random.Generator, n: int, noise: float) -> np.ndarray:
    t = np.arange(n)
    return 0.5 + 0.3 * (1 - np.exp(-t / max(n / 4, 1))) + noise * rng.normal(size=n)


def true_rho(phi, rho: float) -> float:
    px, py = (phi, phi) if np.isscalar(phi) else phi
    return rho * math.sqrt((1 - px * px) * (1 - py * py)) / (1 - px * py)


def ar1_series(rng: np.random.Generator, n: int, phi, rho: float, noise: float = 0.02):
    px, py = (phi, phi) if np.isscalar(phi) else phi
    L = np.linalg.cholesky([[1.0, rho], [rho, 1.0]])
    u = rng.normal(size=(n, 2)) @ L.T
    e = np.empty((n, 2))
    e[0] = u[0]
    a = np.array([px, py])
    s = np.sqrt(1 - a * a)
    for t in range(1, n):
        e[t] = a * e[t - 1] + s * u[t]
    z = _curve(rng, n, noise)
    return 0.8 * z + noise * e[:, 0], -0.4 * z + noise * e[:, 1], z


def drift_series(rng: np.random.Generator, n: int, rho: float, noise: float = 0.02, drift: float = 0.5):
    """Noise = random walk (step sd ``drift`` x noise, innovations correlated ``rho``) plus
    independent white noise (sd ``noise``); the partial correlation is not a single number
    here (the walk is not stationary), so use it with ``rho = 0`` (size)."""
    L = np.linalg.cholesky([[1.0, rho], [rho, 1.0]])
    walk = np.cumsum(rng.normal(size=(n, 2)) @ L.T, axis=0) * drift
    e = walk + rng.normal(size=(n, 2))
    z = _curve(rng, n, noise)
    return 0.8 * z + noise * e[:, 0], -0.4 * z + noise * e[:, 1], z


def calibrate(
    n: int,
    phi,
    rho: float,
    reps: int,
    inferences=("modified-t",),
    *,
    method: str = "pearson",
    residualiser: str = "linear",
    level: float = 0.95,
    seed: int = 0,
    series: str = "ar1",
    extra: dict | None = None,
    n_boot: int = 999,
    n_perm: int = 999,
) -> dict:
    """Rejection rate and coverage of each procedure on ``reps`` simulated runs.

    Every procedure sees the same simulated runs. ``extra`` maps a name to a callable
    ``f(rp, pos, rng) -> (p, ci_low, ci_high)`` (the benchmark's candidates that are not
    shipped). Returns ``{name: {"reject", "coverage", "width", "n_eff", "low_info", "valid"}}``
    where ``reject`` is the share with p < 1 - level, ``coverage`` the share of intervals
    holding the true partial correlation (a cell with no interval counts as [-1, 1]),
    ``width`` the median interval width, ``n_eff`` the median effective sample size and
    ``low_info`` the share of runs with n_eff < 5.
    """
    rng = np.random.default_rng([seed, n, int(round(1000 * np.mean(phi))), int(round(1000 * rho)) + 1000])
    truth = true_rho(phi, rho) if series == "ar1" else rho
    pos = np.arange(n)
    gam = GamSettings()
    names = list(inferences) + list(extra or {})
    acc = {k: {"reject": 0, "cover": 0, "widths": [], "neffs": [], "low": 0, "valid": 0} for k in names}
    for i in range(reps):
        x, y, z = ar1_series(rng, n, phi, rho) if series == "ar1" else drift_series(rng, n, rho)
        rp = residual_pair(x, y, z, method, residualiser, gam)
        deps = (dependence(rp["rx"], rp["Rx"], pos), dependence(rp["ry"], rp["Ry"], pos))
        results = {}
        for k in inferences:
            a = assess(rp, method, level, pos, k, deps=deps, rng=cell_rng(seed, n, i, k), n_boot=n_boot, n_perm=n_perm)
            results[k] = (a["p"], a["ci_low"], a["ci_high"], a["n_eff"])
        for k, f in (extra or {}).items():
            results[k] = (*f(rp, pos, cell_rng(seed, n, i, k)), math.nan)
        for k, (p, lo, hi, ne) in results.items():
            s = acc[k]
            if math.isfinite(p):
                s["valid"] += 1
                s["reject"] += p < 1 - level
            if not (math.isfinite(lo) and math.isfinite(hi)):
                lo, hi = -1.0, 1.0
            s["cover"] += lo <= truth <= hi
            s["widths"].append(hi - lo)
            s["neffs"].append(ne)
            s["low"] += bool(ne < 5)
    return {
        k: {
            "reject": s["reject"] / reps,
            "coverage": s["cover"] / reps,
            "width": float(np.median(s["widths"])),
            "n_eff": float(np.nanmedian(s["neffs"])) if np.isfinite(s["neffs"]).any() else math.nan,
            "low_info": s["low"] / reps,
            "valid": s["valid"] / reps,
        }
        for k, s in acc.items()
    }
