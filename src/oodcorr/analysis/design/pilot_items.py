"""The item noise a pilot shows: its testsets' sizes, how persistent their item noise is across
checkpoints, and how large the tasks' residual series are beside it (``oodcorr design --pilot``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..cell.residualise import linear_maker
from ..items.item_noise import item_covariance, item_matrices, noise_summary
from ..simulate.items import item_noise_covariance

DIFFICULTIES = np.round(np.arange(0.0, 0.91, 0.05), 2)  # the grid fit_persistence searches
PERSISTENCES = np.round(np.r_[np.arange(0.0, 0.951, 0.025), 0.97, 0.98], 3)
SHARE_FLOOR = 0.05  # a testset's residual is never taken to be more than 95 % item noise


def lag_correlations(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the correlation of a testset's item noise between checkpoints ``lag`` = 1 .. T - 1 apart, the checkpoint
    pairs behind each) of one run's per-item correctness ``mat`` (checkpoints, items)."""
    m = np.asarray(mat, dtype=float)
    m = m[np.isfinite(m[:, 0])]
    T = len(m)
    if T < 2 or m.shape[1] < 2:
        return np.full(0, np.nan), np.zeros(0)
    S = item_covariance(m)
    d = np.diag(S)
    corr, count = np.full(T - 1, np.nan), np.zeros(T - 1)
    for lag in range(1, T):
        a, b = d[:-lag], d[lag:]
        ok = (a > 0) & (b > 0)
        if ok.any():
            corr[lag - 1] = float(np.mean(np.diag(S, lag)[ok] / np.sqrt(a[ok] * b[ok])))
            count[lag - 1] = ok.sum()
    return corr, count


def fit_persistence(corr: np.ndarray, weight: np.ndarray, accuracy: float) -> tuple[float, float]:
    """(difficulty, persistence) of the item model whose noise correlates ``corr[lag - 1]`` at ``lag`` apart,
    by weighted least squares over the lags on the grid :data:`DIFFICULTIES` x :data:`PERSISTENCES`."""
    corr, weight = np.asarray(corr, dtype=float), np.asarray(weight, dtype=float)
    ok = np.isfinite(corr) & (weight > 0)
    if not ok.any():
        return math.nan, math.nan
    L = len(corr)
    d, p = np.meshgrid(DIFFICULTIES, PERSISTENCES, indexing="ij")
    acc = np.full(L + 1, min(max(float(accuracy), 0.02), 0.98))
    cov = item_noise_covariance(acc, 1, d.reshape(-1, 1, 1), p.reshape(-1, 1, 1))
    model = cov[:, 0, 1:] / cov[:, 0, :1]  # (grid, lags)
    loss = ((model[:, ok] - corr[ok]) ** 2 * weight[ok]).sum(-1)
    best = int(np.argmin(loss))
    return float(d.ravel()[best]), float(p.ravel()[best])


def stationary_sd(sample_sd: float, phi: float, checkpoints: int) -> float:
    """The sd of a stationary AR(1) series (coefficient ``phi``) whose residuals on an intercept and a
    learning curve over ``checkpoints`` have the sample sd ``sample_sd`` (``ddof`` 2): the residual
    maker ``R`` keeps ``tr(R Gamma R) / (T - 2)`` of its variance (``Gamma`` the AR(1) correlations)."""
    T = int(checkpoints)
    if not (np.isfinite(sample_sd) and np.isfinite(phi) and T >= 4):
        return math.nan
    t = np.arange(T)
    R = linear_maker((1 - np.exp(-t / max(T / 4, 1)))[:, None])
    gamma = float(phi) ** np.abs(t[:, None] - t[None, :])
    kept = float(np.trace(R @ gamma @ R)) / (T - 2)
    return float(sample_sd) / math.sqrt(kept) if kept > 0 else math.nan


