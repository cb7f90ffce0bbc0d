"""The answer across models: for each OOD pair, a consensus of the models and a verdict."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ...core.answer import (
    MODELS_DIFFER,
    NEAR_ZERO,
    NEARLY_EVERY,
    NEGATIVE,
    NO_DATA,
    ON_AVERAGE,
    POSITIVE,
    SIGN_REVERSAL,
    TOO_FEW_MODELS,
    verdict_words,
)
from ...core.defaults import ANALYSIS as DEFAULTS
from . import multitest
from .pooling import cochran_q, generalised_q, random_effects_batch, solve_tau2
from .predictive import (
    TAU_SCALE,
    predictive_batch,
    tau2_upper_batch,
    tolerance_batch,
    within_scale_batch,
    within_scale_draws,
)

# ---- the two-level model -------------------------------------------------------------------
# Each rule for many studies at once: arrays (studies, models, runs) with a mask of the runs that have
# a value, or (studies, models) with a mask of the models present.


def model_means_batch(z, v, mask, p_run) -> tuple[np.ndarray, ...]:
    """Per study and model: (z_m, V_m, two-sided p of z_m = 0), NaN for a model without runs, and the between-run
    variance shared by the models (Paule-Mandel) they use, with its degrees of freedom and q: (tau2_runs, df, q)."""
    df = np.maximum(mask.sum(-1) - 1, 0).sum(-1)
    z = np.where(mask, z, 0.0)
    v = np.where(mask, v, 1.0)
    q0 = generalised_q(z, v, mask, np.zeros(len(df)))
    t2 = np.where(df == 0, 0.0, solve_tau2(z, v, mask, np.maximum(df, 0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(df == 0, np.nan, np.where(q0 <= df, q0 / np.maximum(df, 1), 1.0))
    w = np.where(mask, 1 / (v + t2[:, None, None]), 0.0)
    sw = w.sum(-1)
    present = sw > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        zm = np.where(present, (w * z).sum(-1) / sw, np.nan)
        Vm = np.where(present, 1 / sw, np.nan)
        p_norm = 2 * stats.norm.sf(np.abs(zm) / np.sqrt(Vm))
        p_t = 2 * stats.t.sf(np.abs(zm) / np.sqrt(Vm * np.fmax(q, 1.0)[:, None]), np.maximum(df, 1)[:, None])
    one = (mask.sum(-1) == 1) & (df == 0)[:, None]
    own = np.where(mask, p_run, np.nan).max(-1, initial=-np.inf, where=mask)  # a one-run model's run's p
    own = np.where(np.isfinite(own), own, np.nan)
    pm = np.where((df == 0)[:, None], np.where(one & np.isfinite(own), own, p_norm), p_t)
    return zm, Vm, np.where(present, pm, np.nan), t2, df, q


def consensus_batch(zm, Vm, present, level: float = 0.95, tau_scale: float = TAU_SCALE, intervals: bool = True) -> dict:
    """The random-effects consensus of the models' ``z_m`` (variances ``V_m``) per study, with a prediction interval."""
    three = present.sum(-1) >= 3
    res = random_effects_batch(zm, Vm, present, level)
    scale = within_scale_batch(zm, Vm, present, level)
    out = {k: res[k] for k in ("z", "lo", "hi", "p", "tau2")}
    out["se"] = res["se_z"]
    out["pi_scale"] = scale
    pred = dict.fromkeys(("pi_lo", "pi_hi"), np.nan)
    if intervals:
        V = np.asarray(Vm, float) * np.where(three, scale, 1.0)[:, None]
        pred = predictive_batch(zm, V, present, level, tau_scale)
    for key in ("pi_lo", "pi_hi"):
        out[key] = np.where(three, pred[key], np.nan)
    return out


