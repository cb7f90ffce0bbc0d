"""The agreement table: per OOD pair, the answer across models (:func:`agreement`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...core.answer import (
    DEPENDS_ON_FORM,
    NO_DATA,
    NOISE_LIMITABLE,
    NOISE_LIMITED_VERDICT,
    SIGN_REVERSAL,
    verdict_reason,
    verdict_words,
)
from ...core.defaults import ANALYSIS as DEFAULTS
from ..cell.correlate import POOLING_CAP, fisher_z
from ..cell.residualise import parse
from . import measured_answer as measured
from . import multitest
from .consensus import across_models, rungs, verdict

AGREEMENT_KEYS = ["in_domain", "pool_group", "x", "y", "method", "residualiser"]
CONSENSUS_COLUMNS = [
    *(f"{c}_consensus" for c in ("r", "ci_low", "ci_high", "pi_low", "pi_high", "tol_low", "tol_high")),
    "tau2_models",
    "tau2_models_high",
    "tau2_runs",
    "within_scale",
    "within_df",
    "n_models_consensus",
    *(f"p_{k}{adj}" for k in ("mean", "generalises") for adj in ("", "_adj")),
    "share_sign_low",
]
AGREEMENT_COLUMNS = AGREEMENT_KEYS + [
    "verdict",
    "form",
    "line_verdict",
    "direction",
    "spread",
    *CONSENSUS_COLUMNS,
    "n_models",
    "n_finite",
    *(f"n_{sig}{sign}" for sig in ("", "sig_") for sign in ("positive", "negative")),
    "q_models",
    "df_models",
    "i2_models",
    *(f"p_{k}{adj}" for k in ("heterogeneity", "reversal") for adj in ("", "_adj")),
    "reversal",
    "correction",
    "family_size",
    "note",
    "by_model",
    # the answer as measurements (:mod:`.measured_answer`)
    "about",
    "noise",
    *(f"{c}_consensus_{k}" for k in ("eiv", "corrected") for c in ("r", "ci_low", "ci_high")),
    *(f"reliability_{side}{end}" for side in ("x", "y", "in_domain") for end in ("", "_low")),
    "attenuation_low",
    "noise_limited",
    "reason",
    "way_on",
]


def _fmt(v: float) -> str:
    return f"{v:+.2f}" if np.isfinite(v) else "n/a"


def _describe(pooled: pd.DataFrame, group: np.ndarray, n_groups: int) -> dict:
    """Per pair (``group`` numbers ``pooled``'s rows): the models' counts and ``by_model``."""
    r = pooled["r"].to_numpy(float)
    fin = np.isfinite(r)
    sig = (
        np.array([v is True or v == 1 for v in pooled["significant"]], dtype=bool)
        if "significant" in pooled
        else np.zeros(len(pooled), bool)
    ) & fin

    def count(x):
        return np.bincount(group, weights=x.astype(float), minlength=n_groups).astype(int)

    names = pooled["model"].astype(str).to_numpy()
    lo, hi = pooled["ci_low"].to_numpy(float), pooled["ci_high"].to_numpy(float)
    starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1, len(group)]
    return {
        "n_models": np.bincount(group, minlength=n_groups),
        "n_finite": count(fin),
        "n_positive": count(fin & (r > 0)),
        "n_negative": count(fin & (r < 0)),
        "n_sig_positive": count(sig & (r > 0)),
        "n_sig_negative": count(sig & (r < 0)),
        "by_model": [
            "; ".join(
                f"{m}: {_fmt(v)}{'*' if s_ else ''}"
                + (f" [{low:+.2f}, {high:+.2f}]" if np.isfinite(low) and np.isfinite(high) else "")
                for m, v, s_, low, high in zip(names[a:b], r[a:b], sig[a:b], lo[a:b], hi[a:b])
            )
            for a, b in zip(starts[:-1], starts[1:])
        ],
    }


def run_arrays(runs: pd.DataFrame, group: np.ndarray, n_groups: int, sfx: str = ""):
    """The runs with an interval as :func:`across_models`' arrays, one study per pair (columns ``r<sfx>``, ...)."""
    r, se = runs["r" + sfx].to_numpy(float), runs["se_z" + sfx].to_numpy(float)
    use = np.isfinite(r) & np.isfinite(se) & (se > 0)
    model = runs["model"].astype(str).to_numpy()
    gm = pd.factorize(pd.Series(group).astype(str) + "\x00" + model)[0]
    firsts = pd.DataFrame({"g": group, "gm": gm, "model": model, "use": use, "fin": np.isfinite(r)})
    per_model = firsts.groupby("gm", sort=False).agg(g=("g", "first"), model=("model", "first"), use=("use", "any"))
    per_model["fin_left"] = firsts.groupby("gm", sort=False)["fin"].any() & ~per_model["use"]
    left: dict[int, list[str]] = {}
    for g, name in per_model.loc[per_model["fin_left"], ["g", "model"]].itertuples(index=False):
        left.setdefault(int(g), []).append(name)
    kept = per_model[per_model["use"]].copy()
    kept["m"] = kept.groupby("g", sort=False).cumcount()
    m_of = pd.Series(-1, index=per_model.index)
    m_of[kept.index] = kept["m"].to_numpy()
    rows = np.flatnonzero(use)
    m_idx = m_of.reindex(gm[rows]).to_numpy()
    k_idx = pd.Series(gm[rows]).groupby(gm[rows]).cumcount().to_numpy()
    M = int(kept["m"].max()) + 1 if len(kept) else 1
    K = int(k_idx.max()) + 1 if len(rows) else 1
    shape = (n_groups, M, K)
    Z, V, P = np.zeros(shape), np.ones(shape), np.full(shape, np.nan)
    mask = np.zeros(shape, bool)
    gi = group[rows]
    Z[gi, m_idx, k_idx] = fisher_z(r[rows], POOLING_CAP)
    V[gi, m_idx, k_idx] = se[rows] ** 2
    mask[gi, m_idx, k_idx] = True
    if "p" + sfx in runs:
        P[gi, m_idx, k_idx] = runs["p" + sfx].to_numpy(float)[rows]
    names = [[] for _ in range(n_groups)]
    for g, name in kept[["g", "model"]].itertuples(index=False):
        names[int(g)].append(name)
    return Z, V, P, mask, names, left


def _consensus_columns(a: dict, names: list, left: dict, n_groups: int) -> dict:
    """Every agreement column that :func:`across_models` gives, per pair, with the pair's notes."""
    M = a["n_models"]
    two = M >= 2
    three = M >= 3
    nan = np.full(n_groups, np.nan)
    cols = {
        "n_models_consensus": M,
        "tau2_runs": np.where(a["df_runs"] > 0, a["tau2_runs"], np.nan),
        "tau2_models": np.where(two, a["tau2"], nan),
        "tau2_models_high": np.where(three, a["tau2_high"], nan),
        "within_scale": np.where(three, a["within_scale"], nan),
        "within_df": np.where(three, a["within_df"], nan),
        "p_mean": np.where(two, a["p_mean"], nan),
        "p_generalises": np.where(three, a["p_generalises"], nan),
        "share_sign_low": np.where(three, a["share_low"], nan),
        "_generalises_sign": np.where(a["p_high_side"] < a["p_low_side"], -1.0, 1.0),
        "_near": a["near"] & three,
    }
    for k in ("q_models", "df_models", "i2_models", "p_heterogeneity", "p_reversal"):
        cols[k] = np.where(two, a[k], nan)
    for c, k in zip(CONSENSUS_COLUMNS, ("z", "lo", "hi", "pi_lo", "pi_hi", "tol_lo", "tol_hi")):  # r_consensus, ...
        cols[c] = np.where(two & np.isfinite(a[k]), np.tanh(a[k]), nan)
    reversal, notes = [], []
    for g in range(n_groups):
        note = []
        if g in left:
            note.append(f"{len(left[g])} model(s) without an interval left out: {', '.join(sorted(left[g])[:5])}")
        text = ""
        if M[g] >= 2:
            zm, i, j = a["zm"][g], int(a["reversal_pos"][g]), int(a["reversal_neg"][g])
            if zm[i] > 0 and zm[j] < 0:
                text = f"{names[g][i]} {_fmt(math.tanh(zm[i]))} vs {names[g][j]} {_fmt(math.tanh(zm[j]))}"
        if M[g] == 2:
            note.append("2 models: a further model cannot be predicted from 2, so no prediction interval")
        if M[g] >= 3 and a["pi_scale"][g] < 1:
            note.append(
                f"the models agree more closely than their within variances allow (Q {a['q_models'][g]:.2f} on "
                f"{M[g] - 1} df): the prediction interval reads those variances scaled by {a['pi_scale'][g]:.2f}, "
                f"the tolerance bounds by {a['within_scale'][g]:.2f}"
            )
        reversal.append(text)
        notes.append("; ".join(note))
    cols["reversal"] = reversal
    cols["note"] = notes
    return cols


P_ADJUSTED = ("p_heterogeneity", "p_reversal", "p_generalises", "p_mean")
FAMILY_KEYS = [k for k in AGREEMENT_KEYS if k not in ("x", "y")]  # the pairs of one heatmap


def _adjust(df: pd.DataFrame, correction: str) -> None:
    """Each p-value of :data:`P_ADJUSTED` corrected within its family, and the family's size."""
    for c in P_ADJUSTED:
        df[f"{c}_adj"] = math.nan
    df["family_size"] = 0
    for _, idx in df.groupby(FAMILY_KEYS, sort=False, dropna=False).groups.items():
        for c in P_ADJUSTED:
            df.loc[idx, f"{c}_adj"] = multitest.adjust(df.loc[idx, c].to_numpy(float), correction)
        df.loc[idx, "family_size"] = int(np.isfinite(df.loc[idx, "p_reversal"].to_numpy(float)).sum())


OBSERVED_ONLY = tuple(CONSENSUS_COLUMNS[:3])


def _merge(obs: dict, eiv: dict | None, regime: np.ndarray) -> dict:
    """The columns the verdict reads (:mod:`.measured_answer`): the in-domain-corrected ladder's
    where its runs are cross-fitted (``items``); where the in-domain noise is only bounded, each
    p-value the larger of the two ladders' and a sign only where both show it; the observed ladder's
    elsewhere."""
    if eiv is None:
        return {**obs, "_consensus_read": obs["r_consensus"]}
    use = regime != "unknown"
    out = {"_consensus_read": np.where(use, eiv["r_consensus"], obs["r_consensus"])}
    for k, v in obs.items():
        if k in OBSERVED_ONLY:
            out[k] = v
        elif isinstance(v, list):
            out[k] = [b if u else a for a, b, u in zip(v, eiv[k], use)]
        else:
            out[k] = np.where(use, eiv[k], v)
    bound = regime == "bound"
    if bound.any():
        for k in P_ADJUSTED:
            out[k] = np.where(bound, np.maximum(obs[k], eiv[k]), out[k])
        same_mean = np.sign(obs["r_consensus"]) == np.sign(eiv["r_consensus"])
        out["p_mean"] = np.where(bound & ~same_mean, 1.0, out["p_mean"])
        same_sign = obs["_generalises_sign"] == eiv["_generalises_sign"]
        out["p_generalises"] = np.where(bound & ~same_sign, 1.0, out["p_generalises"])
        out["_near"] = np.where(bound, obs["_near"] & eiv["_near"], out["_near"])
    return out


def _twin(res: str) -> str:
    """The residualiser whose Pearson cell is corrected for a cell of ``res``: a spline's own, else
    the linear-kind one of the same covariates."""
    spec = parse(res)
    return res if spec.smoother else spec.line


def _sign_of(direction: str) -> str:
    return direction.split(" ", 1)[0] if direction else ""


def agreement(
    table: pd.DataFrame,
    alpha: float = DEFAULTS["alpha"],
    correction: str = DEFAULTS["agreement_correction"],
    level: float = DEFAULTS["level"],
    near_zero: float = DEFAULTS["near_zero"],
) -> pd.DataFrame:
    """Per OOD pair (and in-domain set, pool group, method, residualiser): the consensus across models and the verdict
    (docs/answer.md#reading-agreementcsv)."""
    table = table if "pool_group" in table.columns else table.assign(pool_group="all runs")
    pooled = table[table["run"] == "pooled"] if "run" in table.columns else table
    if pooled.empty:
        return pd.DataFrame(columns=AGREEMENT_COLUMNS)
    pooled = pooled.sort_values([*AGREEMENT_KEYS, "model"], kind="stable", na_position="last", ignore_index=True)
    key_frame = pooled[AGREEMENT_KEYS].drop_duplicates().reset_index(drop=True)
    n_groups = len(key_frame)
    lookup = key_frame.assign(_g=np.arange(n_groups))
    group = pooled[AGREEMENT_KEYS].merge(lookup, on=AGREEMENT_KEYS, how="left")["_g"].to_numpy()
    # the rows the consensus reads: each model's runs (a model with a pooled row only: that row as its one run)
    if "run" not in table.columns:
        runs = table.assign(run="pooled")
    else:
        runs = table[table["run"] != "pooled"]
        have_runs = set(runs["model"].astype(str))
        pooled_only = table[(table["run"] == "pooled") & ~table["model"].astype(str).isin(have_runs)]
        runs = pd.concat([runs, pooled_only], ignore_index=True)
    run_group = runs[AGREEMENT_KEYS].merge(lookup, on=AGREEMENT_KEYS, how="left")["_g"].to_numpy()
    runs = runs[~pd.isna(run_group)]
    run_group = run_group[~pd.isna(run_group)].astype(int)
    df = key_frame.assign(**_describe(pooled, group, n_groups))
    regime = measured.pair_regimes(runs, run_group, n_groups)
    rel = measured.attenuation(pooled, group, n_groups, level)
    band = near_zero * rel["band"]
    Z, V, P, mask, names, left = run_arrays(runs, run_group, n_groups)
    obs = _consensus_columns(across_models(Z, V, mask, P, level, band), names, left, n_groups)
    eiv = None
    if (regime != "unknown").any():
        Z, V, P, mask, names_e, left_e = run_arrays(runs, run_group, n_groups, "_eiv")
        eiv = _consensus_columns(across_models(Z, V, mask, P, level, band), names_e, left_e, n_groups)
    df = df.assign(**_merge(obs, eiv, regime))
    use = regime != "unknown"
    for c in OBSERVED_ONLY:
        df[c.replace("_consensus", "_consensus_eiv")] = np.where(use, eiv[c], np.nan) if eiv else np.nan
    envelope = {"lo": df["ci_low_consensus_eiv"].to_numpy(float), "hi": df["ci_high_consensus_eiv"].to_numpy(float)}
    bound = regime == "bound"
    envelope["lo"] = np.where(bound, np.fmin(envelope["lo"], df["ci_low_consensus"]), envelope["lo"])
    envelope["hi"] = np.where(bound, np.fmax(envelope["hi"], df["ci_high_consensus"]), envelope["hi"])
    tasks = measured.corrected_consensus(pooled, group, n_groups, regime, envelope, rel["band"], level)
    for c, k in (("r", "r"), ("ci_low", "lo"), ("ci_high", "hi")):
        df[f"{c}_consensus_corrected"] = tasks[k]
    df = df.assign(**{c: v for c, v in rel.items() if c != "band"})
    df["attenuation_low"] = np.where(np.isfinite(rel["band"]) & (rel["band"] < 1), rel["band"], np.nan)
    df["noise"] = [
        "; ".join(dict.fromkeys(t for t in pooled.loc[group == g, "noise"] if isinstance(t, str) and t))
        if "noise" in pooled
        else ""
        for g in range(n_groups)
    ]
    df["correction"] = correction
    _adjust(df, correction)
    df["direction"], df["spread"] = zip(*(rungs(row, alpha) for row in df.to_dict("records")))
    df["verdict"] = [verdict(row, alpha) for row in df.to_dict("records")]
    # ``about`` per pair, and a cell that is not corrected (Spearman, Kendall, a GAM) makes a statement only where
    # the corrected Pearson cell of the same pair and covariates makes it too: a sign where that cell states the
    # same sign, a spread where it states the same spread
    corrected = (df["method"] == "pearson") & df["residualiser"].map(lambda r: parse(r).smoother)
    twins = {
        (t.in_domain, t.pool_group, t.x, t.y, t.residualiser): (reg, t.direction, t.spread)
        for t, reg in zip(df[corrected].itertuples(index=False), regime[corrected.to_numpy()])
    }
    about, direction, spread, verdicts = [], list(df["direction"]), list(df["spread"]), list(df["verdict"])
    for i, row in enumerate(df.itertuples(index=False)):
        if corrected.iloc[i]:
            about.append(measured.ABOUT[regime[i]])
            continue
        twin = twins.get((row.in_domain, row.pool_group, row.x, row.y, _twin(row.residualiser)))
        if twin is None or twin[0] == "unknown":
            about.append(measured.ABOUT["unknown"])
            continue
        about.append(f"tasks (its statements checked against pearson/{_twin(row.residualiser)})")
        if row.direction and _sign_of(row.direction) != _sign_of(twin[1]):
            direction[i] = ""
        if row.spread and row.spread != twin[2]:
            spread[i] = ""
        if (direction[i], spread[i]) != (row.direction, row.spread) and row.n_models_consensus >= 2 and row.n_finite:
            verdicts[i] = verdict_words(direction[i], spread[i])
    df["about"], df["direction"], df["spread"], df["verdict"] = about, direction, spread, verdicts
    # ``line_verdict`` (the ladder on ``r_line``) and ``form`` (the line says another sign or spread than a curve)
    df["form"], df["line_verdict"] = "", ""
    if "se_z_line" in runs and np.isfinite(runs["r_line"].to_numpy(float)).any():
        Z, V, P, mask, names, left = run_arrays(runs, run_group, n_groups, "_line")
        line = pd.DataFrame(_consensus_columns(across_models(Z, V, mask, P, level, band), names, left, n_groups))
        for k in [*FAMILY_KEYS, "n_finite"]:
            line[k] = df[k].to_numpy()
        _adjust(line, correction)
        checked = np.isfinite(line["r_consensus"].to_numpy(float)) | (line["n_models_consensus"].to_numpy() >= 1)
        checked &= df["residualiser"].map(lambda r: parse(r).curve).to_numpy()
        spreads = (SIGN_REVERSAL, "models differ")
        for g, row in enumerate(line.to_dict("records")):
            if not checked[g]:
                continue
            d_line, s_line = rungs(row, alpha)
            df.loc[g, "line_verdict"] = verdict(row, alpha)
            d_curve, s_curve = df.loc[g, "direction"], df.loc[g, "spread"]
            sign_differs = _sign_of(d_line) != _sign_of(d_curve)
            spread_differs = (s_line in spreads) != (s_curve in spreads)
            if sign_differs or spread_differs:
                df.loc[g, "form"] = DEPENDS_ON_FORM
    limited = [
        measured.noise_limited(x, y, z, rel, g) for g, (x, y, z) in enumerate(zip(df["x"], df["y"], df["in_domain"]))
    ]
    lost = use & (df["n_models_consensus"].to_numpy() < 2) & (obs["n_models_consensus"] >= 2)
    for g in np.flatnonzero(lost):  # the in-domain series' variation within its noise: no model left to read
        limited[g] = limited[g] or f"{df['in_domain'].iloc[g]} (its variation is within its item noise)"
    df["noise_limited"] = [t if v in NOISE_LIMITABLE and t else "" for t, v in zip(limited, df["verdict"])]
    df.loc[df["noise_limited"] != "", "verdict"] = NOISE_LIMITED_VERDICT
    df.loc[~df["verdict"].str.startswith(SIGN_REVERSAL), "reversal"] = ""
    if "note" in runs:  # a pair with no data says why: its runs' distinct notes (3), e.g. that its testsets share items
        notes = runs["note"].to_numpy(object)
        for g in np.flatnonzero((df["verdict"] == NO_DATA).to_numpy()):
            said = list(dict.fromkeys(t for t in notes[run_group == g] if isinstance(t, str) and t))
            if said:
                more = f"; and {len(said) - 3} other note(s) in partial_correlations.csv" if len(said) > 3 else ""
                df.loc[g, "note"] = "; ".join([t for t in (df.loc[g, "note"],) if t] + said[:3]) + more
    # ``reason`` and ``way_on`` per pair (:func:`oodcorr.core.answer.verdict_reason`)
    n_runs = pooled["n_runs_finite"].to_numpy(float) if "n_runs_finite" in pooled else np.ones(len(pooled))
    most = np.zeros(n_groups)
    np.maximum.at(most, group, np.nan_to_num(n_runs))
    no_ci = np.isfinite(pooled["r"].to_numpy(float)) & ~np.isfinite(pooled["ci_low"].to_numpy(float))
    extra = {"runs_per_model": most, "models_without_pooled_interval": np.bincount(group, no_ci, minlength=n_groups)}
    said = [
        verdict_reason({**row, **{k: v[g] for k, v in extra.items()}}, alpha, measured.NOISE_LIMITED)
        for g, row in enumerate(df.to_dict("records"))
    ]
    df["reason"], df["way_on"] = zip(*said)
    return df[AGREEMENT_COLUMNS]
