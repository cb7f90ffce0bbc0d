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


def holm(p) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    q = p[ok]
    m = len(q)
    if m:
        order = np.argsort(q, kind="stable")
        adj = np.maximum.accumulate((m - np.arange(m)) * q[order])
        res = np.empty(m)
        res[order] = np.minimum(adj, 1.0)
        out[ok] = res
    return out


def bh(p) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    q = p[ok]
    m = len(q)
    if m:
        order = np.argsort(q, kind="stable")
        ranked = q[order] * m / np.arange(1, m + 1)
        adj = np.minimum.accumulate(ranked[::-1])[::-1]
        res = np.empty(m)
        res[order] = np.minimum(adj, 1.0)
        out[ok] = res
    return out


def adjust(p, method: str) -> np.ndarray:
    if method == "holm":
        return holm(p)
    if method == "bh":
        return bh(p)
    if method == "none":
        return np.asarray(p, dtype=float).copy()
    raise ValueError(f"unknown correction {method!r}; choose from {', '.join(CORRECTIONS)}")
