"""Multiple-comparison corrections across the pairs of one heatmap."""

from __future__ import annotations

import numpy as np

CORRECTIONS = ("holm", "bh", "none")


def _adjust(p, sorted_adjust) -> np.ndarray:
    """Adjusted p-values along the last axis (each row one family; NaN stays NaN) by ``sorted_adjust``, capped at 1."""
    p = np.asarray(p, dtype=float)
    if p.size == 0:
        return p.copy()
    rows = p.reshape(-1, p.shape[-1]) if p.ndim else p.reshape(1, 1)
    ok = np.isfinite(rows)
    order = np.argsort(np.where(ok, rows, np.inf), axis=-1, kind="stable")
    q = np.take_along_axis(np.where(ok, rows, np.inf), order, axis=-1)
    m = ok.sum(-1, keepdims=True)
    i = np.arange(rows.shape[-1])[None, :]
    with np.errstate(invalid="ignore"):
        adj = np.minimum(sorted_adjust(q, m, i, i < m), 1.0)
    out = np.empty_like(rows)
    np.put_along_axis(out, order, adj, axis=-1)
    return np.where(ok, out, np.nan).reshape(p.shape)


def _holm(q, m, i, valid):
    return np.maximum.accumulate(np.where(valid, (m - i) * q, -np.inf), axis=-1)


def _bh(q, m, i, valid):
    stepped = np.where(valid, q * m / (i + 1), np.inf)
    return np.minimum.accumulate(stepped[..., ::-1], axis=-1)[..., ::-1]


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error rate); a 2-D ``p`` is one family per row."""
    return _adjust(p, _holm)


def bh(p) -> np.ndarray:
    """Benjamini-Hochberg step-up adjustment (controls the false discovery rate); a 2-D ``p``: a family per row."""
    return _adjust(p, _bh)


def simes(p) -> np.ndarray:
    """Simes' combination of each family's p-values (``min_j m p_(j) / j``; a 2-D ``p`` is one family per row)."""
    adjusted = bh(p)
    best = np.min(np.where(np.isnan(adjusted), np.inf, adjusted), axis=-1, initial=np.inf)
    return np.where(np.isinf(best), np.nan, best)


def adjust(p, method: str) -> np.ndarray:
    """``p`` adjusted by ``method``; a 2-D ``p`` is one family per row (the design adjusts many tables at once)."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; choose from {', '.join(CORRECTIONS)}")
    return np.asarray(p, dtype=float).copy() if method == "none" else {"holm": holm, "bh": bh}[method](p)
