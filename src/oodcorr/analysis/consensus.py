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
  :func:`.pooling.combine`).
* **Where a further model is expected** (M >= 3; :mod:`.predictive`): the **prediction
  interval** (``pi_low_consensus``, ``pi_high_consensus``), where the correlation of one further
  model of the same kind lies with probability ``level`` (the Bayesian posterior predictive,
  integrated over the between-model sd and a within-model variance that may be smaller than
  ``V_m``), and the **tolerance bounds** (``tol_low_consensus``, ``tol_high_consensus``): with
  confidence 0.975, at least 97.5 % of models of this kind lie above ``tol_low`` (below
  ``tol_high``), from the Q-profile confidence distribution of the between-model sd.
* **Heterogeneity** (``p_heterogeneity``): Cochran's Q of the models' ``z_m`` with their
  ``V_m`` on M - 1 degrees of freedom -- do the models differ by more than their runs and
  checkpoints explain?
* **Sign reversal** (``p_reversal``): an intersection-union test of "some model's correlation
  is positive AND some model's is negative": each side is Simes' combination of the models'
  one-sided p-values (valid for independent models), and the larger of the two sides is the
  p-value.
* **Generalises** (``p_generalises``): twice the confidence distribution's mass on a tolerance
  bound's far side of 0, the level at which a bound just reaches 0: below alpha, models of the
  other sign are shown to be rare (fewer than 2.5 %) among models of this kind. It is the
  tolerance bound's and not the prediction interval's because an interval of exact coverage
  still excludes 0 in up to a sixth of studies whose models have the other sign one time in seventeen
  (measured: benchmarks/README.md#14-the-prediction-interval-across-models-coverage).

Every p-value above is corrected across the pairs of one table (one in-domain set, pool group,
method and residualiser) with ``correction`` (Holm by default: the family-wise error rate under
any dependence between pairs). The verdict is the first rule that holds:

``no data``                    no model has a value
``fewer than 2 models tested`` fewer than two models with an interval
``sign reversal``              ``p_reversal_adj < alpha``
``models differ``              ``p_heterogeneity_adj < alpha``: the models differ, no reversal shown
``generalises (positive)``,    ``p_generalises_adj < alpha``, M >= 3: a tolerance bound at the
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
table are a sample of the kind of model the claim is about (the prediction interval and the
tolerance bounds speak of models like these, not of any model). The measured error rates of every verdict are
in benchmarks/README.md#10-verdicts-across-models-calibration, the prediction interval's
coverage in benchmarks/README.md#14-the-prediction-interval-across-models-coverage.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from . import multitest
from .pooling import _q_and_slope, fisher_z, random_effects_batch, solve_tau2
from .predictive import TAU_SCALE, predictive_batch, tau2_upper_batch, tolerance_batch, within_scale_batch

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
    "tol_low_consensus",
    "tol_high_consensus",
    "tau2_models",
    "tau2_models_high",
    "tau2_runs",
    "within_scale",
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
# Each rule is written once, for many studies at once: arrays of shape (studies, models, runs) with
# a mask of the runs that have a value (``z``, ``v``, ``p_run``), or (studies, models) with a mask of
# the models present. :func:`agreement` calls them with one study per row of its table; the design
# command (:mod:`.design`) with thousands of simulated studies. The functions named without
# ``_batch`` are the same rules on one study, as plain arrays.


def between_runs_batch(z, v, mask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tau2_runs, degrees of freedom, q) per study: the between-run variance shared by the models,
    by Paule-Mandel on the runs' spread around their own models' means; q is the generalised Q per
    degree of freedom at that variance (1 when the variance is positive, below 1 when the runs agree
    more closely than their within-run variances say; NaN without degrees of freedom)."""
    mask = np.asarray(mask, dtype=bool)
    df = np.maximum(mask.sum(-1) - 1, 0).sum(-1)
    z = np.where(mask, z, 0.0)
    v = np.where(mask, v, 1.0)
    q0, _ = _q_and_slope(z, v, mask, np.zeros(len(df)))
    t2 = solve_tau2(z, v, mask, np.maximum(df, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(df == 0, np.nan, np.where(q0 <= df, q0 / np.maximum(df, 1), 1.0))
    return np.where(df == 0, 0.0, t2), df, q


def model_means_batch(z, v, mask, p_run) -> tuple[np.ndarray, ...]:
    """Per study and model: (z_m, V_m, two-sided p of z_m = 0), NaN for a model without runs, and
    the between-run (tau2_runs, df, q) they use (:func:`between_runs_batch`).

    ``p_run`` is each run's own p-value, kept for a model with one run when the study's models
    have no between-run variance to share (every model one run)."""
    mask = np.asarray(mask, dtype=bool)
    t2, df, q = between_runs_batch(z, v, mask)
    w = np.where(mask, 1 / (np.where(mask, v, 1.0) + t2[:, None, None]), 0.0)
    sw = w.sum(-1)
    present = sw > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        zm = np.where(present, (w * np.where(mask, z, 0.0)).sum(-1) / sw, np.nan)
        Vm = np.where(present, 1 / sw, np.nan)
        p_norm = 2 * stats.norm.sf(np.abs(zm) / np.sqrt(Vm))
        p_t = 2 * stats.t.sf(np.abs(zm) / np.sqrt(Vm * np.fmax(q, 1.0)[:, None]), np.maximum(df, 1)[:, None])
    one = (mask.sum(-1) == 1) & (df == 0)[:, None]
    own = np.where(mask, p_run, np.nan).max(-1, initial=-np.inf, where=mask)  # a one-run model's run's p
    own = np.where(np.isfinite(own), own, np.nan)
    pm = np.where((df == 0)[:, None], np.where(one & np.isfinite(own), own, p_norm), p_t)
    return zm, Vm, np.where(present, pm, np.nan), t2, df, q


def heterogeneity_batch(zm, Vm, present, df_runs, q_runs) -> dict:
    """:func:`heterogeneity` per study (models where ``present``; NaN for fewer than 2)."""
    present = np.asarray(present, dtype=bool)
    M = present.sum(-1)
    dfm = np.maximum(M - 1, 1)
    w = np.where(present, 1 / np.where(present, Vm, 1.0), 0.0)
    zz = np.where(present, zm, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (w * zz).sum(-1) / w.sum(-1)
        q = (w * np.where(present, zz - mean[:, None], 0.0) ** 2).sum(-1)
        p = np.where(
            df_runs > 0,
            stats.f.sf(q / dfm / np.fmax(q_runs, 1.0), dfm, np.maximum(df_runs, 1)),
            stats.chi2.sf(q, dfm),
        )
        i2 = np.where(q > 0, np.maximum(0.0, (q - dfm) / np.where(q > 0, q, 1.0)), 0.0)
    ok = M >= 2
    nan = np.nan
    return {
        "q_models": np.where(ok, q, nan),
        "df_models": np.where(ok, M - 1, nan),
        "i2_models": np.where(ok, i2, nan),
        "p_heterogeneity": np.where(ok, p, nan),
    }


def consensus_batch(zm, Vm, present, level: float = 0.95, tau_scale: float = TAU_SCALE) -> dict:
    """:func:`consensus` per study (models where ``present``): arrays ``z, lo, hi, pi_lo, pi_hi,
    tol_lo, tol_hi, tau2, se, p_generalises, within_scale``; the prediction interval is
    :func:`.predictive.predictive_batch`'s (half-normal prior of scale ``tau_scale`` on the
    between-model sd), the tolerance bounds and ``p_generalises`` :func:`.predictive.tolerance_batch`'s,
    both on the ``V_m`` scaled by ``within_scale`` (:func:`.predictive.within_scale_batch`)."""
    present = np.asarray(present, dtype=bool)
    three = present.sum(-1) >= 3
    res = random_effects_batch(zm, Vm, present, level)
    scale, _ = within_scale_batch(zm, Vm, present, level)
    V = np.asarray(Vm, float) * np.where(three, scale, 1.0)[:, None]
    pred = predictive_batch(zm, V, present, level, tau_scale)
    tol = tolerance_batch(zm, V, present, level)
    out = {"z": res["z"], "lo": res["lo"], "hi": res["hi"], "tau2": res["tau2"], "se": res["se_z"]}
    out["within_scale"] = scale
    for key, val in (*pred.items(), *tol.items()):
        if key in ("pi_lo", "pi_hi", "tol_lo", "tol_hi", "p_generalises"):
            out[key] = np.where(three, val, np.nan)
    return out


def simes_batch(p, present) -> np.ndarray:
    """:func:`simes` per row of ``p`` over the entries where ``present`` (NaN for none)."""
    present = np.asarray(present, dtype=bool)
    q = np.sort(np.where(present, p, np.inf), axis=-1)
    m = present.sum(-1, keepdims=True)
    j = np.arange(1, q.shape[-1] + 1)
    with np.errstate(invalid="ignore"):
        comb = np.where(j <= m, m * q / j, np.inf).min(-1)
    return np.where(m[..., 0] > 0, np.minimum(1.0, comb), np.nan)


def reversal_batch(zm, pm, present) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`reversal_p` per study: (p, index of the most positive model, of the most negative)."""
    present = np.asarray(present, dtype=bool)
    one_pos = np.where(zm > 0, pm / 2, 1 - pm / 2)  # one-sided p of "this model's correlation > 0"
    one_neg = 1 - one_pos
    p = np.maximum(simes_batch(one_pos, present), simes_batch(one_neg, present))
    a = np.argmin(np.where(present, one_pos, np.inf), axis=-1)
    b = np.argmin(np.where(present, one_neg, np.inf), axis=-1)
    return p, a, b


