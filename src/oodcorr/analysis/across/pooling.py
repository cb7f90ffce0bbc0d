"""Pooling runs of one model: a random-effects meta-analysis of the runs' correlations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import elementwise

from ..cell.correlate import POOLING_CAP, fisher_z
from ..cell.inference import PHI_MAX


def fisher_mean(rs) -> float:
    """Mean correlation via Fisher's z (NaNs ignored); NaN if none is finite."""
    rs = np.asarray([r for r in rs if np.isfinite(r)], dtype=float)
    if not len(rs):
        return math.nan
    return float(np.tanh(np.mean(fisher_z(rs, POOLING_CAP))))


def generalised_q(z: np.ndarray, v: np.ndarray, mask: np.ndarray, t2: np.ndarray) -> np.ndarray:
    """The generalised Q of estimates ``z`` (studies, groups, members; within variances ``v``, where
    ``mask``) around their groups' means with weights ``1 / (v + t2)``, one ``t2`` per study."""
    w = np.where(mask, 1.0 / (v + t2[:, None, None]), 0.0)
    sw = w.sum(-1, keepdims=True)
    m = (w * z).sum(-1, keepdims=True) / np.where(sw > 0, sw, 1.0)
    d2 = np.where(mask, (z - m) ** 2, 0.0)
    return (w * d2).sum((-2, -1))


