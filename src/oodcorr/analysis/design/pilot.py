"""The assumptions of a design (:class:`.power.Assumptions`): a pilot's estimates of them, and the
choice between the defaults, the flags and a pilot."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..across.agreement_table import agreement
from ..options import Options
from ..per_run.stacked import run_statistics
from ..pipeline import analyse
from ..simulate.runs import run_scores
from .items import ItemNoise, noisy_runs
from .pilot_items import item_estimates
from .power import NOISE, Settings

DEFAULT_PHIS = (0.5, 0.8, 0.95)  # the AR(1) coefficients simulated without --phi or a pilot
HEADLINE_PHI = 0.8  # the coefficient the alternatives are shown at, when it is among them
PHI_CAP = 0.98  # every simulated coefficient is taken into [0, PHI_CAP]
SERIES_KEYS = ["model", "in_domain", "run"]  # one run of the pilot


def _iqr(values) -> list[float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    return [float(np.percentile(v, 25)), float(np.percentile(v, 75))] if len(v) else [math.nan, math.nan]


def _observed_phi_curve(checkpoints: int, items: ItemNoise, seed: int):
    """(true phi, median corrected estimate) of 400 simulated runs of the pilot's length and item noise."""
    phis = np.round(np.arange(0.0, 0.96, 0.05), 2)
    med = []
    for phi in phis:
        rng = np.random.default_rng([seed, checkpoints, int(round(1000 * phi))])
        scores = run_scores(rng, np.zeros(400), checkpoints, float(phi), noise=NOISE)
        if not items.none:
            scores = noisy_runs(scores, items, NOISE / items.residual_sd, rng, splits=1)["scores"]
        st = run_statistics(scores)
        med.append(float(np.median(np.concatenate([st["phi_x"], st["phi_y"]]))))
    return phis, np.maximum.accumulate(np.asarray(med))


def _true_phi(observed: float, curve_phis, curve_med) -> float:
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
def _series_phis(runs: pd.DataFrame) -> pd.DataFrame:
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


def _residual_sds(long) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
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


def _spread(tau2) -> dict:
    return {
        "estimate": math.sqrt(float(np.median(tau2))) if len(tau2) else 0.0,
        "iqr": [math.sqrt(max(v, 0.0)) if np.isfinite(v) else math.nan for v in _iqr(tau2)],
        "pairs": int(len(tau2)),
    }


def spreads(pc: pd.DataFrame, settings: Settings, notes: list) -> tuple[dict, dict]:
    """(``model_sd``, ``run_sd``): the square roots of the median between-model and between-run variances of the
    agreement table's pairs, with their interquartile ranges."""
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
    examples=None,
) -> dict:
    """What a pilot (a canonical long table; ``examples`` its per-item correctness, or None) says about ``phi``,
    ``items``, ``model_sd`` and ``run_sd``, with how uncertain each is."""
    # the pilot's partial correlations by the procedure the simulation uses (Pearson, linear)
    same = {k: getattr(settings, k) for k in ("alpha", "level", "correction", "agreement_correction", "near_zero")}
    opts = Options(("pearson",), ("linear",), pool_by=tuple(pool_by), step0_check=False, example_boot=0, **same)
    pc = analyse(long, opts, examples, run_info=run_info)
    runs = pc[pc["run"] != "pooled"]
    ser = _series_phis(runs)
    checkpoints = int(np.median(runs["n"].to_numpy(float)[np.isfinite(runs["r"].to_numpy(float))]))
    phi_obs = float(ser["phi"].median())
    # the series' median phi over ``n_boot`` resamples of the pilot's runs: its 2.5 and 97.5 percentiles
    run_ids = ser[SERIES_KEYS].astype(str).agg("/".join, axis=1).to_numpy()
    uniq = np.unique(run_ids)
    by_run = {u: ser["phi"].to_numpy(float)[run_ids == u] for u in uniq}
    rng = np.random.default_rng([seed, 26])
    boots = [
        float(np.median(np.concatenate([by_run[u] for u in rng.choice(uniq, size=len(uniq))]))) for _ in range(n_boot)
    ]
    obs_lo, obs_hi = (float(np.percentile(boots, q)) for q in (2.5, 97.5))
    notes: list[str] = []
    resid = _residual_sds(long)
    # the item noise first at the observed phi (the residual sd's scale depends on phi), then at the true one
    items = item_estimates(long, examples, sizes, runs, *resid, phi_obs, checkpoints, [])
    phis, med = _observed_phi_curve(checkpoints, pilot_noise(items), seed)
    phi = _true_phi(phi_obs, phis, med)
    items = item_estimates(long, examples, sizes, runs, *resid, phi, checkpoints, notes)
    model_sd, run_sd = spreads(pc, settings, notes)
    return {
        "models": int(long["model"].nunique()),
        "runs": len(uniq),
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
            "estimate": phi,
            "low": _true_phi(obs_lo, phis, med),
            "high": _true_phi(obs_hi, phis, med),
            "how": (
                f"the true AR(1) coefficient whose simulated runs of {checkpoints} checkpoints (with the pilot's "
                "item noise) give the pilot's median corrected estimate (and the ends of its bootstrap interval "
                "over runs)"
            ),
        },
        "items": items,
        "model_sd": model_sd,
        "run_sd": run_sd,
        "notes": notes,
    }