def across_models(z, v, mask, p_run, level: float = 0.95, near_zero: float = 0.3, tau_scale: float = TAU_SCALE) -> dict:
    """Everything the verdict reads, for many studies at once: the runs' Fisher z ``z``, within
    variances ``v`` and own p-values ``p_run``, shape (studies, models, runs), where ``mask``.
    Returns arrays per study: ``n_models`` (models with a run), the model means ``zm``, ``Vm``,
    ``pm`` (studies, models), ``tau2_runs``, ``df_runs``, ``q_runs``, the heterogeneity test's
    keys, ``p_reversal`` with the two models that carry it (``reversal_pos``, ``reversal_neg``),
    the consensus (``z``, ``lo``, ``hi``, ``pi_lo``, ``pi_hi``, ``tau2``, ``se``,
    ``p_generalises``), ``tau2_high`` and ``near`` (3 models or more: the prediction interval at
    the between-model variance's upper bound lies inside (-near_zero, near_zero))."""
    mask = np.asarray(mask, dtype=bool)
    zm, Vm, pm, t2r, df, q = model_means_batch(z, v, mask, p_run)
    present = mask.any(-1)
    M = present.sum(-1)
    out = {"n_models": M, "zm": zm, "Vm": Vm, "pm": pm, "tau2_runs": t2r, "df_runs": df, "q_runs": q}
    out.update(heterogeneity_batch(zm, Vm, present, df, q))
    p_rev, a, b = reversal_batch(zm, pm, present)
    out.update(p_reversal=np.where(M >= 2, p_rev, np.nan), reversal_pos=a, reversal_neg=b)
    c = consensus_batch(zm, Vm, present, level, tau_scale)
    out.update(c)
    t2_hi = tau2_upper_batch(zm, Vm, present, level)
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(0.5 + level / 2, np.maximum(M - 2, 1)) * np.sqrt(t2_hi + c["se"] ** 2)
        near = (np.abs(np.tanh(c["z"] - half)) < near_zero) & (np.abs(np.tanh(c["z"] + half)) < near_zero)
    out["tau2_high"] = np.where(M >= 3, t2_hi, np.nan)
    out["near"] = near & (M >= 3)
    return out