def _per_testset_items(long: pd.DataFrame, examples: pd.DataFrame) -> dict:
    """{testset: {"items", "accuracy", "lag_corr", "weight", "disagreement"}} over the pilot's runs."""
    acc: dict = {}
    for (model, run), ex in examples.groupby(["model", "run"], sort=False):
        units = sorted(long.loc[(long["model"] == model) & (long["run"] == run), "unit"].unique())
        mats, _ = item_matrices(ex, units)
        for ts, mat in mats.items():
            a = acc.setdefault(ts, {"items": [], "accuracy": [], "lags": [], "disagree": []})
            a["items"].append(mat.shape[1])
            a["accuracy"].append(float(np.nanmean(mat)))
            a["disagree"].append(noise_summary(mat)["disagreement"])
            a["lags"].append(lag_correlations(mat))
    out = {}
    for ts, a in acc.items():
        L = max(len(c) for c, _ in a["lags"])  # each run's lags padded to the longest run's
        s = sum(np.pad(np.where(np.isfinite(c), c * n, 0.0), (0, L - len(c))) for c, n in a["lags"])
        w = sum(np.pad(n, (0, L - len(n))) for _, n in a["lags"])
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = np.where(w > 0, s / w, np.nan)
        out[ts] = {
            "items": int(np.median(a["items"])),
            "accuracy": float(np.mean(a["accuracy"])),
            "lag_corr": corr,
            "weight": w,
            "disagreement": float(np.nanmedian(a["disagree"])) if np.isfinite(a["disagree"]).any() else math.nan,
        }
    return out


def item_estimates(
    long: pd.DataFrame,
    examples: pd.DataFrame | None,
    sizes: dict | None,
    runs: pd.DataFrame,
    resid_sd: dict,
    mean_score: dict,
    phi: float,
    checkpoints: int,
    notes: list,
) -> dict:
    """What the pilot says about its testsets' item noise."""
    own = set(long["in_domain"].astype(str))
    per: dict = {}
    if examples is not None and len(examples):
        for ts, e in _per_testset_items(long, examples).items():
            d, p = fit_persistence(e["lag_corr"], e["weight"], e["accuracy"])
            per[ts] = {
                "items": e["items"],
                "accuracy": e["accuracy"],
                "disagreement": e["disagreement"],
                "difficulty": None if not np.isfinite(d) else d,
                "persistence": None if not np.isfinite(p) else p,
            }
    present = set(long["testset"].astype(str))
    for ts, n in (sizes or {}).items():
        if ts in present and ts not in per and n:
            per[ts] = {"items": int(n), "persistence": None, "difficulty": None}
    fitted = [e for e in per.values() if e.get("persistence") is not None]
    out: dict = {"per_testset": dict(sorted(per.items())), "persistence": None, "difficulty": None}
    if fitted:
        out["persistence"] = float(np.median([e["persistence"] for e in fitted]))
        out["difficulty"] = float(np.median([e["difficulty"] for e in fitted]))
        out["how"] = (
            "fitted per testset to the correlation of its item noise between checkpoints 1 to "
            f"{checkpoints - 1} apart (per-item correctness)"
        )
    else:
        notes.append(
            "the persistence of the item noise is not estimated: the pilot has no per-item correctness "
            "(--pilot-examples, or the workflow's predictions files beside its scores table)"
        )
    ids = [per[t]["items"] for t in own if t in per]
    ood = [per[t]["items"] for t in resid_sd if t in per]
    out["in_domain_items"] = int(np.median(ids)) if ids else None
    out["ood_items"] = int(np.median(ood)) if ood else None
    # each testset's median series reliability over the pilot's runs (with sizes only, of its low end)
    vals: dict[str, list[float]] = {}
    for side in ("x", "y"):
        c = f"reliability_{side}{'' if fitted else '_low'}"
        if c not in runs:
            continue
        for ts, v in zip(runs[side].astype(str), runs[c].to_numpy(float)):
            if np.isfinite(v):
                vals.setdefault(ts, []).append(v)
    rel = {ts: float(np.median(v)) for ts, v in vals.items()}
    task_sds = []
    for ts, sds in resid_sd.items():
        if ts in rel and sds:
            share = min(max(rel[ts], SHARE_FLOOR), 1.0)
            task = stationary_sd(float(np.median(sds)) * math.sqrt(share), phi, checkpoints)
            per.setdefault(ts, {"items": None, "persistence": None, "difficulty": None})
            per[ts].update(reliability=rel[ts], residual_sd=task)
            task_sds.append(task)
    out["residual_sd"] = float(np.median(task_sds)) if task_sds else None
    if not task_sds:
        notes.append(
            "the residual series' sd is not estimated: no OOD testset's reliability is known (per-item "
            "correctness, or sizes for a share of items)"
        )
    accs = [float(np.mean(v)) for t, v in mean_score.items() if t not in own and 0 < float(np.mean(v)) < 1]
    out["accuracy"] = float(np.median(accs)) if accs else None
    out["per_testset"] = dict(sorted(per.items()))
    return out
