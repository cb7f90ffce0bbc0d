"""Multiple-comparison corrections across the pairs of one heatmap.

A family is every pair of one (model, in-domain set, run or pooled, method,
residualiser): the cells a reader scans for "which pairs are significant". NaN
p-values are not tests and are left out of the family (their p_adj stays NaN).

* ``holm`` (default) controls the family-wise error rate under any dependence
  between the tests -- and the pairs share testsets, so they are dependent. The
  paper's claim is about individual pairs ("this pair's sign differs between
  models"), so the guarantee that no significant cell is a false positive is the
  one that matters.
* ``bh`` (Benjamini-Hochberg) controls the false discovery rate, assuming
  independence or positive dependence; more powerful for screening many pairs.
"""

from __future__ import annotations

import numpy as np

CORRECTIONS = ("holm", "bh", "none")


def _adjust(p, sorted_adjust) -> np.ndarray:
    """Adjusted p-values: NaN stays NaN; ``sorted_adjust`` maps the m finite p-values,
    sorted ascending, to their adjusted values (capped at 1 here)."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    q = p[ok]
    if len(q):
        order = np.argsort(q, kind="stable")
        res = np.empty(len(q))
        res[order] = np.minimum(sorted_adjust(q[order]), 1.0)
        out[ok] = res
    return out


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error rate)."""
    return _adjust(p, lambda q: np.maximum.accumulate((len(q) - np.arange(len(q))) * q))


def bh(p) -> np.ndarray:
    """Benjamini-Hochberg step-up adjustment (controls the false discovery rate)."""
    return _adjust(p, lambda q: np.minimum.accumulate((q * len(q) / np.arange(1, len(q) + 1))[::-1])[::-1])


def adjust(p, method: str) -> np.ndarray:
    if method == "holm":
        return holm(p)
    if method == "bh":
        return bh(p)
    if method == "none":
        return np.asarray(p, dtype=float).copy()
    raise ValueError(f"unknown correction {method!r}; choose from {', '.join(CORRECTIONS)}")
