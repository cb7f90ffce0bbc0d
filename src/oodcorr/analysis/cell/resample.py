"""Uncertainty that respects the order of checkpoints."""

from __future__ import annotations

import hashlib
import itertools
import math
import warnings

import numpy as np
from scipy.stats import norm

from .correlate import RESAMPLED_CAP, corr, corr_batch, fisher_z


def cell_rng(seed: int, *parts) -> np.random.Generator:
    """A generator for one cell: independent of every other cell's, and stable."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return np.random.default_rng([int(seed), int.from_bytes(h[:8], "little")])


def moving_block_indices(n: int, b: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) indices: ceil(n / b) blocks of b consecutive units, start uniform
    over the n - b + 1 possible starts, concatenated and cut to n."""
    b = min(max(1, b), n)
    k = math.ceil(n / b)
    starts = rng.integers(0, n - b + 1, size=(n_boot, k))
    return (starts[:, :, None] + np.arange(b)).reshape(n_boot, k * b)[:, :n]


INTERVALS = ("fisher-z", "percentile")  # checked by :class:`.options.Options`


def interval(r: float, rs: np.ndarray, level: float, kind: str = "fisher-z") -> tuple[float, float]:
    """Interval from resampled correlations ``rs`` (finite values only): :func:`intervals` of one cell."""
    lo, hi = intervals(np.array([r], dtype=float), np.asarray(rs, dtype=float)[:, None], level, kind)
    return float(lo[0]), float(hi[0])


def intervals(r: np.ndarray, RS: np.ndarray, level: float, kind: str = "fisher-z") -> tuple[np.ndarray, np.ndarray]:
    """:func:`interval` of many cells at once: ``r`` (m,) their correlations, ``RS`` (B, m) their
    resampled ones, NaN for a resample that gave none (each column's finite values are its ``rs``)."""
    r = np.asarray(r, dtype=float)
    a = (1 - level) / 2
    with warnings.catch_warnings():  # a column of fewer than two values: NaN, as the caller says
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "percentile":
            lo, hi = np.nanquantile(RS, [a, 1 - a], axis=0)
            return lo, hi
        sd = np.nanstd(fisher_z(RS, RESAMPLED_CAP), axis=0, ddof=1)
    half = norm.ppf(1 - a) * sd
    z0 = fisher_z(r, RESAMPLED_CAP)
    lo = np.where(half == 0, r, np.minimum(np.tanh(z0 - half), r))
    hi = np.where(half == 0, r, np.maximum(np.tanh(z0 + half), r))
    return lo, hi


def bootstrap_ci(
    rx: np.ndarray,
    ry: np.ndarray,
    method: str,
    b: int,
    n_boot: int,
    level: float,
    rng: np.random.Generator,
    kind: str = "fisher-z",
) -> tuple[float, float, int, float]:
    """Interval for the residual correlation under the moving-block bootstrap."""
    if n_boot <= 1:
        return math.nan, math.nan, 0, math.nan
    idx = moving_block_indices(len(rx), b, n_boot, rng)
    rs = corr_batch(rx[idx], ry[idx], method)
    rs = rs[np.isfinite(rs)]
    if len(rs) < max(2, n_boot / 2):
        return math.nan, math.nan, len(rs), math.nan
    lo, hi = interval(corr(rx, ry, method), rs, level, kind)
    se = float(fisher_z(rs, RESAMPLED_CAP).std(ddof=1))
    return lo, hi, len(rs), se


def block_permutation_p(
    rx: np.ndarray, ry: np.ndarray, method: str, b: int, n_perm: int, rng: np.random.Generator
) -> tuple[float, bool]:
    """Two-sided p-value of "no correlation" by permuting blocks of ``ry`` against ``rx``."""
    if n_perm <= 0:
        return math.nan, False
    n, b = len(rx), max(1, b)
    k = math.ceil(n / b)  # blocks of b consecutive units, the last one maybe shorter
    r0 = abs(corr(rx, ry, method))
    if k <= 10 and math.factorial(k) <= n_perm:
        orders = np.array(list(itertools.permutations(range(k))))
        exact = True
    else:
        orders = np.argsort(rng.random((n_perm, k)), axis=1)
        exact = False
    pad = np.arange(k * b).reshape(k, b)  # the blocks padded to length b with -1: one fancy-index builds every ordering
    pad[pad >= n] = -1
    idx = pad[orders].reshape(len(orders), -1)
    idx = idx[idx >= 0].reshape(len(orders), n)
    if method == "kendall":
        rs = np.abs(corr_batch(np.broadcast_to(rx, idx.shape), ry[idx], method))
    else:  # a permutation keeps ry's mean and norm: r* is one gather and one product
        xc, yc = rx - rx.mean(), ry - ry.mean()
        rs = np.abs(yc[idx] @ xc) / math.sqrt((xc @ xc) * (yc @ yc))
    hits = int(np.sum(np.nan_to_num(rs, nan=0.0) >= r0 - 1e-12))
    if exact:
        return hits / len(orders), True
    return (1 + hits) / (1 + n_perm), False