def _one_study(z, v, model, p_run=None):
    """One study's runs as the batch arrays: (model names in order of first appearance, z, v,
    p_run, mask), each of shape (1, models, most runs of a model)."""
    model = np.asarray(model)
    names = list(dict.fromkeys(model.tolist()))
    groups = [np.flatnonzero(model == m) for m in names]
    K = max((len(g) for g in groups), default=1)
    shape = (1, len(names), K)
    Z, V, P = np.zeros(shape), np.ones(shape), np.full(shape, np.nan)
    mask = np.zeros(shape, bool)
    for i, g in enumerate(groups):
        Z[0, i, : len(g)], V[0, i, : len(g)], mask[0, i, : len(g)] = z[g], v[g], True
        if p_run is not None:
            P[0, i, : len(g)] = p_run[g]
    return names, Z, V, P, mask


def between_runs(z: np.ndarray, v: np.ndarray, model: np.ndarray) -> tuple[float, int, float]:
    """(tau2_runs, degrees of freedom, q) of one study's runs (:func:`between_runs_batch`)."""
    _, Z, V, _, mask = _one_study(np.asarray(z, float), np.asarray(v, float), model)
    t2, df, q = between_runs_batch(Z, V, mask)
    return float(t2[0]), int(df[0]), float(q[0])


