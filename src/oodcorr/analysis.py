"""Partial correlations between OOD testsets across checkpoints, in-domain score regressed out.

For one run, each checkpoint is a unit of observation with an in-domain score
z and OOD scores x, y, ... For every pair (x, y) the residualiser removes what
z explains from x and from y; the correlation of the residuals is the partial
correlation. A degenerate pair gives NaN and says why in ``note``; no number is
ever made up.

Residualisers are looked up by name in ``RESIDUALISERS`` and correlation
methods in ``METHODS``, so new ones are entries, not branches.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

RUN_KEYS = ["model", "in_domain", "n_train", "seed", "run_id"]


def residualise_linear(y: np.ndarray, covars: np.ndarray) -> np.ndarray:
    """Residuals of an OLS fit of ``y`` on an intercept plus ``covars`` (n x k)."""
    X = np.column_stack([np.ones(len(y)), covars])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    return y - X @ beta


RESIDUALISERS: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], int]] = {
    # name: (function, degrees of freedom it uses per covariate)
    "linear": (residualise_linear, 1),
}


def _rank(a: np.ndarray) -> np.ndarray:
    return stats.rankdata(a)


METHODS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    # method: transform applied to every variable before the Pearson partial correlation
    # (Spearman's partial correlation is Pearson's on ranks, as in pingouin)
    "pearson": lambda a: a,
    "spearman": _rank,
}


def partial_corr(x, y, covars, method: str = "pearson", residualiser: str = "linear") -> dict:
    """Partial correlation of x and y given covars; returns r, p, n, dof and a note if NaN."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    Z = np.asarray(covars, dtype=float)
    if Z.ndim == 1:
        Z = Z[:, None]
    out = {"r": math.nan, "p": math.nan, "n": 0, "note": ""}
    keep = np.isfinite(x) & np.isfinite(y) & np.all(np.isfinite(Z), axis=1)
    n = int(keep.sum())
    out["n"] = n
    k = Z.shape[1]
    if n < k + 3:
        out["note"] = f"only {n} complete points; need at least {k + 3}"
        return out
    x, y, Z = x[keep], y[keep], Z[keep]
    for name, v in (("x", x), ("y", y)):
        if np.ptp(v) == 0:
            out["note"] = f"{name} is constant across the {n} points"
            return out
    if np.any(np.ptp(Z, axis=0) == 0):
        out["note"] = "the covariate (in-domain score) is constant"
        return out
    tf = METHODS[method]
    fn, _ = RESIDUALISERS[residualiser]
    Zt = np.column_stack([tf(Z[:, j]) for j in range(k)])
    rx, ry = fn(tf(x), Zt), fn(tf(y), Zt)
    sx, sy = np.sqrt(rx @ rx), np.sqrt(ry @ ry)
    scale = max(np.abs(tf(x)).max(), np.abs(tf(y)).max(), 1e-300)
    if sx <= 1e-12 * scale * math.sqrt(n) or sy <= 1e-12 * scale * math.sqrt(n):
        out["note"] = "the covariate explains x or y exactly (zero residual)"
        return out
    r = float(np.clip((rx @ ry) / (sx * sy), -1.0, 1.0))
    dof = n - 2 - k
    out["r"] = r
    out["dof"] = dof
    if abs(r) < 1.0:
        t = r * math.sqrt(dof / (1 - r * r))
        out["p"] = float(2 * stats.t.sf(abs(t), dof))
    else:
        out["p"] = 0.0
    return out


def run_pairs(scores: pd.DataFrame, methods=("pearson",), residualisers=("linear",)) -> pd.DataFrame:
    """One row per (run, OOD pair, method, residualiser) from a long scores table.

    ``scores`` has the RUN_KEYS columns plus step, testset, role and accuracy.
    """
    rows = []
    for keys, run in scores.groupby(RUN_KEYS, sort=True):
        base = dict(zip(RUN_KEYS, keys))
        id_sets = sorted(run.loc[run.role == "in-domain", "testset"].unique())
        ood = sorted(run.loc[run.role == "ood", "testset"].unique())
        dup = run.duplicated(["step", "testset"])
        if dup.any():
            note = f"duplicate (step, testset) rows: {int(dup.sum())}"
            for (a, b), m, res in itertools.product(itertools.combinations(ood, 2), methods, residualisers):
                rows.append({**base, "x": a, "y": b, "method": m, "residualiser": res,
                             "r": math.nan, "p": math.nan, "n": 0, "note": note})
            continue
        wide = run.pivot(index="step", columns="testset", values="accuracy").sort_index()
        for (a, b), m, res in itertools.product(itertools.combinations(ood, 2), methods, residualisers):
            if len(id_sets) != 1:
                r = {"r": math.nan, "p": math.nan, "n": 0, "note": f"need one in-domain testset, found {id_sets}"}
            else:
                r = partial_corr(wide[a], wide[b], wide[id_sets[0]], m, res)
            rows.append({**base, "in_domain_testset": id_sets[0] if len(id_sets) == 1 else "",
                         "x": a, "y": b, "method": m, "residualiser": res,
                         "r": r["r"], "p": r["p"], "n": r["n"], "note": r["note"]})
    cols = RUN_KEYS + ["in_domain_testset", "x", "y", "method", "residualiser", "r", "p", "n", "note"]
    return pd.DataFrame(rows, columns=cols)


def fisher_mean(rs) -> float:
    """Mean correlation via Fisher's z (NaNs ignored); NaN if none is finite.

    |r| is clipped at 0.9999 (z = 4.95) so a single perfect correlation from a
    very short series cannot dominate the mean.
    """
    rs = np.asarray([r for r in rs if np.isfinite(r)], dtype=float)
    if not len(rs):
        return math.nan
    return float(np.tanh(np.mean(np.arctanh(np.clip(rs, -0.9999, 0.9999)))))


def model_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per model, in-domain set, pair, method and residualiser: Fisher-z mean over runs."""
    keys = ["model", "in_domain", "x", "y", "method", "residualiser"]
    rows = []
    for k, g in pairs.groupby(keys, sort=True):
        finite = g["r"].dropna()
        rows.append({**dict(zip(keys, k)), "r_mean": fisher_mean(g["r"]), "n_runs": len(g),
                     "n_runs_finite": len(finite),
                     "n_significant": int((g["p"] < 0.05).sum()),
                     "note": "" if len(finite) else "; ".join(sorted(set(g["note"])))})
    return pd.DataFrame(rows, columns=keys + ["r_mean", "n_runs", "n_runs_finite", "n_significant", "note"])