def cochran_q(z, v, mask) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``z`` (rows, estimates; within variances ``v``, the estimates where ``mask``): Cochran's Q around
    the inverse-variance mean, and I^2, the share of Q above its degrees of freedom."""
    z = np.where(mask, np.asarray(z, dtype=float), 0.0)
    v = np.where(mask, np.asarray(v, dtype=float), 1.0)
    q = generalised_q(z[:, None], v[:, None], mask[:, None], np.zeros(len(z)))
    df = np.maximum(mask.sum(-1) - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        i2 = np.where(q > 0, np.maximum(0.0, (q - df) / np.where(q > 0, q, 1.0)), 0.0)
    return q, i2


def solve_tau2(z, v, mask, target) -> np.ndarray:
    """Per study, the between-estimate variance ``t2 >= 0`` at which :func:`generalised_q` of ``z`` (studies,
    groups, members) equals ``target``; 0 where Q is at or below it already at 0, or the target is 0."""
    z = np.where(mask, np.asarray(z, dtype=float), 0.0)
    v = np.where(mask, np.asarray(v, dtype=float), 1.0)
    target = np.broadcast_to(np.asarray(target, dtype=float), z.shape[:1])
    t = np.zeros(z.shape[0])
    q0 = generalised_q(z, v, mask, t)
    todo = np.flatnonzero((q0 > target) & (target > 0))
    if not len(todo):
        return t
    z, v, mask, target = z[todo], v[todo], mask[todo], target[todo]
    k = np.maximum(mask.sum(-1, keepdims=True), 1)
    spread = np.where(mask, (z - z.sum(-1, keepdims=True) / k) ** 2, 0.0).sum((-2, -1))

    def excess(t2, rows):
        rows = rows.astype(int)
        return generalised_q(z[rows], v[rows], mask[rows], t2) - target[rows]

    rows = np.arange(len(todo), dtype=float)
    found = elementwise.find_root(excess, (0.0, spread / target), args=(rows,), tolerances={"xrtol": 1e-14})
    t[todo] = found.x
    return t


def combine(z, v, level: float = 0.95) -> dict:
    """Pool 2 or more estimates ``z`` with within variances ``v`` (finite, > 0): see docs/analysis.md. Two: the
    fixed-effect mean. From 3 on, the random-effects mean: Paule-Mandel tau^2, the Hartung-Knapp interval on
    k - 1 degrees of freedom but never narrower than the normal one, and the p-value of the same rule."""
    z, v = np.asarray(z, dtype=float), np.asarray(v, dtype=float)
    k = len(z)
    if k != 2:
        res = random_effects_batch(z[None], v[None], np.ones((1, k), bool), level)
        out = {key: float(val[0]) for key, val in res.items()}
        return {**out, "how": f"random effects across {k} runs (Hartung-Knapp, at least the normal interval)"}
    qn = float(stats.norm.ppf(0.5 + level / 2))
    w = 1 / v
    m, se = float((w * z).sum() / w.sum()), 1 / math.sqrt(w.sum())
    q, i2 = (float(x[0]) for x in cochran_q(z[None], v[None], np.ones((1, k), bool)))
    p = float(2 * stats.norm.sf(abs(m) / se))
    return {
        "z": m,
        "lo": m - qn * se,
        "hi": m + qn * se,
        "p": p,
        "se_z": se,
        "tau2": math.nan,
        "i2": i2,
        "q": q,
        "how": "fixed effect across 2 runs",
    }


def random_effects_batch(z, v, mask, level: float = 0.95) -> dict:
    """The random-effects mean (:func:`combine`) of many sets at once: ``z``, ``v``, ``mask`` (sets, estimates)."""
    z = np.where(mask, np.asarray(z, dtype=float), 0.0)
    v = np.where(mask, np.asarray(v, dtype=float), 1.0)
    k = mask.sum(-1)
    ok = k >= 2
    kk = np.where(ok, k, 2)
    qn = float(stats.norm.ppf(0.5 + level / 2))
    q, i2 = cochran_q(z, v, mask)
    with np.errstate(invalid="ignore", divide="ignore"):
        t2 = solve_tau2(z[:, None], v[:, None], mask[:, None], kk - 1)
        ws = np.where(mask, 1 / (v + t2[:, None]), 0.0)
        m = (ws * z).sum(-1) / ws.sum(-1)
        se_re = 1 / np.sqrt(ws.sum(-1))
        q_hk = (ws * np.where(mask, z - m[:, None], 0.0) ** 2).sum(-1) / (kk - 1)
        tq = stats.t.ppf(0.5 + level / 2, kk - 1)
        half = np.maximum(tq * np.sqrt(q_hk) * se_re, qn * se_re)
        p_hk = np.where(q_hk > 0, 2 * stats.t.sf(np.abs(m) / (np.sqrt(q_hk) * se_re), kk - 1), 0.0)
        p = np.maximum(p_hk, 2 * stats.norm.sf(np.abs(m) / se_re))
    out = {"z": m, "lo": m - half, "hi": m + half, "p": p, "se_z": half / qn, "tau2": t2, "i2": i2, "q": q}
    return {key: np.where(ok, val, np.nan) for key, val in out.items()}


POOL_KEYS = ["model", "in_domain", "pool_group", "x", "y", "method", "residualiser"]


TWO_RUNS = ("none", "fixed-effect")


def _pool_one(g: pd.DataFrame, level: float, sfx: str = "", two_runs: str = "none") -> tuple[dict, str]:
    """The pooled columns of one group of run rows (read from ``r<sfx>``, ``se_z<sfx>``, ...), and a note."""
    r = g["r" + sfx].to_numpy(float)
    se = g["se_z" + sfx].to_numpy(float)
    fin = np.isfinite(r)
    use = fin & np.isfinite(se) & (se > 0)
    k, k_fin = int(use.sum()), int(fin.sum())
    nan = {**dict.fromkeys(("r", "ci_low", "ci_high", "p", "se_z", "tau2", "i2"), math.nan), "p_method": ""}
    nan["n_runs_finite"] = k
    left = k_fin - k
    note = (
        f"{left} of {k_fin} runs with a value left out: too little effective information for an interval"
        if left
        else ""
    )
    if k == 0:
        if k_fin:
            return {**nan, "r": fisher_mean(r)}, (
                f"no run had enough effective information for an interval "
                f"({k_fin} with a value; r is their Fisher-z mean, descriptive only)"
            )
        notes = sorted({n for n in g["note"] if isinstance(n, str) and n}) if "note" in g else []
        return nan, "no run gave a value" + (": " + "; ".join(notes) if notes else "")
    if k == 1:
        one = g[use].iloc[0]
        how = one["p_method"] if "p_method" in g else ""
        return {
            **nan,
            **{c: float(one[c + sfx]) for c in ("r", "ci_low", "ci_high", "p", "se_z")},
            "p_method": f"{how} (single run)".strip(),
            "n_runs_finite": 1,
        }, note
    res = combine(fisher_z(r[use], POOLING_CAP), se[use] ** 2, level)
    out = {c: math.tanh(res[z]) for c, z in (("r", "z"), ("ci_low", "lo"), ("ci_high", "hi"))}
    out.update({c: res[c] for c in ("p", "se_z", "tau2", "i2")}, p_method=res["how"], n_runs_finite=k)
    if k == 2 and two_runs == "fixed-effect":
        said = (
            "2 runs: a fixed-effect combination, which assumes both runs share one "
            "correlation (between-run variation cannot be estimated from 2 runs)"
        )
    elif k == 2:
        out.update(ci_low=math.nan, ci_high=math.nan, p=math.nan, se_z=math.nan, p_method="")
        said = (
            "2 runs: no pooled interval or p-value (between-run variation cannot be "
            "estimated from 2 runs); r is their inverse-variance mean, descriptive "
            "only; see the run rows, or add a third run"
        )
    else:
        return out, note
    return out, "; ".join(x for x in (note, said) if x)


def _groups(df: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(first row of each group, the row positions of each group), groups sorted by ``keys``."""
    codes = df.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    parts = np.split(order, bounds) if len(order) else []
    return np.array([p[0] for p in parts], dtype=int), parts