def model_means(
    z: np.ndarray, v: np.ndarray, model: np.ndarray, p_run: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, float, int, float]:
    """Per model: (names, z_m, V_m, two-sided p of z_m = 0, tau2_runs, df of the runs, q of the runs).

    ``p_run`` is each run's own p-value, kept for a model with one run when the table's
    models have no between-run variance to share (every model one run)."""
    names, Z, V, P, mask = _one_study(np.asarray(z, float), np.asarray(v, float), model, np.asarray(p_run, float))
    zm, Vm, pm, t2, df, q = model_means_batch(Z, V, mask, P)
    return names, zm[0], Vm[0], pm[0], float(t2[0]), int(df[0]), float(q[0])


def heterogeneity(zm: np.ndarray, Vm: np.ndarray, df_runs: int, q_runs: float) -> dict:
    """Do the models differ by more than their runs and checkpoints explain? Cochran's Q of the
    models' ``z_m`` with variances ``V_m`` on M - 1 degrees of freedom. Where the between-run
    variance was estimated (``df_runs`` > 0), ``V_m`` carries that estimate's uncertainty, so Q per
    degree of freedom is compared with the runs' own (``q_runs``, at least 1) on an F distribution
    with (M - 1, df_runs) degrees of freedom, as a one-way analysis of variance would."""
    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    res = heterogeneity_batch(zm[None], Vm[None], np.ones((1, len(zm)), bool), np.array([df_runs]), np.array([q_runs]))
    out = {k: float(val[0]) for k, val in res.items()}
    out["df_models"] = len(zm) - 1
    return out


def consensus(zm: np.ndarray, Vm: np.ndarray, level: float = 0.95, tau_scale: float = TAU_SCALE) -> dict:
    """The random-effects consensus of the models' ``z_m`` (variances ``V_m``): ``z``, its
    interval ``lo``, ``hi`` (z scale), the prediction interval ``pi_lo``, ``pi_hi`` and the
    tolerance bounds ``tol_lo``, ``tol_hi`` (M >= 3; else NaN; :mod:`.predictive`), ``tau2``, ``se``
    (the interval's half-width over the normal quantile) and ``p_generalises``, the level at
    which a tolerance bound just reaches 0."""
    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    res = consensus_batch(zm[None], Vm[None], np.ones((1, len(zm)), bool), level, tau_scale)
    return {k: float(val[0]) for k, val in res.items()}


