"""The answer about the tasks: what the ladder reads when scores are measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from ...core.answer import reliability_text
from ..items.measurement import NOISE_LIMITED, ratio_of_means

ABOUT = {
    "items": "tasks",
    "bound": "tasks (in-domain noise bounded by its size)",
    "unknown": "observed scores (item noise unknown)",
}


def pair_regimes(runs: pd.DataFrame, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per pair, the regime (docs/measurement.md): ``items`` (``bound``) where every run's ``r_eiv`` is known (one
    of them from the bound), else ``unknown``."""
    out = np.full(n_groups, "unknown", dtype=object)
    if "r_eiv" not in runs:
        return out
    r = runs["r"].to_numpy(float)
    e = runs["r_eiv"].to_numpy(float)
    how = runs["eiv_from"].astype(str).to_numpy() if "eiv_from" in runs else np.full(len(runs), "")
    fin = np.isfinite(r)
    need = np.bincount(group, weights=fin, minlength=n_groups)
    have = np.bincount(group, weights=fin & np.isfinite(e), minlength=n_groups)
    bound = np.bincount(group, weights=fin & (how == "bound"), minlength=n_groups)
    ok = (need > 0) & (have == need)
    out[ok] = "items"
    out[ok & (bound > 0)] = "bound"
    return out


def _ratio_low(num: np.ndarray, den: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``num``, ``den`` (..., units: models): ``sum num / sum den`` over the finite units and its one-sided
    lower ``level`` bound from the linearisation ``num - R den`` (NaN below 2 units)."""
    ok = np.isfinite(num) & np.isfinite(den)
    k = ok.sum(-1)
    n0, d0 = np.where(ok, num, 0.0), np.where(ok, den, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        R = np.where((k > 0) & (d0.sum(-1) > 0), n0.sum(-1) / d0.sum(-1), np.nan)
        dev = np.where(ok, (num - R[..., None] * den) ** 2, 0.0).sum(-1)
        se = np.sqrt(dev / (k * (k - 1))) / (d0.sum(-1) / k)
        low = R - stats.t.ppf(level, np.maximum(k - 1, 1)) * se
    return R, np.where(k >= 2, low, np.nan)


def attenuation(pooled: pd.DataFrame, group: np.ndarray, n_groups: int, level: float = 0.95) -> dict:
    """Per pair, from its models' pooled rows: the testsets' reliabilities and ``band``, the attenuation's low end."""
    rel = [f"reliability_{side}{end}" for side in ("x", "y", "in_domain") for end in ("", "_low")]
    cols = [f"{c}_{side}" for c in ("task_var", "obs_var", "eiv_var") for side in ("x", "y")] + rel
    slot = pd.Series(group).groupby(group).cumcount().to_numpy()  # each model's place among its pair's
    present = np.zeros((n_groups, slot.max() + 1), bool)
    present[group, slot] = True
    models = {}
    for c in cols:
        models[c] = np.full(present.shape, np.nan)
        if c in pooled:
            models[c][group, slot] = pooled[c].to_numpy(float)
    return attenuation_of(models, present, level)


def attenuation_of(models: dict, present: np.ndarray, level: float) -> dict:
    """:func:`attenuation` of (pairs, models) arrays of the models' pooled columns, the models where ``present``."""

    def all_finite(v):
        return (np.isfinite(v) | ~present).all(-1)

    def finite_mean(v):
        k = present.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(all_finite(v) & (k > 0), np.where(present, v, 0.0).sum(-1) / k, np.nan)

    out, band = {}, []
    for side in ("x", "y"):
        task, obs, eiv = (models[f"{c}_{side}"] for c in ("task_var", "obs_var", "eiv_var"))
        est, low = _ratio_low(task, obs, level)
        moments = all_finite(task) & all_finite(obs)
        out[f"reliability_{side}"] = np.where(moments, est, np.nan)
        out[f"reliability_{side}_low"] = np.where(moments, low, finite_mean(models[f"reliability_{side}_low"]))
        with_eiv = all_finite(task) & all_finite(eiv)
        band.append(np.where(with_eiv, _ratio_low(task, eiv, level)[1], out[f"reliability_{side}_low"]))
    for c in ("reliability_in_domain", "reliability_in_domain_low"):
        out[c] = finite_mean(models[c])
    both = np.isfinite(band[0]) & np.isfinite(band[1])
    out["band"] = np.where(both, np.sqrt(np.maximum(band[0], 0.0) * np.maximum(band[1], 0.0)), 1.0)
    return out


def corrected_consensus(
    pooled: pd.DataFrame, group: np.ndarray, n_groups: int, regime: np.ndarray, envelope: dict, band, level: float
) -> dict:
    """Per pair: ``r_consensus_corrected`` and its interval."""
    out = {k: np.full(n_groups, np.nan) for k in ("r", "lo", "hi")}
    need = ("task_cov", "task_var_x", "task_var_y")
    have = all(c in pooled for c in need)
    k = pooled["n_runs_finite"].to_numpy(float) if "n_runs_finite" in pooled else np.ones(len(pooled))
    k = np.where(k > 0, k, np.nan)
    for g in range(n_groups):
        sel = group == g
        if have and regime[g] == "items":
            m = [pooled[c].to_numpy(float)[sel] / k[sel] for c in need]
            if all(np.isfinite(v).all() for v in m) and sel.sum() >= 2:
                out["r"][g], out["lo"][g], out["hi"][g] = ratio_of_means(*m, level=level)
                continue
        lo, hi = envelope["lo"][g], envelope["hi"][g]
        a = band[g]
        if regime[g] == "unknown" or not (np.isfinite(lo) and np.isfinite(hi)):
            continue
        out["lo"][g] = max(-1.0, lo if lo >= 0 else (lo / a if a > 0 else -1.0))
        out["hi"][g] = min(1.0, hi if hi <= 0 else (hi / a if a > 0 else 1.0))
    return out


def noise_limited(x: str, y: str, in_domain: str, rel: dict, g: int) -> str:
    """The testsets of pair ``g`` whose residual series is mostly item noise, with their reliability, or ""."""
    said = []
    for name, side in ((x, "x"), (y, "y"), (in_domain, "in_domain")):
        est, low = rel[f"reliability_{side}"][g], rel[f"reliability_{side}_low"][g]
        if np.isfinite(est) and est < NOISE_LIMITED:
            said.append(f"{name} (reliability {reliability_text(est, low)})")
        elif not np.isfinite(est) and np.isfinite(low) and low < NOISE_LIMITED:
            said.append(f"{name} (reliability at least {max(low, 0.0):.2f}: its size bounds the noise)")
    return ", ".join(said)
