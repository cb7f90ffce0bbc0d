"""The answer across models: for each OOD pair, a consensus of the models and a verdict.

For one OOD pair (x, y) of one in-domain set, pool group, method and residualiser, every model
contributes its runs' Fisher z values ``z_mi = atanh(r_mi)`` with their within-run variances
``v_mi = se_z_mi ** 2`` from the per-run procedure (:mod:`.inference`). The runs are read as a
two-level random-effects model:

    z_mi = mu + u_m + w_mi + e_mi,   e_mi ~ N(0, v_mi),  w_mi ~ N(0, tau2_runs),  u_m ~ N(0, tau2_models)

``mu`` is the correlation (on the z scale) of the kind of model the table holds, ``u_m`` how
model m departs from it, ``w_mi`` how a run (a seed) departs from its model.

* **Between runs** (``tau2_runs``): one variance for the table's models, estimated from the
  spread of each model's runs around their model (Paule-Mandel: the generalised Q of the runs
  around their models' means equals its degrees of freedom, the runs less the models). A model
  with 3 runs alone has 2 degrees of freedom for its between-run variance; six such models
  share 12. Models with one run each give none, and ``tau2_runs`` is then 0 (the runs' own
  spread is part of the spread between models).
* **Each model** (``z_m``, ``V_m``): the inverse-variance mean of its runs with weights
  ``1 / (v_mi + tau2_runs)``. Its test (is this model's correlation positive, negative?) is
  ``z_m / sqrt(V_m q)`` on a t distribution with the between-run degrees of freedom, where
  ``q >= 1`` is the runs' generalised Q per degree of freedom (Hartung-Knapp with the models'
  shared degrees of freedom); a model with one run and nothing to borrow keeps its run's own
  test.
* **The consensus** (``r_consensus``): the random-effects mean over the models of ``z_m``
  (Paule-Mandel ``tau2_models``, weights ``1 / (V_m + tau2_models)``), its interval the
  Hartung-Knapp one on M - 1 degrees of freedom, never narrower than the normal one (as in
  :func:`.pooling.combine`). The **prediction interval** (``pi_low_consensus``,
  ``pi_high_consensus``; Higgins, Thompson and Spiegelhalter 2009) is where the correlation of
  a further model of the same kind is expected: ``mu +- t_{M-2} sqrt(tau2_models + se^2)``,
  for M >= 3 models.
* **Heterogeneity** (``p_heterogeneity``): Cochran's Q of the models' ``z_m`` with their
  ``V_m`` on M - 1 degrees of freedom -- do the models differ by more than their runs and
  checkpoints explain?
* **Sign reversal** (``p_reversal``): an intersection-union test of "some model's correlation
  is positive AND some model's is negative": each side is Simes' combination of the models'
  one-sided p-values (valid for independent models), and the larger of the two sides is the
  p-value.
* **Generalises** (``p_generalises``): ``2 t_{M-2}.sf(|mu| / sqrt(tau2_models + se^2))``, the
  p-value at which the prediction interval just touches 0: below alpha, a further model of
  this kind is predicted to share the consensus sign.

Every p-value above is corrected across the pairs of one table (one in-domain set, pool group,
method and residualiser) with ``correction`` (Holm by default: the family-wise error rate under
any dependence between pairs). The verdict is the first rule that holds:

``no data``                    no model has a value
``fewer than 2 models tested`` fewer than two models with an interval
``sign reversal``              ``p_reversal_adj < alpha``
``models differ``              ``p_heterogeneity_adj < alpha``: the models differ, no reversal shown
``generalises (positive)``,    ``p_generalises_adj < alpha``, M >= 3: the prediction interval at the
``generalises (negative)``     corrected level excludes 0, on the side of the consensus
``agree near zero``            M >= 3 and the prediction interval (at ``level``) lies inside
                               (-near_zero, near_zero): a further model is expected near zero
``unresolved``                 no evidence that the models differ, but neither a shared sign nor
                               a shared near-zero value is established (each model, or the
                               consensus, too uncertain; or only 2 models)

A heterogeneous pair (``models differ``) is never ``generalises``. What this assumes: the
models' estimates are independent of each other (they share testsets, but not runs or
checkpoints; a model listed twice under two names breaks it), the Fisher z values are close
to normal with the within-run variances the per-run procedure gives, and the models of the
table are a sample of the kind of model the claim is about (the prediction interval speaks of
a further model like these, not of any model). The measured error rates of every verdict are
in benchmarks/README.md#10-verdicts-across-models-calibration.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, stats

from . import multitest
from .pooling import fisher_z, random_effects

VERDICTS = (
    "sign reversal",
    "models differ",
    "generalises (positive)",
    "generalises (negative)",
    "agree near zero",
    "unresolved",
    "fewer than 2 models tested",
    "no data",
)
AGREEMENT_KEYS = ["in_domain", "pool_group", "x", "y", "method", "residualiser"]
CONSENSUS_COLUMNS = [
    "r_consensus",
    "ci_low_consensus",
    "ci_high_consensus",
    "pi_low_consensus",
    "pi_high_consensus",
    "tau2_models",
    "tau2_models_high",
    "tau2_runs",
    "n_models_consensus",
    "p_generalises",
    "p_generalises_adj",
]
AGREEMENT_COLUMNS = AGREEMENT_KEYS + [
    "verdict",
    *CONSENSUS_COLUMNS,
    "n_models",
    "n_finite",
    "n_positive",
    "n_negative",
    "n_sig_positive",
    "n_sig_negative",
    "q_models",
    "df_models",
    "i2_models",
    "p_heterogeneity",
    "p_heterogeneity_adj",
    "p_reversal",
    "p_reversal_adj",
    "reversal",
    "correction",
    "family_size",
    "note",
    "by_model",
]


# ---- the two-level model -------------------------------------------------------------------
def between_runs(z: np.ndarray, v: np.ndarray, model: np.ndarray) -> tuple[float, int, float]:
    """(tau2_runs, degrees of freedom, q): the between-run variance shared by the models, by
    Paule-Mandel on the runs' spread around their own models' means; q is the generalised Q
    per degree of freedom at that variance (1 when the variance is positive, below 1 when the
    runs agree more closely than their within-run variances say)."""
    groups = [np.flatnonzero(model == m) for m in np.unique(model)]
    groups = [g for g in groups if len(g) >= 2]
    df = sum(len(g) - 1 for g in groups)
    if df == 0:
        return 0.0, 0, math.nan

    def qsum(t2: float) -> float:
        total = 0.0
        for g in groups:
            w = 1 / (v[g] + t2)
            m = (w * z[g]).sum() / w.sum()
            total += float((w * (z[g] - m) ** 2).sum())
        return total

    q0 = qsum(0.0)
    if q0 <= df:
        return 0.0, df, q0 / df
    hi = max(float(np.var(z)), 1e-8)
    while qsum(hi) > df:
        hi *= 4
    t2 = float(optimize.brentq(lambda t: qsum(t) - df, 0.0, hi, xtol=1e-12, rtol=1e-10))
    return t2, df, 1.0


def model_means(
    z: np.ndarray, v: np.ndarray, model: np.ndarray, p_run: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, float, int, float]:
    """Per model: (names, z_m, V_m, two-sided p of z_m = 0, tau2_runs, df of the runs, q of the runs).

    ``p_run`` is each run's own p-value, kept for a model with one run when the table's
    models have no between-run variance to share (every model one run)."""
    t2, df, q = between_runs(z, v, model)
    names = list(dict.fromkeys(model))
    zm, Vm, pm = (np.empty(len(names)) for _ in range(3))
    for i, name in enumerate(names):
        g = np.flatnonzero(model == name)
        w = 1 / (v[g] + t2)
        zm[i] = float((w * z[g]).sum() / w.sum())
        Vm[i] = float(1 / w.sum())
        if df == 0 and len(g) == 1 and np.isfinite(p_run[g[0]]):
            pm[i] = p_run[g[0]]  # one run and nothing to borrow: the run's own test
        elif df == 0:
            pm[i] = 2 * stats.norm.sf(abs(zm[i]) / math.sqrt(Vm[i]))
        else:
            pm[i] = 2 * stats.t.sf(abs(zm[i]) / math.sqrt(Vm[i] * max(q, 1.0)), df)
    return names, zm, Vm, pm, t2, df, q


def heterogeneity(zm: np.ndarray, Vm: np.ndarray, df_runs: int, q_runs: float) -> dict:
    """Do the models differ by more than their runs and checkpoints explain? Cochran's Q of the
    models' ``z_m`` with variances ``V_m`` on M - 1 degrees of freedom. Where the between-run
    variance was estimated (``df_runs`` > 0), ``V_m`` carries that estimate's uncertainty, so Q per
    degree of freedom is compared with the runs' own (``q_runs``, at least 1) on an F distribution
    with (M - 1, df_runs) degrees of freedom, as a one-way analysis of variance would."""
    M = len(zm)
    w = 1 / Vm
    q = float((w * (zm - (w * zm).sum() / w.sum()) ** 2).sum())
    if df_runs:
        p = float(stats.f.sf(q / (M - 1) / max(q_runs, 1.0), M - 1, df_runs))
    else:
        p = float(stats.chi2.sf(q, M - 1))
    return {
        "q_models": q,
        "df_models": M - 1,
        "i2_models": max(0.0, (q - (M - 1)) / q) if q > 0 else 0.0,
        "p_heterogeneity": p,
    }


def consensus(zm: np.ndarray, Vm: np.ndarray, level: float = 0.95) -> dict:
    """The random-effects consensus of the models' ``z_m`` (variances ``V_m``): ``z``, its
    interval ``lo``, ``hi`` (z scale), the prediction interval ``pi_lo``, ``pi_hi`` (M >= 3;
    else NaN), ``tau2``, ``se`` (the interval's half-width over the normal quantile) and
    ``p_generalises``, the level at which the prediction interval just reaches 0."""
    k = len(zm)
    out = {"z": math.nan, "lo": math.nan, "hi": math.nan, "pi_lo": math.nan, "pi_hi": math.nan}
    out.update(tau2=math.nan, se=math.nan, p_generalises=math.nan)
    if k < 2:
        return out
    res = random_effects(zm, Vm, level)
    out.update(z=res["z"], lo=res["lo"], hi=res["hi"], tau2=res["tau2"], se=res["se_z"])
    if k == 2:
        return out  # no prediction interval: a third model's spread cannot be told from two
    m, se, t2 = res["z"], res["se_z"], res["tau2"]
    spread = math.sqrt(t2 + se * se)
    tp = float(stats.t.ppf(0.5 + level / 2, k - 2))
    out.update(
        pi_lo=m - tp * spread,
        pi_hi=m + tp * spread,
        p_generalises=float(2 * stats.t.sf(abs(m) / spread, k - 2)) if spread > 0 else 0.0,
    )
    return out


def tau2_upper(z: np.ndarray, v: np.ndarray, level: float = 0.95) -> float:
    """The Q-profile upper confidence bound of the between-model variance (Viechtbauer 2007):
    the largest tau2 at which the generalised Q is still at least the lower (1 - level) / 2
    quantile of chi-square on M - 1 degrees of freedom; 0 when Q is below it already at 0."""
    k = len(z)
    if k < 2:
        return math.nan
    target = float(stats.chi2.ppf((1 - level) / 2, k - 1))

    def qgen(t2: float) -> float:
        w = 1 / (v + t2)
        m = (w * z).sum() / w.sum()
        return float((w * (z - m) ** 2).sum())

    if qgen(0.0) <= target:
        return 0.0
    hi = max(float(np.var(z)), 1e-8)
    while qgen(hi) > target:
        hi *= 4
    return float(optimize.brentq(lambda t: qgen(t) - target, 0.0, hi, xtol=1e-12, rtol=1e-10))


def simes(p: np.ndarray) -> float:
    """Simes' combination of independent p-values: min over j of M p_(j) / j."""
    p = np.sort(np.asarray(p, dtype=float))
    if not len(p):
        return math.nan
    return float(min(1.0, np.min(len(p) * p / np.arange(1, len(p) + 1))))


def reversal_p(zm: np.ndarray, pm: np.ndarray) -> tuple[float, int, int]:
    """(p of "some model positive and some negative", the most positive model, the most negative)."""
    one_pos = np.where(zm > 0, pm / 2, 1 - pm / 2)  # one-sided p of "this model's correlation > 0"
    one_neg = 1 - one_pos
    return max(simes(one_pos), simes(one_neg)), int(np.argmin(one_pos)), int(np.argmin(one_neg))


# ---- the table ------------------------------------------------------------------------------
def _fmt(v: float) -> str:
    return f"{v:+.2f}" if np.isfinite(v) else "n/a"


def _run_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the consensus reads: each model's runs (or, for a table of pooled rows only, each
    model's pooled row as its one run)."""
    if "run" not in table.columns:
        return table.assign(run="pooled")
    runs = table[table["run"] != "pooled"]
    have_runs = set(runs["model"].astype(str))
    pooled_only = table[(table["run"] == "pooled") & ~table["model"].astype(str).isin(have_runs)]
    return pd.concat([runs, pooled_only], ignore_index=True)


def _row(pooled: pd.DataFrame, runs: pd.DataFrame, level: float, near_zero: float) -> dict:
    """Everything of one agreement row but the corrected p-values and the verdict."""
    names = pooled["model"].astype(str).to_numpy()
    r = pooled["r"].to_numpy(float)
    lo, hi = pooled["ci_low"].to_numpy(float), pooled["ci_high"].to_numpy(float)
    sig = (
        np.array([v is True or v == 1 for v in pooled["significant"]])
        if "significant" in pooled
        else np.zeros(len(pooled), bool)
    )
    fin = np.isfinite(r)
    sig &= fin
    row = {
        "n_models": len(pooled),
        "n_finite": int(fin.sum()),
        "n_positive": int((fin & (r > 0)).sum()),
        "n_negative": int((fin & (r < 0)).sum()),
        "n_sig_positive": int((sig & (r > 0)).sum()),
        "n_sig_negative": int((sig & (r < 0)).sum()),
        "q_models": math.nan,
        "df_models": math.nan,
        "i2_models": math.nan,
        "p_heterogeneity": math.nan,
        "p_reversal": math.nan,
        "reversal": "",
        **dict.fromkeys(CONSENSUS_COLUMNS, math.nan),
        "n_models_consensus": 0,
        "note": "",
    }
    row["by_model"] = "; ".join(
        f"{m}: {_fmt(v)}{'*' if s_ else ''}"
        + (f" [{low:+.2f}, {high:+.2f}]" if np.isfinite(low) and np.isfinite(high) else "")
        for m, v, s_, low, high in zip(names, r, sig, lo, hi)
    )
    rr, se = runs["r"].to_numpy(float), runs["se_z"].to_numpy(float)
    use = np.isfinite(rr) & np.isfinite(se) & (se > 0)
    notes = []
    left = sorted(set(runs["model"].astype(str)[~use & np.isfinite(rr)]) - set(runs["model"].astype(str)[use]))
    if left:
        notes.append(f"{len(left)} model(s) without an interval left out: {', '.join(left[:5])}")
    if not use.any():
        row["note"] = "; ".join(notes)
        return row
    p_run = runs["p"].to_numpy(float)[use] if "p" in runs else np.full(int(use.sum()), np.nan)
    mnames, zm, Vm, pm, t2r, df_runs, q_runs = model_means(
        fisher_z(rr[use]), se[use] ** 2, runs["model"].astype(str).to_numpy()[use], p_run
    )
    M = len(mnames)
    row["n_models_consensus"] = M
    row["tau2_runs"] = t2r if df_runs else math.nan
    if M >= 2:
        row.update(heterogeneity(zm, Vm, df_runs, q_runs))
        row["p_reversal"], a, b = reversal_p(zm, pm)
        if zm[a] > 0 and zm[b] < 0:
            row["reversal"] = f"{mnames[a]} {_fmt(math.tanh(zm[a]))} vs {mnames[b]} {_fmt(math.tanh(zm[b]))}"
        c = consensus(zm, Vm, level)
        row.update(
            r_consensus=math.tanh(c["z"]),
            ci_low_consensus=math.tanh(c["lo"]),
            ci_high_consensus=math.tanh(c["hi"]),
            pi_low_consensus=math.tanh(c["pi_lo"]) if np.isfinite(c["pi_lo"]) else math.nan,
            pi_high_consensus=math.tanh(c["pi_hi"]) if np.isfinite(c["pi_hi"]) else math.nan,
            tau2_models=c["tau2"],
            p_generalises=c["p_generalises"],
        )
        if M == 2:
            notes.append("2 models: a further model cannot be predicted from 2, so no prediction interval")
    if M >= 3:
        # a further model near zero: the prediction interval with the largest between-model variance
        # the data allow (its upper confidence bound), so a spread the models' noise hides is not read as agreement
        t2_hi = tau2_upper(zm, Vm, level)
        half = float(stats.t.ppf(0.5 + level / 2, M - 2)) * math.sqrt(t2_hi + c["se"] ** 2)
        row["tau2_models_high"] = t2_hi
        row["_near"] = bool(abs(math.tanh(c["z"] - half)) < near_zero and abs(math.tanh(c["z"] + half)) < near_zero)
    row["note"] = "; ".join(notes)
    return row


def agreement(
    table: pd.DataFrame,
    alpha: float = 0.05,
    correction: str = "holm",
    level: float = 0.95,
    near_zero: float = 0.3,
) -> pd.DataFrame:
    """Per OOD pair (and in-domain set, pool group, method, residualiser): the consensus across
    models, heterogeneity, sign reversal and the verdict (see the module doc; the columns are
    explained in docs/analysis.md#reading-agreementcsv).

    ``table`` is the analysis' table (:func:`.pipeline.analyse`): its run rows feed the
    consensus and the tests, its pooled rows (``run == "pooled"``) the per-model summary
    (``by_model``, ``n_sig_*``). A table of pooled rows alone is read as one run per model."""
    table = table if "pool_group" in table.columns else table.assign(pool_group="all runs")
    pooled = table[table["run"] == "pooled"] if "run" in table.columns else table
    pooled = pooled.sort_values("model", kind="stable").reset_index(drop=True)
    if pooled.empty:
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    runs = _run_rows(table)
    run_groups = {k: g for k, g in runs.groupby(AGREEMENT_KEYS, sort=False, dropna=False)}
    rows = []
    for key, g in pooled.groupby(AGREEMENT_KEYS, sort=True, dropna=False):
        row = _row(g, run_groups.get(key, runs.iloc[:0]), level, near_zero)
        rows.append({**dict(zip(AGREEMENT_KEYS, key)), **row})
    df = pd.DataFrame(rows)
    df["correction"] = correction
    df["family_size"] = 0
    for c in ("p_heterogeneity", "p_reversal", "p_generalises"):
        df[f"{c}_adj"] = math.nan
    fam_keys = [k for k in AGREEMENT_KEYS if k not in ("x", "y")]
    for _, idx in df.groupby(fam_keys, sort=False, dropna=False).groups.items():
        for c in ("p_heterogeneity", "p_reversal", "p_generalises"):
            df.loc[idx, f"{c}_adj"] = multitest.adjust(df.loc[idx, c].to_numpy(float), correction)
        df.loc[idx, "family_size"] = int(np.isfinite(df.loc[idx, "p_reversal"].to_numpy(float)).sum())
    df["verdict"] = [verdict(row, alpha) for row in df.to_dict("records")]
    df.loc[df["verdict"] != "sign reversal", "reversal"] = ""
    return df[AGREEMENT_COLUMNS]


def verdict(row: dict, alpha: float) -> str:
    """The first rule of the module doc's list that ``row`` (an agreement row) meets."""
    if row["n_finite"] == 0:
        return "no data"
    if row["n_models_consensus"] < 2:
        return "fewer than 2 models tested"
    if row["p_reversal_adj"] < alpha:
        return "sign reversal"
    if row["p_heterogeneity_adj"] < alpha:
        return "models differ"
    if row["n_models_consensus"] >= 3 and row["p_generalises_adj"] < alpha:
        return "generalises (positive)" if row["r_consensus"] > 0 else "generalises (negative)"
    if row.get("_near"):
        return "agree near zero"
    return "unresolved"
