"""Pooling runs of one model, and the agreement table across models.

Pooling: the per-run partial correlations of one model (same in-domain set, all
seeds and training sizes) are averaged in Fisher-z space, with equal weight per
run. Why this and not pooled residuals with run fixed effects: each run is its own
trajectory with its own in-domain curve, so a residualiser fitted per run is the
estimand the paper defines; pooling residuals would let long runs (more
checkpoints) and runs with large score swings dominate, and would treat
checkpoints from different runs as one autocorrelated series. Runs are the
replicates of the experiment (random seeds), so they get equal weight, and the
spread *between* runs measures the uncertainty of the mean honestly, whatever the
autocorrelation within runs: the pooled interval and p-value are a t-interval and
one-sample t-test on the runs' z values (k - 1 degrees of freedom). With a single
run the pooled row repeats that run's interval and p-value.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

Z_CLIP = 0.9999  # |r| cap before arctanh (z = 4.95): one perfect r from a short run cannot dominate


def fisher_mean(rs) -> float:
    """Mean correlation via Fisher's z (NaNs ignored); NaN if none is finite."""
    rs = np.asarray([r for r in rs if np.isfinite(r)], dtype=float)
    if not len(rs):
        return math.nan
    return float(np.tanh(np.mean(np.arctanh(np.clip(rs, -Z_CLIP, Z_CLIP)))))


POOL_KEYS = ["model", "in_domain", "x", "y", "method", "residualiser"]


def pool_runs(rows: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """One ``run == "pooled"`` row per model, in-domain set, pair, method and residualiser."""
    out = []
    for key, g in rows.groupby(POOL_KEYS, sort=True, dropna=False):
        fin = g[np.isfinite(g["r"].astype(float))]
        k = len(fin)
        row = {**dict(zip(POOL_KEYS, key)), "run": "pooled", "r": math.nan, "ci_low": math.nan,
               "ci_high": math.nan, "p": math.nan, "p_param": math.nan, "p_perm": math.nan,
               "n": int(fin["n"].sum()), "n_units": int(g["n_units"].sum()), "n_runs": len(g),
               "n_runs_finite": k, "block_length": math.nan, "note": "", "p_method": ""}
        if k == 0:
            notes = sorted({n for n in g["note"] if n})
            row["note"] = "no run gave a value: " + "; ".join(notes)
        elif k == 1:
            one = fin.iloc[0]
            row.update(r=float(one["r"]), ci_low=one["ci_low"], ci_high=one["ci_high"], p=one["p"],
                       p_param=one["p_param"], p_perm=one["p_perm"], block_length=one["block_length"],
                       p_method=f"{one['p_method']} (single run)")
        else:
            z = np.arctanh(np.clip(fin["r"].to_numpy(float), -Z_CLIP, Z_CLIP))
            m, sd = float(z.mean()), float(z.std(ddof=1))
            row["r"] = math.tanh(m)
            row["p_method"] = f"t-test across {k} runs (Fisher z)"
            if sd > 0:
                half = stats.t.ppf(0.5 + level / 2, k - 1) * sd / math.sqrt(k)
                row.update(ci_low=math.tanh(m - half), ci_high=math.tanh(m + half),
                           p=float(stats.ttest_1samp(z, 0.0).pvalue))
            else:
                row["note"] = f"all {k} runs gave the same r; no spread to test against"
        out.append(row)
    return pd.DataFrame(out)


VERDICTS = ("conflict", "agree", "same sign", "opposite sign", "single model", "no data")


def agreement(pooled: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per OOD pair (and in-domain set, method, residualiser): each model's sign and
    significance, and a verdict on whether the models agree.

    ``verdict`` is one of: ``conflict`` (at least one model significantly positive and
    one significantly negative: the paper's phenomenon), ``agree`` (every model
    significant with the same sign), ``same sign`` (all point estimates share a sign,
    not all significant), ``opposite sign`` (point estimates differ in sign, not both
    significantly), ``single model`` (fewer than two models with a value), ``no data``.
    Significance is ``p_adj < alpha`` of the pooled row.
    """
    keys = ["in_domain", "x", "y", "method", "residualiser"]
    rows = []
    for key, g in pooled.groupby(keys, sort=True, dropna=False):
        g = g.sort_values("model")
        r = g["r"].to_numpy(float)
        fin = np.isfinite(r)
        sig = fin & (g["p_adj"].to_numpy(float) < alpha)
        pos, neg = fin & (r > 0), fin & (r < 0)
        n_fin = int(fin.sum())
        if n_fin == 0:
            verdict = "no data"
        elif (sig & pos).any() and (sig & neg).any():
            verdict = "conflict"
        elif n_fin < 2:
            verdict = "single model"
        elif sig[fin].all() and (pos[fin].all() or neg[fin].all()):
            verdict = "agree"
        elif pos[fin].all() or neg[fin].all():
            verdict = "same sign"
        else:
            verdict = "opposite sign"
        detail = "; ".join(
            f"{m}: " + (f"{v:+.2f}{'*' if s else ''}" if np.isfinite(v) else "n/a")
            for m, v, s in zip(g["model"], r, sig))
        rows.append({**dict(zip(keys, key)), "n_models": len(g), "n_finite": n_fin,
                     "n_positive": int(pos.sum()), "n_negative": int(neg.sum()),
                     "n_sig_positive": int((sig & pos).sum()), "n_sig_negative": int((sig & neg).sum()),
                     "verdict": verdict, "by_model": detail})
    cols = keys + ["n_models", "n_finite", "n_positive", "n_negative", "n_sig_positive", "n_sig_negative",
                   "verdict", "by_model"]
    return pd.DataFrame(rows, columns=cols)