def tau2_upper(z: np.ndarray, v: np.ndarray, level: float = 0.95) -> float:
    """The Q-profile upper confidence bound of the between-model variance (Viechtbauer 2007):
    the largest tau2 at which the generalised Q is still at least the lower (1 - level) / 2
    quantile of chi-square on M - 1 degrees of freedom; 0 when Q is below it already at 0."""
    z, v = np.asarray(z, float), np.asarray(v, float)
    return float(tau2_upper_batch(z[None], v[None], np.ones((1, len(z)), bool), level)[0])


def simes(p: np.ndarray) -> float:
    """Simes' combination of independent p-values: min over j of M p_(j) / j."""
    p = np.asarray(p, dtype=float)
    return float(simes_batch(p[None], np.ones((1, len(p)), bool))[0])


def reversal_p(zm: np.ndarray, pm: np.ndarray) -> tuple[float, int, int]:
    """(p of "some model positive and some negative", the most positive model, the most negative)."""
    zm, pm = np.asarray(zm, float), np.asarray(pm, float)
    p, a, b = reversal_batch(zm[None], pm[None], np.ones((1, len(zm)), bool))
    return float(p[0]), int(a[0]), int(b[0])


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
    mnames, Z, V, P, mask = _one_study(
        fisher_z(rr[use]), se[use] ** 2, runs["model"].astype(str).to_numpy()[use], p_run
    )
    a = {k: val[0] for k, val in across_models(Z, V, mask, P, level, near_zero).items()}
    M = int(a["n_models"])
    row["n_models_consensus"] = M
    row["tau2_runs"] = float(a["tau2_runs"]) if a["df_runs"] else math.nan
    if M >= 2:
        row.update({k: float(a[k]) for k in ("q_models", "df_models", "i2_models", "p_heterogeneity", "p_reversal")})
        row["df_models"] = M - 1
        zm, i, j = a["zm"], int(a["reversal_pos"]), int(a["reversal_neg"])
        if zm[i] > 0 and zm[j] < 0:
            row["reversal"] = f"{mnames[i]} {_fmt(math.tanh(zm[i]))} vs {mnames[j]} {_fmt(math.tanh(zm[j]))}"
        row.update(
            r_consensus=math.tanh(a["z"]),
            ci_low_consensus=math.tanh(a["lo"]),
            ci_high_consensus=math.tanh(a["hi"]),
            pi_low_consensus=math.tanh(a["pi_lo"]) if np.isfinite(a["pi_lo"]) else math.nan,
            pi_high_consensus=math.tanh(a["pi_hi"]) if np.isfinite(a["pi_hi"]) else math.nan,
            tol_low_consensus=math.tanh(a["tol_lo"]) if np.isfinite(a["tol_lo"]) else math.nan,
            tol_high_consensus=math.tanh(a["tol_hi"]) if np.isfinite(a["tol_hi"]) else math.nan,
            tau2_models=float(a["tau2"]),
            within_scale=float(a["within_scale"]),
            p_generalises=float(a["p_generalises"]),
        )
        if M == 2:
            notes.append("2 models: a further model cannot be predicted from 2, so no prediction interval")
    if M >= 3:
        # a further model near zero: the prediction interval with the largest between-model variance
        # the data allow (its upper confidence bound), so a spread the models' noise hides is not read as agreement
        row["tau2_models_high"] = float(a["tau2_high"])
        row["_near"] = bool(a["near"])
        if a["within_scale"] < 1:
            notes.append(
                f"the models agree more closely than their within variances allow (Q {a['q_models']:.2f} on "
                f"{M - 1} df): those variances are scaled by {a['within_scale']:.2f} for the prediction "
                "interval and the tolerance bounds"
            )
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