def within_runs_batch(z, v, mask) -> tuple[np.ndarray, ...]:
    """What the runs say of each model's within variance, per study: ``zbar``, ``vbar / k``, ``ss`` on ``df``."""
    k = mask.sum(-1)
    present = k > 0
    kk = np.maximum(k, 1)
    zz = np.where(mask, z, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        zbar = np.where(present, zz.sum(-1) / kk, np.nan)
        vbar = np.where(present, np.where(mask, v, 0.0).sum(-1) / kk, np.nan)
        dev = np.where(mask, zz - np.where(present, zbar, 0.0)[..., None], 0.0)
        ss = np.where(present, (dev**2).sum(-1) / np.where(present, vbar, 1.0), 0.0).sum(-1)
    df = np.maximum(k - 1, 0).sum(-1)
    return zbar, vbar / kk, ss, df


def shared_sign_batch(zbar, Vbar, present, ss, df, level: float = 0.95, bounds: bool = True) -> dict:
    """Is the sign shared by nearly every model of this kind? The tolerance bounds and ``p_generalises``."""
    three = present.sum(-1) >= 3
    draws, weights = within_scale_draws(ss, df)
    single = np.asarray(df) == 0
    if single.any():  # one run per model: the models' own agreement may show the variances too large still
        extra = within_scale_batch(zbar, Vbar * draws[:, :1], present, level)
        draws = np.where(single[:, None] & three[:, None], draws * np.nan_to_num(extra, nan=1.0)[:, None], draws)
    tol = tolerance_batch(zbar, Vbar, present, level, scales=(draws, weights), bounds=bounds)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = np.where(single, draws[:, 0], ss / np.maximum(df, 1))
    out = {k: np.where(three, v, np.nan) for k, v in tol.items()}
    out["within_scale"] = np.where(three, point, np.nan)
    out["within_df"] = df
    return out


def reversal_batch(zm, pm, present) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per study: (p of sign reversal, an intersection-union test of Simes' combinations; most +, most - model)."""
    one_pos = np.where(zm > 0, pm / 2, 1 - pm / 2)  # one-sided p of "this model's correlation > 0"
    one_neg = 1 - one_pos
    p = np.maximum(
        multitest.simes(np.where(present, one_pos, np.nan)), multitest.simes(np.where(present, one_neg, np.nan))
    )
    a = np.argmin(np.where(present, one_pos, np.inf), axis=-1)
    b = np.argmin(np.where(present, one_neg, np.inf), axis=-1)
    return p, a, b


def across_models(
    z,
    v,
    mask,
    p_run,
    level: float = DEFAULTS["level"],
    near_zero: float = DEFAULTS["near_zero"],
    intervals: bool = True,
) -> dict:
    """Everything the verdict reads, for many studies at once: the runs' Fisher z ``z``, within
    variances ``v`` and own p-values ``p_run``, shape (studies, models, runs), where ``mask``."""
    zm, Vm, pm, t2r, df, q = model_means_batch(z, v, mask, p_run)
    present = mask.any(-1)
    M = present.sum(-1)
    out = {"n_models": M, "zm": zm, "Vm": Vm, "pm": pm, "tau2_runs": t2r, "df_runs": df, "q_runs": q}
    # do the models differ by more than their runs explain? Cochran's Q of the z_m on M - 1 degrees of freedom
    q_m, i2 = cochran_q(zm, Vm, present)
    dfm = np.maximum(M - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_het = np.where(
            df > 0, stats.f.sf(q_m / dfm / np.fmax(q, 1.0), dfm, np.maximum(df, 1)), stats.chi2.sf(q_m, dfm)
        )
    for k, val in (("q_models", q_m), ("df_models", M - 1), ("i2_models", i2), ("p_heterogeneity", p_het)):
        out[k] = np.where(M >= 2, val, np.nan)
    p_rev, a, b = reversal_batch(zm, pm, present)
    out.update(p_reversal=np.where(M >= 2, p_rev, np.nan), reversal_pos=a, reversal_neg=b)
    c = consensus_batch(zm, Vm, present, level, TAU_SCALE, intervals)
    out.update(c)
    out["p_mean"] = c["p"]
    zbar, Vbar, ss, dfw = within_runs_batch(z, np.where(mask, v, 1.0), mask)
    out.update(shared_sign_batch(zbar, Vbar, present, ss, dfw, level, bounds=intervals))
    t2_hi = tau2_upper_batch(zm, Vm, present, level)
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(0.5 + level / 2, np.maximum(M - 2, 1)) * np.sqrt(t2_hi + c["se"] ** 2)
        near = (np.abs(np.tanh(c["z"] - half)) < near_zero) & (np.abs(np.tanh(c["z"] + half)) < near_zero)
    out["tau2_high"] = np.where(M >= 3, t2_hi, np.nan)
    out["near"] = near & (M >= 3)
    return out


# ---- the ladder's words ---------------------------------------------------------------------
def _sign_word(x: float) -> str:
    return NEGATIVE if x < 0 else POSITIVE


def rungs(row: dict, alpha: float) -> tuple[str, str]:
    """A pair's two facts, the direction and the spread, each the strongest whose corrected p is below ``alpha``."""
    if row["n_finite"] == 0 or row["n_models_consensus"] < 2:
        return "", ""
    reversal = row["p_reversal_adj"] < alpha
    average = row.get("p_mean_adj", math.nan) < alpha
    nearly = row["n_models_consensus"] >= 3 and row["p_generalises_adj"] < alpha and not reversal
    if nearly:
        direction = f"{_sign_word(row.get('_generalises_sign', row['r_consensus']))} {NEARLY_EVERY}"
    elif average:
        # the sign of the consensus the verdict read (the in-domain-corrected one, where it read that)
        direction = f"{_sign_word(row.get('_consensus_read', row['r_consensus']))} {ON_AVERAGE}"
    else:
        direction = ""
    if reversal:
        spread = SIGN_REVERSAL
    elif row["p_heterogeneity_adj"] < alpha:
        spread = MODELS_DIFFER
    elif row.get("_near") and not nearly:
        spread = NEAR_ZERO
    else:
        spread = ""
    return direction, spread


def verdict(row: dict, alpha: float) -> str:
    """The strongest statement the pair's corrected p-values allow (docs/answer.md's ladder):
    :func:`rungs`' two facts in words (:func:`oodcorr.core.answer.verdict_words`)."""
    if row["n_finite"] == 0:
        return NO_DATA
    if row["n_models_consensus"] < 2:
        return TOO_FEW_MODELS
    return verdict_words(*rungs(row, alpha))
