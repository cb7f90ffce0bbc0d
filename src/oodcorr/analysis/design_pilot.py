"""The assumptions of a design (:class:`.design.Assumptions`): a pilot's estimates of them, and the
choice between the defaults, the flags and a pilot.

A pilot is a scores table already run (a canonical long table, :data:`.pipeline.CANON`). It is
analysed with the per-run procedure the simulation uses (Pearson, the linear residualiser), and
its estimates are read off in named steps: the residual series' AR(1) coefficients
(:func:`series_phis`), their median read against the bias of short runs
(:func:`observed_phi_curve`, :func:`true_phi`) with a bootstrap over runs (:func:`phi_bootstrap`),
the testsets' sampling noise against their residual sd (:func:`residual_sds`,
:func:`sampling_noise`), and the spread between models and between runs (:func:`spreads`).
:func:`choose_assumptions` then says which of the defaults, the flags and the pilot each
assumption comes from (``oodcorr design``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .agreement_table import agreement
from .design import NOISE, Settings, run_statistics
from .options import Options
from .pipeline import analyse
from .simulate import run_scores

DEFAULT_PHIS = (0.5, 0.8, 0.95)  # the AR(1) coefficients simulated without --phi or a pilot
HEADLINE_PHI = 0.8  # the coefficient the alternatives are shown at, when it is among them
PHI_CAP = 0.98  # every simulated coefficient is taken into [0, PHI_CAP]
SERIES_KEYS = ["model", "in_domain", "run"]  # one run of the pilot


def _iqr(values) -> list[float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    return [float(np.percentile(v, 25)), float(np.percentile(v, 75))] if len(v) else [math.nan, math.nan]


def observed_phi_curve(checkpoints: int, sampling: float, phis=None, runs: int = 400, seed: int = 0):
    """(true phi, median corrected estimate of the residuals' AR(1) coefficient) of simulated runs
    with ``checkpoints`` checkpoints and sampling noise ``sampling`` (:class:`.design.Assumptions`):
    the estimate in short runs is biased towards 0 (0.72 for a true 0.8 at 21 checkpoints), which a
    pilot's estimate is read against."""
    phis = np.round(np.arange(0.0, 0.96, 0.05), 2) if phis is None else np.asarray(phis, dtype=float)
    med = []
    for phi in phis:
        rng = np.random.default_rng([seed, checkpoints, int(round(1000 * phi)), int(round(1e6 * sampling))])
        st = run_statistics(
            run_scores(rng, np.zeros(runs), checkpoints, float(phi), noise=NOISE, sampling_sd=sampling * NOISE)
        )
        med.append(float(np.median(np.concatenate([st["phi_x"], st["phi_y"]]))))
    return phis, np.maximum.accumulate(np.asarray(med))


def true_phi(observed: float, curve_phis, curve_med) -> float:
    """The true phi whose simulated median estimate is ``observed`` (interpolated; the ends clamp)."""
    if not np.isfinite(observed):
        return math.nan
    if observed <= curve_med[0]:
        return float(curve_phis[0])
    if observed >= curve_med[-1]:
        return float(curve_phis[-1])
    # the curve can be flat where estimates pile at 0 or at the cap: take the middle of a flat stretch
    lo = float(np.interp(observed, curve_med, curve_phis))
    hi = float(-np.interp(-observed, -curve_med[::-1], -curve_phis[::-1]))
    return 0.5 * (lo + hi)


# ---- the steps of pilot_estimates ---------------------------------------------------------------
def analyse_pilot(long, run_info, pool_by, settings: Settings) -> pd.DataFrame:
    """The pilot's partial correlations by the procedure the simulation uses (Pearson, linear)."""
    opts = Options(
        methods=("pearson",),
        residualisers=("linear",),
        pool_by=tuple(pool_by),
        step0_check=False,
        example_boot=0,
        alpha=settings.alpha,
        level=settings.level,
        correction=settings.correction,
        agreement_correction=settings.agreement_correction,
        near_zero=settings.near_zero,
    )
    return analyse(long, opts, run_info=run_info)


def series_phis(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per residual series (a run's OOD testset) with its corrected AR(1) estimate ``phi``
    (``phi_x``/``phi_y`` of the per-run rows ``runs``); ValueError when no series has one."""
    keys = SERIES_KEYS
    series = (
        np.concatenate([runs[keys + ["x", "phi_x"]].to_numpy(), runs[keys + ["y", "phi_y"]].to_numpy()])
        if len(runs)
        else np.empty((0, 5))
    )
    ser = pd.DataFrame(series, columns=keys + ["testset", "phi"]).drop_duplicates(keys + ["testset"])
    ser["phi"] = pd.to_numeric(ser["phi"], errors="coerce")
    ser = ser[np.isfinite(ser["phi"].to_numpy(float))]
    if ser.empty:
        raise ValueError(
            "the pilot has no run whose OOD scores got an AR(1) estimate: it needs numeric units "
            "(checkpoints, ordered) and at least two OOD testsets with scores at 4 checkpoints or more"
        )
    return ser


def phi_bootstrap(ser: pd.DataFrame, seed: int, n_boot: int) -> tuple[int, float, float]:
    """(the pilot's runs, the 2.5 and 97.5 percentiles of the series' median phi over ``n_boot``
    resamples of its runs)."""
    run_ids = ser[SERIES_KEYS].astype(str).agg("/".join, axis=1).to_numpy()
    uniq = np.unique(run_ids)
    by_run = {u: ser["phi"].to_numpy(float)[run_ids == u] for u in uniq}
    rng = np.random.default_rng([seed, 26])
    boots = [
        float(np.median(np.concatenate([by_run[u] for u in rng.choice(uniq, size=len(uniq))]))) for _ in range(n_boot)
    ]
    obs_lo, obs_hi = (float(np.percentile(boots, q)) for q in (2.5, 97.5))
    return len(uniq), obs_lo, obs_hi


def residual_sds(long) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """({OOD testset: its residual sd on the in-domain score, per run}, {testset: its mean score,
    per run}), over the runs with at least 4 complete checkpoints and a varying in-domain score."""
    resid_sd: dict[str, list[float]] = {}
    mean_score: dict[str, list[float]] = {}
    for (_, _, _), g in long.groupby(SERIES_KEYS, sort=True):
        dom = g["in_domain"].iloc[0]
        wide = g.pivot_table(index="unit", columns="testset", values="score", aggfunc="first")
        if dom not in wide.columns:
            continue
        z = wide[dom].to_numpy(float)
        for ts in wide.columns:
            if ts == dom:
                continue
            y = wide[ts].to_numpy(float)
            ok = np.isfinite(y) & np.isfinite(z)
            if ok.sum() < 4 or np.ptp(z[ok]) == 0:
                continue
            X = np.column_stack([np.ones(ok.sum()), z[ok]])
            beta, *_ = np.linalg.lstsq(X, y[ok], rcond=None)
            res = y[ok] - X @ beta
            resid_sd.setdefault(ts, []).append(float(np.sqrt(res @ res / (ok.sum() - 2))))
            mean_score.setdefault(ts, []).append(float(np.mean(y[ok])))
    return resid_sd, mean_score


def sampling_noise(resid_sd: dict, mean_score: dict, sizes: dict | None, notes: list) -> tuple[dict, list, float]:
    """(per testset: its residual sd, mean score, examples and, with a known size, its binomial
    sampling sd and share of the residual; the ratios; their median, 0 when none), a note in
    ``notes`` when no testset's size is known."""
    per_testset = {}
    for ts in sorted(resid_sd):
        sd = float(np.median(resid_sd[ts]))
        p = float(np.mean(mean_score[ts]))
        n = (sizes or {}).get(ts)
        entry = {"residual_sd": sd, "mean_score": p, "examples": n}
        if n and 0 <= p <= 1 and sd > 0:
            s = math.sqrt(p * (1 - p) / n)
            share = min(s * s / (sd * sd), 0.95)  # the rest of the residual is never taken below 5 %
            entry.update(sampling_sd=s, sampling_share=share, sampling=math.sqrt(share / (1 - share)))
        per_testset[ts] = entry
    ratios = [e["sampling"] for e in per_testset.values() if "sampling" in e]
    if not ratios:
        notes.append(
            "the sampling noise is not estimated: no testset of the pilot has a known size (an `n` column, "
            "--examples N, or the config's max_examples) and scores in [0, 1]"
        )
    return per_testset, ratios, float(np.median(ratios)) if ratios else 0.0


def _spread(tau2) -> dict:
    return {
        "estimate": math.sqrt(float(np.median(tau2))) if len(tau2) else 0.0,
        "iqr": [math.sqrt(max(v, 0.0)) if np.isfinite(v) else math.nan for v in _iqr(tau2)],
        "pairs": int(len(tau2)),
    }


def spreads(pc: pd.DataFrame, settings: Settings, notes: list) -> tuple[dict, dict]:
    """(``model_sd``, ``run_sd``): the square roots of the median between-model and between-run
    variances of the agreement table's pairs, with their interquartile ranges; a note in ``notes``
    when fewer than 2 models give no between-model variance."""
    agree = agreement(pc, settings.alpha, settings.agreement_correction, settings.level, settings.near_zero)
    t2m = agree["tau2_models"].to_numpy(float)
    t2r = agree["tau2_runs"].to_numpy(float)
    t2m, t2r = t2m[np.isfinite(t2m)], t2r[np.isfinite(t2r)]
    if not len(t2m):
        notes.append("fewer than 2 models in the pilot: the spread between models is not estimated (0 assumed)")
    return _spread(t2m), _spread(t2r)


def pilot_estimates(
    long,
    run_info=None,
    pool_by=(),
    sizes: dict | None = None,
    settings: Settings = Settings(),
    seed: int = 0,
    n_boot: int = 200,
) -> dict:
    """What a pilot (a canonical long table, :data:`.pipeline.CANON`) says about the assumptions,
    with how uncertain each is:

    * ``phi``: the residual series' AR(1) coefficient. Each run's residual series (an OOD score
      after the linear residualiser) gets the analysis' corrected estimate (``phi_x``/``phi_y`` of
      its rows); their median is read against the median that simulated runs of the pilot's
      length give at each true coefficient (:func:`observed_phi_curve`: the estimate is biased
      towards 0), and a bootstrap over the pilot's runs (``n_boot`` resamples) gives its 95 %
      interval. The interquartile range of the series' estimates and the share at the cap are
      reported beside it;
    * ``sampling``: with ``sizes`` (examples per OOD testset), each testset's binomial sampling
      sd ``sqrt(p (1 - p) / n)`` at its mean score, against its residual sd (the sd of its
      residuals on the in-domain score, median over runs): the sampling noise as a multiple of
      the rest of the residual (the :class:`.design.Assumptions` field), per testset and its median;
    * ``model_sd`` and ``run_sd``: the square roots of the median between-model variance
      (``tau2_models`` of the agreement table, over the pairs with 2 models or more) and of the
      median between-run variance (``tau2_runs``), with the interquartile ranges over pairs.
    """
    pc = analyse_pilot(long, run_info, pool_by, settings)
    runs = pc[pc["run"] != "pooled"]
    ser = series_phis(runs)
    checkpoints = int(np.median(runs["n"].to_numpy(float)[np.isfinite(runs["r"].to_numpy(float))]))
    phi_obs = float(ser["phi"].median())
    n_runs, obs_lo, obs_hi = phi_bootstrap(ser, seed, n_boot)
    notes: list[str] = []
    per_testset, ratios, sampling = sampling_noise(*residual_sds(long), sizes, notes)
    phis, med = observed_phi_curve(checkpoints, sampling, seed=seed)
    model_sd, run_sd = spreads(pc, settings, notes)
    return {
        "models": int(long["model"].nunique()),
        "runs": int(n_runs),
        "series": int(len(ser)),
        "checkpoints": checkpoints,
        "phi_observed": {
            "median": phi_obs,
            "iqr": _iqr(ser["phi"]),
            "bootstrap_95": [obs_lo, obs_hi],
            "at_cap": float(np.mean(ser["phi"].to_numpy(float) >= 0.99)),
            "per_testset": {ts: float(g["phi"].median()) for ts, g in ser.groupby("testset")},
        },
        "phi": {
            "estimate": true_phi(phi_obs, phis, med),
            "low": true_phi(obs_lo, phis, med),
            "high": true_phi(obs_hi, phis, med),
            "how": (
                f"the true AR(1) coefficient whose simulated runs of {checkpoints} checkpoints give the pilot's "
                "median corrected estimate (and the ends of its bootstrap interval over runs)"
            ),
        },
        "sampling": {"estimate": sampling, "iqr": _iqr(ratios), "per_testset": per_testset},
        "model_sd": model_sd,
        "run_sd": run_sd,
        "notes": notes,
    }


# ---- which assumption comes from where ----------------------------------------------------------
@dataclass
class Chosen:
    """The assumptions ``oodcorr design`` simulates and, per assumption, where it came from."""

    phis: list[float]
    headline: float
    model_sd: float
    run_sd: float
    sampling: float
    sources: dict


def choose_assumptions(
    *,
    phi=None,
    phi_alternatives: float | None = None,
    model_sd: float | None = None,
    run_sd: float | None = None,
    sampling: float,
    sources: dict,
    pilot: dict | None = None,
) -> Chosen:
    """The assumptions: each given one (a flag) as it is, else the pilot's estimate when there is
    a pilot, else the default (:data:`DEFAULT_PHIS`, the alternatives at :data:`HEADLINE_PHI`
    when it is among them, no spread, ``sampling`` from the testsets' sizes). The pilot's phi
    is simulated at its estimate and the ends of its 95 % interval; its sampling noise replaces
    ``sampling`` when some testset's was estimated. Every phi is taken into [0, :data:`PHI_CAP`].
    ``sources`` (assumption -> where it came from) is copied and completed."""
    sources = dict(sources)
    phis = list(phi) if phi else list(DEFAULT_PHIS)
    if phi_alternatives is not None:
        headline = phi_alternatives
    else:
        headline = HEADLINE_PHI if HEADLINE_PHI in phis else phis[len(phis) // 2]
    md, rd = model_sd or 0.0, run_sd or 0.0
    if pilot:
        ph = pilot["phi"]
        if phi is None:
            phis = [ph["low"], ph["estimate"], ph["high"]]
            sources["phi"] = f"the pilot: {ph['estimate']:.2f}, with its 95 % interval's ends"
        if phi_alternatives is None:
            headline = ph["estimate"]
        if model_sd is None:
            md = pilot["model_sd"]["estimate"]
            sources["model_sd"] = f"the pilot's median between-model variance over {pilot['model_sd']['pairs']} pairs"
        if run_sd is None:
            rd = pilot["run_sd"]["estimate"]
            sources["run_sd"] = "the pilot's median between-run variance"
        if pilot["sampling"]["per_testset"] and any("sampling" in e for e in pilot["sampling"]["per_testset"].values()):
            sampling = pilot["sampling"]["estimate"]
            sources["sampling"] = (
                "the pilot's testsets: binomial sd at their mean score over their residual sd (median)"
            )
    phis = [min(max(float(p), 0.0), PHI_CAP) for p in phis]
    headline = min(max(float(headline), 0.0), PHI_CAP)
    return Chosen(phis, headline, md, rd, sampling, sources)


def sampling_with_more_examples(sampling: float, factor: int) -> float:
    """The sampling noise with ``factor`` times the examples per testset: a binomial sd falls as
    one over the square root of the examples (``examples x4``: half)."""
    return sampling / math.sqrt(factor)
