"""Item noise: what a finite testset adds to a score series, from per-item correctness or from sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# what is known of a testset's item noise (:attr:`TestsetNoise.kind`): each item's correctness, the
# testset's size alone (the binomial bound), or neither
ITEMS, BOUND, NEITHER = "items", "bound", "unknown"
KINDS = (ITEMS, BOUND, NEITHER)


@dataclass(frozen=True)
class TestsetNoise:
    """One run's item noise of one testset, aligned with the run's units (``kind`` in :data:`KINDS`)."""

    kind: str
    mat: np.ndarray | None = None
    sizes: np.ndarray | None = None
    strata: np.ndarray | None = None  # ``items``: each item's label where the set was sampled per label


UNKNOWN = TestsetNoise(NEITHER)


def item_covariance(mat: np.ndarray) -> np.ndarray:
    """The covariance across units of a testset's accuracy that resampling its items adds, ``D D' / (n (n - 1))``
    (``D`` the items' correctness less each unit's mean): unbiased for items drawn from a population."""
    mat = np.asarray(mat, dtype=float)
    n = mat.shape[-1]
    if n < 2:
        return np.full(mat.shape[:-1] + mat.shape[-2:-1], np.nan)
    d = mat - mat.mean(-1, keepdims=True)
    return d @ np.swapaxes(d, -1, -2) / (n * (n - 1))


def binomial_bound(scores: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The white binomial variance ``p (1 - p) / n`` of each unit's share on its diagonal (NaN where ``n`` is
    unknown): an upper bound on what item noise adds to a residual series (the items' positive correlation
    across checkpoints is left out, and a residual maker that removes a mean removes part of it)."""
    p = np.clip(np.asarray(scores, dtype=float), 0.0, 1.0)
    n = np.asarray(sizes, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(n > 0, p * (1 - p) / n, np.nan)
    # a share of 0 or 1 has no binomial variance whatever its size (lm-eval writes acc 0 with stderr 0,
    # from which no size can be read back)
    return np.diag(np.where(p * (1 - p) == 0, 0.0, v))


def half_means(
    mat: np.ndarray, splits: int, rng: np.random.Generator, strata: np.ndarray | None = None
) -> tuple[np.ndarray, tuple[int, int]]:
    """``splits`` random halves of a testset's items: an array (splits, 2, units) of each half's
    accuracy at every unit, and the halves' sizes (n // 2, n - n // 2)."""
    mat = np.asarray(mat, dtype=float)
    n = mat.shape[1]
    a = n // 2
    weights = np.zeros((n, 2 * splits))
    groups = [np.arange(n)] if strata is None else [np.flatnonzero(strata == v) for v in np.unique(strata)]
    for k in range(splits):
        halves: list[list] = [[], []]
        for g in groups:  # half of each stratum; an odd one's last item to the second half unless it is the
            # larger so far: the sizes are (n // 2, n - n // 2), and without strata the halves are perm[:a], perm[a:]
            perm = rng.permutation(g)
            h = len(g) // 2
            halves[0].extend(perm[:h])
            halves[1].extend(perm[h : 2 * h])
            if len(g) % 2:
                halves[int(len(halves[1]) <= len(halves[0]))].append(perm[-1])
        for side, items in enumerate(halves):
            weights[np.asarray(items, int), 2 * k + side] = 1.0 / len(items)
    out = np.nan_to_num(mat) @ weights
    out[~np.isfinite(mat[:, 0])] = np.nan
    return out.T.reshape(splits, 2, -1), (a, n - a)


def noise_summary(mat: np.ndarray) -> dict:
    """One run's item noise of one testset: ``items``, ``noise_sd``, ``noise_lag1`` and ``disagreement``."""
    mat = np.asarray(mat, dtype=float)
    ok = np.isfinite(mat[:, 0]) if mat.size else np.zeros(0, bool)
    m = mat[ok]
    out = {"items": int(mat.shape[1]), "noise_sd": math.nan, "noise_lag1": math.nan, "disagreement": math.nan}
    if len(m) == 0 or m.shape[1] < 2:
        return out
    S = item_covariance(m)
    d = np.diag(S)
    out["noise_sd"] = float(np.mean(np.sqrt(np.maximum(d, 0.0))))
    if len(m) >= 2:
        off = np.diag(S, 1)
        den = np.sqrt(np.maximum(d[:-1] * d[1:], 1e-300))
        out["noise_lag1"] = float(np.mean(off / den))
        out["disagreement"] = float(np.mean(np.abs(np.diff(m, axis=0))))
    return out


def item_matrices(examples: pd.DataFrame, units: list) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """One run's per-item correctness as a (units, items) matrix per testset, and the testsets that cannot be read as
    one."""
    mats: dict[str, np.ndarray] = {}
    problems: dict[str, str] = {}
    if examples is None or not len(examples):
        return mats, problems
    upos = pd.Index(units).get_indexer(examples["unit"])
    keep = np.flatnonzero(upos >= 0)
    ts_codes, ts_names = pd.factorize(examples["testset"].to_numpy()[keep])
    order = np.argsort(ts_codes, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(ts_codes, minlength=len(ts_names)))]
    rows = keep[order]
    correct = examples["correct"].to_numpy(float)
    example = examples["example"].to_numpy()
    for k in np.argsort(np.asarray(ts_names, dtype=str), kind="stable"):  # in name order, as a groupby gives
        ts = str(ts_names[k])
        at = rows[bounds[k] : bounds[k + 1]]
        ui = upos[at]
        ex_codes, ex_names = pd.factorize(example[at], sort=True)
        if len(ex_names) == 0:
            continue
        key = ui.astype(np.int64) * len(ex_names) + ex_codes
        if np.bincount(key, minlength=len(units) * len(ex_names)).max() > 1:
            problems[ts] = f"duplicate (unit, example) predictions for {ts}"
            continue
        counts = np.bincount(ui, minlength=len(units))
        present = counts > 0
        if np.any(counts[present] != len(ex_names)):
            problems[ts] = f"{ts} was evaluated on different examples at different units"
            continue
        mat = np.full((len(units), len(ex_names)), np.nan)
        mat[ui, ex_codes] = correct[at]
        mats[ts] = mat
    return mats, problems


def item_strata(examples: pd.DataFrame, mats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each testset's item labels (the ``stratum`` column), in the order of :func:`item_matrices`' columns; none where
    ambiguous."""
    if examples is None or "stratum" not in examples or not mats:
        return {}
    out = {}
    for ts, g in examples[examples["testset"].isin(list(mats))].groupby("testset", sort=False, observed=True):
        per = g.drop_duplicates(["example", "stratum"])
        if per["example"].duplicated().any():
            continue
        labels = per.set_index("example")["stratum"].sort_index()
        if len(labels) == mats[str(ts)].shape[1]:
            out[str(ts)] = labels.astype(str).to_numpy()
    return out


def run_noise(
    testsets, mats: dict[str, np.ndarray], sizes: dict[str, np.ndarray], strata: dict[str, np.ndarray] | None = None
) -> dict[str, TestsetNoise]:
    """Every testset's :class:`TestsetNoise` for one run: ``items``, else ``bound``, else ``unknown``."""
    out = {}
    for ts in testsets:
        mat = mats.get(ts)
        n = sizes.get(ts)
        if mat is not None:
            out[ts] = TestsetNoise(ITEMS, mat=mat, strata=(strata or {}).get(ts))
        elif n is not None and np.any(np.isfinite(n) & (n > 0)):
            out[ts] = TestsetNoise(BOUND, sizes=np.asarray(n, float))
        else:
            out[ts] = UNKNOWN
    return out