# ---- which assumption comes from where ----------------------------------------------------------
PILOT_ITEMS = {  # ItemNoise field -> the key of the pilot's item estimates it is read from
    "in_domain": "in_domain_items",
    "ood": "ood_items",
    "persistence": "persistence",
    "difficulty": "difficulty",
    "accuracy": "accuracy",
    "residual_sd": "residual_sd",
}


def pilot_noise(items: dict, given: dict | None = None) -> ItemNoise:
    """The item noise a pilot's estimates (:func:`.pilot_items.item_estimates`) describe, each
    field of ``given`` (ItemNoise field -> value; ``math.inf`` for a size: no item noise) kept."""
    fields = {f: items.get(k) for f, k in PILOT_ITEMS.items() if items.get(k) is not None}
    fields.update(given or {})
    return ItemNoise(**{f: (None if v == math.inf else v) for f, v in fields.items()})


@dataclass
class Chosen:
    """The assumptions ``oodcorr design`` simulates and, per assumption, where it came from."""

    phis: list[float]
    headline: float
    model_sd: float
    run_sd: float
    items: ItemNoise
    sources: dict


def choose_assumptions(
    *,
    phi=None,
    phi_alternatives: float | None = None,
    model_sd: float | None = None,
    run_sd: float | None = None,
    items: dict | None = None,
    sources: dict,
    pilot: dict | None = None,
) -> Chosen:
    """The assumptions: each given one as it is, else the pilot's estimate, else the default."""
    sources = dict(sources)
    given = dict(items or {})
    phis = list(phi) if phi else list(DEFAULT_PHIS)
    if phi_alternatives is not None:
        headline = phi_alternatives
    else:
        headline = HEADLINE_PHI if HEADLINE_PHI in phis else phis[len(phis) // 2]
    md, rd = model_sd or 0.0, run_sd or 0.0
    noise = pilot_noise({}, given)
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
        est = pilot["items"]
        noise = pilot_noise(est, given)
        from_pilot = [f for f, k in PILOT_ITEMS.items() if f not in given and est.get(k) is not None]
        if {"in_domain", "ood"} & set(from_pilot):
            sources["items"] = "the pilot's testsets (median items)"
        if "persistence" in from_pilot:
            sources["persistence"] = f"the pilot's per-item correctness ({est.get('how', '')})"
        if "residual_sd" in from_pilot:
            sources["residual_sd"] = "the pilot: its OOD series' residual sd times the root of their reliability"
    phis = [min(max(float(p), 0.0), PHI_CAP) for p in phis]
    headline = min(max(float(headline), 0.0), PHI_CAP)
    return Chosen(phis, headline, md, rd, noise, sources)
