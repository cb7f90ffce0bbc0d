"""The assumptions of a design (:class:`.power.Assumptions`): a pilot's estimates of them (its item noise among
them), and the choice between the defaults, the flags and a pilot."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..across.agreement_table import agreement
from ..cell.residualise import linear, linear_maker
from ..items.item_noise import item_covariance, item_matrices, noise_summary
from ..options import Options
from ..per_run.stacked import run_statistics
from ..pipeline import analyse
from ..simulate.items import item_noise_covariance
from ..simulate.runs import run_scores
from .power import NOISE, ItemNoise, Settings, noisy_runs

DEFAULT_PHIS = (0.5, 0.8, 0.95)  # the AR(1) coefficients simulated without --phi or a pilot
HEADLINE_PHI = 0.8  # the coefficient the alternatives are shown at, when it is among them
PHI_CAP = 0.98  # every simulated coefficient is taken into [0, PHI_CAP]
SERIES_KEYS = ["model", "in_domain", "run"]  # one run of the pilot
DIFFICULTIES = np.round(np.arange(0.0, 0.91, 0.05), 2)  # the grid fit_persistence searches
PERSISTENCES = np.round(np.r_[np.arange(0.0, 0.951, 0.025), 0.97, 0.98], 3)
SHARE_FLOOR = 0.05  # a testset's residual is never taken to be more than 95 % item noise


def _iqr(values) -> list[float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    return [float(np.percentile(v, 25)), float(np.percentile(v, 75))] if len(v) else [math.nan, math.nan]


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
    """{testset: {"items", "accuracy", "disagreement", "difficulty", "persistence"}} over the pilot's runs, the
    last two fitted to its item noise's correlation between checkpoints (:func:`fit_persistence`)."""
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
        d, p = fit_persistence(corr, w, float(np.mean(a["accuracy"])))
        out[ts] = {
            "items": int(np.median(a["items"])),
            "accuracy": float(np.mean(a["accuracy"])),
            "disagreement": float(np.nanmedian(a["disagree"])) if np.isfinite(a["disagree"]).any() else math.nan,
            "difficulty": None if not np.isfinite(d) else d,
            "persistence": None if not np.isfinite(p) else p,
        }
    return out


def _item_estimates(
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
    per = _per_testset_items(long, examples) if examples is not None and len(examples) else {}
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
    # one row per residual series (a run's OOD testset) with its corrected AR(1) estimate ``phi``
    keys = SERIES_KEYS
    sides = [runs[keys + [s, f"phi_{s}"]].set_axis(keys + ["testset", "phi"], axis=1) for s in "xy"]
    ser = pd.concat(sides, ignore_index=True).drop_duplicates(keys + ["testset"])
    ser["phi"] = pd.to_numeric(ser["phi"], errors="coerce")
    ser = ser[np.isfinite(ser["phi"].to_numpy(float))]
    if ser.empty:
        raise ValueError(
            "the pilot has no run whose OOD scores got an AR(1) estimate: it needs numeric units "
            "(checkpoints, ordered) and at least two OOD testsets with scores at 4 checkpoints or more"
        )
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
    # over the runs with at least 4 complete checkpoints and a varying in-domain score
    resid_sd: dict[str, list[float]] = {}  # per OOD testset and run: its residual sd on the in-domain score
    mean_score: dict[str, list[float]] = {}  # ... and its mean score
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
            res, _ = linear(y[ok], z[ok])
            resid_sd.setdefault(ts, []).append(float(np.sqrt(res @ res / (ok.sum() - 2))))
            mean_score.setdefault(ts, []).append(float(np.mean(y[ok])))
    # the item noise first at the observed phi (the residual sd's scale depends on phi), then at the true one
    items = _item_estimates(long, examples, sizes, runs, resid_sd, mean_score, phi_obs, checkpoints, [])
    noise = pilot_noise(items)
    phis = np.round(np.arange(0.0, 0.96, 0.05), 2)
    med = []  # the median corrected estimate of 400 simulated runs of the pilot's length and item noise
    for true in phis:
        rng = np.random.default_rng([seed, checkpoints, int(round(1000 * true))])
        scores = run_scores(rng, np.zeros(400), checkpoints, float(true), noise=NOISE)
        if not noise.none:
            scores = noisy_runs(scores, noise, NOISE / noise.residual_sd, rng, splits=1)["scores"]
        st = run_statistics(scores)
        med.append(float(np.median(np.concatenate([st["phi_x"], st["phi_y"]]))))
    med = np.maximum.accumulate(np.asarray(med))
    phi = _true_phi(phi_obs, phis, med)
    items = _item_estimates(long, examples, sizes, runs, resid_sd, mean_score, phi, checkpoints, notes)
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
    """The item noise a pilot's estimates (:func:`_item_estimates`) describe, each
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
