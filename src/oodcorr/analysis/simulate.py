"""Simulated score series with a known partial correlation, for tests and benchmarks.

:func:`ar1_series` -- a learning-curve-like in-domain score z over n checkpoints, and
two OOD scores x = a z + e_x, y = b z + e_y whose noises (e_x, e_y) are a stationary
bivariate AR(1) with coefficient ``phi`` and innovation correlation ``rho``. The
partial correlation of x and y given z is then exactly ``rho`` (both noises share
phi, so their stationary correlation equals the innovations'), while consecutive
checkpoints are dependent as they are in a real run.

:func:`coverage` -- how often the block-bootstrap interval covers ``rho``, and how
often the block-permutation test rejects when ``rho = 0`` (its size).
"""
from __future__ import annotations

import math

import numpy as np

from .correlate import residual_pair
from .resample import auto_block_length, block_permutation_p, bootstrap_ci


def ar1_series(rng: np.random.Generator, n: int, phi: float, rho: float, noise: float = 0.02):
    L = np.linalg.cholesky([[1.0, rho], [rho, 1.0]])
    u = rng.normal(size=(n, 2)) @ L.T
    e = np.empty((n, 2))
    e[0] = u[0]
    for t in range(1, n):
        e[t] = phi * e[t - 1] + math.sqrt(1 - phi * phi) * u[t]
    t = np.arange(n)
    z = 0.5 + 0.3 * (1 - np.exp(-t / max(n / 4, 1))) + noise * rng.normal(size=n)
    return 0.8 * z + noise * e[:, 0], -0.4 * z + noise * e[:, 1], z


def coverage(n: int, phi: float, rho: float, reps: int, *, block_length: int | None = None, n_boot: int = 999,
             n_perm: int = 499, level: float = 0.95, interval: str = "fisher-z", seed: int = 0) -> dict:
    """Coverage of the interval for ``rho`` and size of the permutation test at rho = 0.

    ``block_length`` None uses the default rule for ordered units."""
    rng = np.random.default_rng(seed)
    b = block_length or auto_block_length(n, True)
    hits = rejects = valid = 0
    for _ in range(reps):
        x, y, z = ar1_series(rng, n, phi, rho)
        rp = residual_pair(x, y, z)
        lo, hi, _ = bootstrap_ci(rp["rx"], rp["ry"], "pearson", b, n_boot, level, rng, interval)
        if math.isfinite(lo):
            valid += 1
            hits += lo <= rho <= hi
        x0, y0, z0 = ar1_series(rng, n, phi, 0.0)
        rp0 = residual_pair(x0, y0, z0)
        p, _ = block_permutation_p(rp0["rx"], rp0["ry"], "pearson", b, n_perm, rng)
        rejects += p < 1 - level
    return {"n": n, "phi": phi, "rho": rho, "block_length": b, "reps": reps, "coverage": hits / max(valid, 1),
            "size": rejects / reps, "interval": interval}
