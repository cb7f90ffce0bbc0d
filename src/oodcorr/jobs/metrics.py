"""Per checkpoint x testset metrics beyond accuracy: macro-F1, ECE and a Wilson interval.

A prediction is first collapsed the way the label mode scores it (``coarse``: ``neutral`` or
``contradiction`` on a 2-way set is ``non-entailment``), so that F1 and ECE judge what accuracy
judges; ECE's :data:`ECE_BINS` bins are (b/15, (b+1)/15].
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

ECE_BINS = 15
CI_LEVEL = 0.95
COLUMNS = ("macro_f1", "ece", "accuracy_ci_low", "accuracy_ci_high")  # the scores table's, in order


def wilson(n_correct: int, n: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """Wilson score interval of ``n_correct / n``; (nan, nan) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = n_correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # exactly 0 (1) when no (every) example is right; rounding would leave a few 1e-17
    low = 0.0 if n_correct == 0 else max(0.0, centre - half)
    high = 1.0 if n_correct == n else min(1.0, centre + half)
    return low, high


def _distinct(*arrays: np.ndarray) -> list:
    """The distinct values of ``arrays``, sorted: ``np.unique`` / ``np.union1d`` without them (numpy's
    set routines import ``numpy.ma``, about 0.1 s of every evaluation process)."""
    return sorted(set().union(*(np.asarray(a).ravel().tolist() for a in arrays)))


def collapse(pred: np.ndarray, gold: np.ndarray, names: list[str], coarse: dict | None) -> np.ndarray:
    """Predictions as the label mode scores them: on a 2-way testset, neutral and contradiction are non-entailment."""
    out = np.asarray(pred).copy()
    present = set(np.asarray(gold).tolist())
    for c, members in (coarse or {}).items():
        idx = {names.index(m) for m in members if m in names}
        if c not in names or present & idx:
            continue
        out[np.fromiter((v in idx for v in out.tolist()), bool, out.size)] = names.index(c)
    return out


def per_class_f1(gold: np.ndarray, pred: np.ndarray) -> dict[int, float]:
    """F1 = 2 TP / (2 TP + FP + FN) = 2 TP / (gold + predicted) of every class (label index) in ``gold`` or ``pred``."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    return {
        int(c): 2 * int(np.sum((gold == c) & (pred == c))) / int(np.sum(gold == c) + np.sum(pred == c))
        for c in _distinct(gold, pred)
    }


def macro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes in ``gold`` or ``pred`` (label indices)."""
    f1 = per_class_f1(gold, pred)
    return float(np.mean(list(f1.values()))) if f1 else math.nan


def confidence(
    logits: np.ndarray, pred: np.ndarray, names: list[str], label_names: list[str], coarse: dict | None
) -> np.ndarray:
    """Probability of each (collapsed) prediction under the softmax of the label scores (coarse: its labels' sum)."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    prob = e / e.sum(axis=1, keepdims=True)  # the softmax; columns follow label_names, the model's outputs
    pred = np.asarray(pred)
    out = np.empty(len(pred))
    for p in _distinct(pred):
        name = names[int(p)]
        members = (coarse or {}).get(name)
        cols = [label_names.index(m) for m in members] if members else [label_names.index(name)]
        rows = pred == p
        out[rows] = prob[np.ix_(rows, cols)].sum(axis=1)
    return out


def ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error over ``n_bins`` equal-width confidence bins (see the module)."""
    conf, correct = np.asarray(conf, dtype=float), np.asarray(correct, dtype=float)
    if conf.size == 0:
        return math.nan
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    total = 0.0
    for b in _distinct(bins):
        sel = bins == b
        total += sel.sum() / conf.size * abs(correct[sel].mean() - conf[sel].mean())
    return float(total)


def compute(gold, pred, correct, logits, names: list[str], label_names: list[str], coarse: dict | None) -> dict:
    """Every metric of one checkpoint x testset."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    correct = np.asarray(correct, dtype=bool)
    n, k = int(gold.size), int(correct.sum())
    low, high = wilson(k, n)
    shown = collapse(pred, gold, names, coarse)
    conf = confidence(np.asarray(logits), shown, names, label_names, coarse) if n else np.empty(0)
    return {
        "macro_f1": macro_f1(gold, shown),
        "ece": ece(conf, correct),
        "accuracy_ci_low": low,
        "accuracy_ci_high": high,
        "ece_bins": ECE_BINS,
        "ci_level": CI_LEVEL,
        "f1_per_label": {names[c]: v for c, v in per_class_f1(gold, shown).items()},
    }