def pool_runs(rows: pd.DataFrame, level: float = 0.95, two_runs: str = "none") -> pd.DataFrame:
    """One ``run == "pooled"`` row per model, in-domain set, pool group, pair, method and residualiser."""
    rows = rows if "pool_group" in rows.columns else rows.assign(pool_group="all runs")
    rows = rows.reset_index(drop=True)
    if rows.empty:
        return pd.DataFrame()
    firsts, parts = _groups(rows, POOL_KEYS)
    out = rows.loc[firsts, POOL_KEYS].reset_index(drop=True)
    out["run"] = "pooled"
    fin_all = np.isfinite(rows["r"].to_numpy(float))
    n_all, units_all = rows["n"].to_numpy(float), rows["n_units"].to_numpy(float)
    out["n"] = [int(n_all[p][fin_all[p]].sum()) for p in parts]
    out["n_units"] = [int(units_all[p].sum()) for p in parts]
    out["n_runs"] = [len(p) for p in parts]
    out["n_runs_finite"] = 1
    out[["p_param", "p_perm", "block_length", "n_eff", "phi_x", "phi_y"]] = math.nan
    sfxs = [""] + [f for f in ("_no_step0", "_eiv", "_line") if "r" + f in rows.columns]
    cols = ("r", "ci_low", "ci_high", "p", "se_z")
    for sfx in sfxs:
        r = rows["r" + sfx].to_numpy(float)
        se = rows["se_z" + sfx].to_numpy(float)
        use = np.isfinite(r) & np.isfinite(se) & (se > 0)
        k_use = np.array([int(use[p].sum()) for p in parts])
        k_fin = np.array([int(np.isfinite(r[p]).sum()) for p in parts])
        res = {c: np.full(len(parts), np.nan) for c in cols + ("tau2", "i2")}
        how = np.full(len(parts), "", dtype=object)
        notes = np.full(len(parts), "", dtype=object)
        # the common case, one run with an interval and no other run with a value: that run's own row
        single = np.flatnonzero((k_use == 1) & (k_fin == 1) & (np.array([len(p) for p in parts]) == 1))
        if len(single):
            src = np.array([parts[i][0] for i in single])
            for c in cols:
                res[c][single] = rows[c + sfx].to_numpy(float)[src]
            if sfx == "":  # a single run's effective sample size and autocorrelations are the pool's
                for c in ("n_eff", "phi_x", "phi_y"):
                    if c in rows:
                        out.loc[single, c] = rows[c].to_numpy(float)[src]
            if "p_method" in rows:
                how[single] = [f"{m} (single run)" for m in rows["p_method"].to_numpy()[src]]
        for i in np.setdiff1d(np.arange(len(parts)), single):
            got, note = _pool_one(rows.iloc[parts[i]], level, sfx, two_runs)
            for c in cols + ("tau2", "i2"):
                res[c][i] = got[c]
            how[i], notes[i] = got["p_method"], note
            if sfx == "":
                out.loc[i, "n_runs_finite"] = got["n_runs_finite"]
        if sfx == "":
            for c in cols + ("tau2", "i2"):
                out[c] = res[c]
            out["p_method"] = how
            out["note"] = notes
        else:
            for c in cols:
                out[c + sfx] = res[c]
    if "phi_x" in rows:
        at_cap = (rows["phi_x"].to_numpy(float) >= PHI_MAX) | (rows["phi_y"].to_numpy(float) >= PHI_MAX)
        for i, p in enumerate(parts):
            k = int(at_cap[p].sum())
            if k:
                said = f"{k} of {len(p)} runs: an AR(1) estimate of their residuals at its cap (see the run rows)"
                out.loc[i, "note"] = "; ".join(n for n in (out.loc[i, "note"], said) if n)
    return out
