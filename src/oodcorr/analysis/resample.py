"""Uncertainty that respects the order of checkpoints.

Checkpoints of one run are autocorrelated: neighbouring steps share most of their
training, so two OOD series drift together for reasons that have nothing to do
with each other, and i.i.d. p-values and intervals are too narrow. Both tools
below resample *blocks* of consecutive units, which keeps the dependence inside a
block:

* :func:`bootstrap_ci` -- moving-block bootstrap (Kuensch 1989) of the residual
  pairs; the interval is normal in Fisher-z space with the bootstrap standard error
  (default) or the percentile interval;
* :func:`block_permutation_p` -- permutation test of "no correlation": the blocks of
  one residual series are shuffled against the other, which breaks any
  association between the series while keeping each one's short-range dependence.

Both act on the residuals: the residualiser is fitted once on all units and its own
estimation error is not propagated (the linear fit costs one or two degrees of
freedom; see the coverage study in ``benchmarks/analysis_coverage.py``).

Block length: :func:`auto_block_length` -- ``ceil(n ** (1/3))`` for ordered units
(training steps), the rate that is optimal for bootstrap variance estimation (Hall,
Horowitz and Jing 1995), and 1 for exchangeable units (independent runs, e.g. one
row per seed), where the ordinary bootstrap and permutation test are right.

Randomness: every cell draws from its own generator seeded by (seed, a stable hash
of the cell's model, run, testsets, method and residualiser), so a cell's interval
does not change when testsets or runs are added or the order of rows changes.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import warnings

import numpy as np

from .correlate import corr, corr_batch


def auto_block_length(n: int, ordered: bool) -> int:
    return max(1, math.ceil(n ** (1 / 3) - 1e-9)) if ordered and n > 0 else 1


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


INTERVALS = ("fisher-z", "percentile")


def interval(r: float, rs: np.ndarray, level: float, kind: str = "fisher-z") -> tuple[float, float]:
    """Interval from resampled correlations ``rs`` (finite values only).

    ``fisher-z`` (default): r's Fisher z plus/minus the normal quantile times the
    standard deviation of the resampled z values, mapped back with tanh; it stays
    inside [-1, 1] and covered better than the percentile interval for short series
    in the coverage study. ``percentile``: the plain percentile interval.
    """
    a = (1 - level) / 2
    if kind == "percentile":
        lo, hi = np.quantile(rs, [a, 1 - a])
        return float(lo), float(hi)
    if kind != "fisher-z":
        raise ValueError(f"unknown interval {kind!r}; choose from {', '.join(INTERVALS)}")
    from scipy.stats import norm

    clip = 1 - 1e-9  # |r| = 1 happens with very short series; keep z finite
    zs = np.arctanh(np.clip(rs, -clip, clip))
    half = norm.ppf(1 - a) * float(zs.std(ddof=1))
    if half == 0:
        return r, r
    z0 = math.atanh(min(max(r, -clip), clip))
    # centred on r's z by construction; min/max only undo the clipping at |r| = 1
    return min(math.tanh(z0 - half), r), max(math.tanh(z0 + half), r)


def intervals(r: np.ndarray, RS: np.ndarray, level: float, kind: str = "fisher-z") -> tuple[np.ndarray, np.ndarray]:
    """:func:`interval` of many cells at once: ``r`` (m,) their correlations, ``RS`` (B, m) their
    resampled ones, NaN for a resample that gave none (each column's finite values are its ``rs``).
    The same values as :func:`interval` column by column, up to rounding in the sums."""
    r = np.asarray(r, dtype=float)
    a = (1 - level) / 2
    if kind not in INTERVALS:
        raise ValueError(f"unknown interval {kind!r}; choose from {', '.join(INTERVALS)}")
    with warnings.catch_warnings():  # a column of fewer than two values: NaN, as the caller says
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "percentile":
            lo, hi = np.nanquantile(RS, [a, 1 - a], axis=0)
            return lo, hi
        sd = np.nanstd(np.arctanh(np.clip(RS, -1 + 1e-9, 1 - 1e-9)), axis=0, ddof=1)
    from scipy.stats import norm

    clip = 1 - 1e-9
    half = norm.ppf(1 - a) * sd
    z0 = np.arctanh(np.clip(r, -clip, clip))
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
    """Interval for the residual correlation under the moving-block bootstrap.

    Resamples whose residuals are constant (possible for tiny n) are dropped; if more
    than half are, the interval is NaN. Returns (low, high, resamples used, standard
    deviation of the resampled Fisher z).
    """
    if n_boot <= 1:
        return math.nan, math.nan, 0, math.nan
    n = len(rx)
    idx = moving_block_indices(n, b, n_boot, rng)
    if method == "kendall":
        rs = corr_batch(rx[idx], ry[idx], method)
    else:
        # a resample is a multiset of units: Pearson from weighted moments, one matrix product
        W = np.bincount((idx + n * np.arange(n_boot)[:, None]).ravel(), minlength=n_boot * n)
        M = W.reshape(n_boot, n) @ np.column_stack([rx, ry, rx * rx, ry * ry, rx * ry]) / n
        sxx, syy = M[:, 2] - M[:, 0] ** 2, M[:, 3] - M[:, 1] ** 2
        sxy = M[:, 4] - M[:, 0] * M[:, 1]
        tiny = 1e-12 * max(float(np.mean(rx * rx)), float(np.mean(ry * ry)), 1e-300)
        ok = (sxx > tiny) & (syy > tiny)
        rs = np.full(n_boot, np.nan)
        rs[ok] = np.clip(sxy[ok] / np.sqrt(sxx[ok] * syy[ok]), -1.0, 1.0)
    rs = rs[np.isfinite(rs)]
    if len(rs) < max(2, n_boot / 2):
        return math.nan, math.nan, len(rs), math.nan
    lo, hi = interval(corr(rx, ry, method), rs, level, kind)
    se = float(np.arctanh(np.clip(rs, -1 + 1e-9, 1 - 1e-9)).std(ddof=1))
    return lo, hi, len(rs), se


def _blocks(n: int, b: int) -> list[np.ndarray]:
    return [np.arange(s, min(s + b, n)) for s in range(0, n, b)]


def block_permutation_p(
    rx: np.ndarray, ry: np.ndarray, method: str, b: int, n_perm: int, rng: np.random.Generator
) -> tuple[float, bool]:
    """Two-sided p-value of "no correlation" by permuting blocks of ``ry`` against ``rx``.

    The series is cut into consecutive blocks of length b (the last may be shorter).
    When all orderings of the blocks number at most ``n_perm`` they are enumerated
    and the p-value is exact (the observed ordering included); otherwise ``n_perm``
    random orderings give ``(1 + #{|r*| >= |r|}) / (1 + n_perm)``. The smallest
    possible p is therefore 1 / (number of orderings): with few blocks no p-value can
    be small, and that is the honest answer. Returns (p, exact).
    """
    if n_perm <= 0:
        return math.nan, False
    blocks = _blocks(len(rx), max(1, b))
    r0 = abs(corr(rx, ry, method))
    tol = 1e-12
    k = len(blocks)
    if k <= 10 and math.factorial(k) <= n_perm:
        orders = np.array(list(itertools.permutations(range(k))))
        exact = True
    else:
        orders = np.argsort(rng.random((n_perm, k)), axis=1)
        exact = False
    b = max(1, b)
    if len(rx) % b == 0:
        idx = (orders[:, :, None] * b + np.arange(b)).reshape(len(orders), -1)
    else:  # blocks padded to length b with -1, so one fancy-index builds every ordering at once
        pad = np.full((k, b), -1)
        for i, blk in enumerate(blocks):
            pad[i, : len(blk)] = blk
        idx = pad[orders].reshape(len(orders), -1)
        idx = idx[idx >= 0].reshape(len(orders), len(rx))
    if method == "kendall":
        rs = np.abs(corr_batch(np.broadcast_to(rx, idx.shape), ry[idx], method))
    else:  # a permutation keeps ry's mean and norm: r* is one gather and one product
        xc, yc = rx - rx.mean(), ry - ry.mean()
        rs = np.abs(yc[idx] @ xc) / math.sqrt((xc @ xc) * (yc @ yc))
    hits = int(np.sum(np.nan_to_num(rs, nan=0.0) >= r0 - tol))
    if exact:
        return hits / len(orders), True
    return (1 + hits) / (1 + n_perm), False
