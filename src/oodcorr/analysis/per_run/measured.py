"""One run's cells as measurements: the correlation with the in-domain set's item noise taken out (``r_eiv``),
the tasks' correlation (``r_corrected``) and each series' reliability (:mod:`.measurement` has the estimators)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ..cell.inference import modified_tests
from ..cell.resample import cell_rng
from ..cell.residualise import linear_maker, parse, spline_basis
from ..items.item_noise import BOUND, ITEMS, KINDS, NEITHER, UNKNOWN, TestsetNoise, binomial_bound, half_means
from ..items.measurement import SPLITS, bounded, cross_fitted, disattenuate, spline_cross_fitted

NAN = math.nan
COLUMNS = (
    *(f"{c}_eiv" for c in ("r", "ci_low", "ci_high", "p", "se_z", "n_eff")),
    *(f"{c}_corrected" for c in ("r", "ci_low", "ci_high")),
    *(f"reliability_{side}{end}" for side in ("x", "y", "in_domain") for end in ("", "_low", "_high")),
    "task_cov",
    *(f"{kind}_var_{side}" for kind in ("task", "eiv", "obs") for side in ("x", "y")),
)
# what a run's cell of another method or residualiser keeps of its pair's linear-kind columns: the
# testsets' reliabilities and the variances they are made of (not the correlations)
SHARED = tuple(c for c in COLUMNS if c.startswith(("reliability_", "task_var_", "eiv_var_", "obs_var_"))) + ("noise",)


def empty(noise_text: str = "") -> dict:
    return {**dict.fromkeys(COLUMNS, NAN), "eiv_from": "", "noise": noise_text}


def exact_maker(n: int, steps: np.ndarray | None) -> np.ndarray:
    """The residual maker of the covariates known without noise: the intercept, and the step."""
    if steps is None:
        return np.eye(n) - 1.0 / n
    return linear_maker(np.asarray(steps, dtype=float)[:, None])


def _interval(est, sd, level, high=1.0):
    q = float(stats.norm.ppf(0.5 + level / 2))
    return est - q * sd, np.minimum(est + q * sd, high)


def run_measurements(
    cols: dict,
    zname: str,
    ood: list[str],
    noise: dict[str, TestsetNoise],
    opts,
    steps: np.ndarray | None,
    ordered: bool,
    where: tuple,
) -> dict:
    """Every (x, y, residualiser) of the run's linear- and spline-kind residualisers -> its measurement columns."""
    out: dict = {}
    kinds = list(dict.fromkeys(parse(res).line for res in opts.residualisers if parse(res).smoother))
    splines = [res for res in opts.residualisers if parse(res).kind == "spline"]
    if not kinds or zname not in cols:
        return out
    z = cols[zname]
    present = [ts for ts in ood if ts in cols]
    masks: dict[bytes, list[tuple[str, str]]] = {}
    for i, a in enumerate(present):
        for b in present[i + 1 :]:
            m = np.isfinite(z) & np.isfinite(cols[a]) & np.isfinite(cols[b])
            masks.setdefault(m.tobytes(), []).append((a, b))
    for key, pairs in masks.items():
        mask = np.frombuffer(key, dtype=bool)
        if mask.sum() < 5:
            continue
        for res in (*kinds, *splines):  # the lines first: a spline's columns start from its line's
            spec = parse(res)
            if spec.step and steps is None:  # no step to residualise on: the cells say so
                continue
            st = steps[mask] if spec.step else None
            if spec.kind == "linear":
                got = _pairs(cols, zname, pairs, noise, mask, st, ordered, opts.level, opts.seed, where)
            else:
                lines = {p: out[(*p, spec.line)] for p in pairs}
                got = _spline_rows(cols, zname, lines, noise, mask, st, ordered, opts, where)
            for (a, b), row in got.items():
                out[(a, b, res)] = row
    return out


def _spline_rows(cols, zname, lines, noise, mask, steps, ordered, opts, where) -> dict:
    """The measurement columns of a spline's pairs, from its line's (``lines``: pair -> the line's columns)."""
    pairs = list(lines)
    unknown = dict.fromkeys(("task_cov", "r_corrected", "ci_low_corrected", "ci_high_corrected"), NAN)
    rows = {p: {**lines[p], **unknown} for p in pairs}
    zh = _halves(noise.get(zname, UNKNOWN), mask, cell_rng(opts.seed, *where, zname, "halves"))
    if zh is None:
        return rows
    names = list(dict.fromkeys(n for p in pairs for n in p))
    X = np.column_stack([cols[n][mask] for n in names])
    cov = cols[zname][mask][:, None] if steps is None else np.column_stack([cols[zname][mask], steps])
    basis = spline_basis(cov, opts.gam)
    lams = basis.choose(X) if basis is not None else np.full(len(names), np.inf)
    index = {n: i for i, n in enumerate(names)}
    idx = np.array([[index[a], index[b]] for a, b in pairs])
    pos = np.flatnonzero(mask) if ordered else None
    got = spline_cross_fitted(zh, X, steps, idx, lams, pos, opts.level, opts.gam)
    if got is None:
        return rows
    for k, p in enumerate(pairs):
        for c in ("r", "ci_low", "ci_high", "p", "se_z", "n_eff"):
            rows[p][f"{c}_eiv"] = float(got[c][k])
    return rows


def _halves(tn: TestsetNoise, mask: np.ndarray, rng) -> np.ndarray | None:
    if tn.kind != ITEMS:
        return None
    mat = tn.mat[mask]
    if not np.all(np.isfinite(mat[:, 0])) or mat.shape[1] < 4:
        return None
    return half_means(mat, SPLITS, rng, tn.strata)[0]


def _pairs(cols, zname, pairs, noise, mask, steps, ordered, level, seed, where) -> dict:
    """The measurement columns of ``pairs`` (all complete on ``mask``) for one residualiser."""
    z = cols[zname][mask]
    T = len(z)
    P = exact_maker(T, steps)
    pos = np.flatnonzero(mask) if ordered else None
    names = list(dict.fromkeys([n for p in pairs for n in p]))
    index = {n: i for i, n in enumerate(names)}
    X = np.column_stack([cols[n][mask] for n in names])
    idx = np.array([[index[a], index[b]] for a, b in pairs])
    tz = noise.get(zname, UNKNOWN)
    halves = {n: _halves(noise.get(n, UNKNOWN), mask, cell_rng(seed, *where, n, "halves")) for n in (zname, *names)}
    zh = halves[zname]
    # each series' observed residuals (least squares on the whole in-domain score) and their noise
    R_obs = linear_maker(np.column_stack([z] + ([steps] if steps is not None else [])))
    obs = np.einsum("ts,ts->s", R_obs @ X, R_obs @ X)
    words = {
        ITEMS: "item noise estimated from per-item correctness",
        BOUND: "bounded by testset size (binomial)",
        NEITHER: "item noise unknown",
    }
    rows = {}
    for p in pairs:  # what the noise of each testset of the cell is known from, in words
        known = {kind: [n for n in (zname, *p) if noise.get(n, UNKNOWN).kind == kind] for kind in KINDS}
        rows[p] = empty("; ".join(f"{', '.join(v)}: {words[k]}" for k, v in known.items() if v))
    rel = {}
    for n in names:  # a first look from the halves (the cell's own numbers replace it), else the bound's low end
        tn, h, x = noise.get(n, UNKNOWN), halves[n], X[:, index[n]]
        prod = float(np.mean([(R_obs @ a) @ (R_obs @ b) for a, b in h])) if h is not None else None
        bound = None
        if tn.kind in (ITEMS, BOUND):
            sizes = tn.sizes[mask] if tn.kind == BOUND else np.full(len(x), float(tn.mat.shape[1]))
            bound = float(np.trace(R_obs @ binomial_bound(x, sizes) @ R_obs.T))
        rel[n] = _reliability(obs[index[n]], prod, bound, len(x), level)
    prod = float(np.mean(np.einsum("kt,tu,ku->k", zh[:, 0], P, zh[:, 1]))) if zh is not None else None
    bound = float(np.trace(P @ binomial_bound(z, tz.sizes[mask]) @ P)) if tz.kind == BOUND else None
    rel_z = _reliability(float((P @ z) @ (P @ z)), prod, bound, len(z), level)
    for p in pairs:
        for side, n in zip(("x", "y"), p):
            rows[p].update({f"reliability_{side}{s}": v for s, v in zip(("", "_low", "_high"), rel[n])})
        rows[p].update({f"reliability_in_domain{s}": v for s, v in zip(("", "_low", "_high"), rel_z)})
    if zh is not None:  # the in-domain items known: the cross-fitted correlation, the tasks' moments
        # and, where both OOD sets' items are known, the tasks' correlation with its interval
        K, T = zh.shape[0], zh.shape[-1]
        XH = np.full((1, K, 2, T, len(names)), np.nan)
        for s, n in enumerate(names):
            if halves[n] is not None:
                XH[0, ..., s] = halves[n]
        got = cross_fit_columns(cross_fitted(zh[None], P, X[None], XH, idx, pos, level), level)
        for k, p in enumerate(pairs):
            rows[p]["eiv_from"] = "items"
            for c, v in got.items():
                if np.isfinite(v[0, k]) or not c.startswith("reliability_"):
                    rows[p][c] = float(v[0, k])  # a reliability the moments leave unknown keeps the first look's bound
    elif tz.kind == BOUND:
        # the in-domain set's size only: the correlation corrected for the largest in-domain noise its
        # binomial bound allows (``r_eiv``, on the observed scale; the answer also reads the observed
        # one, so a sign is stated only where it holds at both ends), and no estimate of the tasks'
        # correlation (its noise is bounded, not known)
        r = bounded(z, P, X, idx, float(np.trace(P @ binomial_bound(z, tz.sizes[mask]) @ P)))
        for k, p in enumerate(pairs):
            rows[p]["r_eiv"], rows[p]["eiv_from"] = r[k], "bound"
    return rows


def _reliability(total: float, prod: float | None, noise: float | None, n: int, level: float) -> tuple[float, ...]:
    """(estimate, low, high) of the share of a series' residual variance ``total`` that is not item noise: from its
    items' halves' residual product ``prod``, else (NaN, low, 1) from the binomial bound's residual ``noise``."""
    if not total > 0 or (prod is None and noise is None):
        return NAN, NAN, NAN
    if prod is None:
        return NAN, float(1.0 - noise / total), 1.0
    est = prod / total
    lo, hi = _interval(est, math.sqrt((total**2 + prod**2) / max(n - 2, 1)) / total, level)
    return est, float(lo), float(hi)


def cross_fit_columns(got: dict, level: float) -> dict:
    """The measurement columns of cross-fitted cells (:func:`.measurement.cross_fitted`'s arrays, any shape)."""
    df = np.maximum(np.nan_to_num(got["n_eff"], nan=2.0), 2.0)
    out = {f"{c}_eiv": got[c] for c in ("r", "ci_low", "ci_high", "p", "se_z", "n_eff")}
    out["task_cov"] = got["cov"]
    for kind, key in (("task_var", "var"), ("eiv_var", "eiv"), ("obs_var", "obs")):
        for side in ("x", "y"):
            out[f"{kind}_{side}"] = got[f"{key}_{side}"]
    att = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for side in ("x", "y"):
            v = got[f"var_{side}"]
            for name, total in (("reliability", got[f"obs_{side}"]), ("att", got[f"eiv_{side}"])):
                est = np.where(total > 0, v / total, np.nan)
                sd = np.sqrt((total * total + v * v) / df) / total
                ends = (est, *_interval(est, sd, level))
                if name == "reliability":
                    out.update(zip((f"reliability_{side}{e}" for e in ("", "_low", "_high")), ends))
                else:
                    att[side] = ends
        vx, vy, c = got["var_x"], got["var_y"], got["cov"]
        ok = (vx > 0) & (vy > 0)
        out["r_corrected"] = np.where(ok, np.clip(c / np.sqrt(np.where(ok, vx * vy, 1.0)), -1.0, 1.0), np.nan)
    _, lo, hi = disattenuate(got["r"], got["ci_low"], got["ci_high"], *(att[s][i] for i in range(3) for s in "xy"))
    out["ci_low_corrected"], out["ci_high_corrected"] = lo, hi
    return out


def finish_bounded(rows: list[dict], level: float) -> None:
    """The p-values and intervals of the bound-corrected cells, from each cell's observed effective sample size."""
    idx = [
        i for i, row in enumerate(rows) if row.get("eiv_from") == "bound" and not math.isfinite(row.get("p_eiv", NAN))
    ]
    if not idx:
        return
    r = np.array([rows[i]["r_eiv"] for i in idx], dtype=float)
    ne = np.array([rows[i].get("n_eff", NAN) for i in idx], dtype=float)
    p, lo, hi, se = modified_tests("pearson", r, ne, level)
    for k, i in enumerate(idx):
        rows[i].update(p_eiv=p[k], ci_low_eiv=lo[k], ci_high_eiv=hi[k], se_z_eiv=se[k], n_eff_eiv=ne[k])
        # the tasks' correlation lies between the observed (no in-domain noise) and this one (all the
        # bound allows), each divided by the attenuation's range
        lo_all = float(np.minimum(rows[i].get("ci_low", NAN), lo[k]))  # NaN where either end has no interval
        hi_all = float(np.maximum(rows[i].get("ci_high", NAN), hi[k]))
        a = [rows[i][f"reliability_{s}_low"] for s in ("x", "y")]
        _, l2, h2 = disattenuate(NAN, lo_all, hi_all, NAN, NAN, a[0], a[1], 1.0, 1.0)
        rows[i]["ci_low_corrected"], rows[i]["ci_high_corrected"] = float(l2), float(h2)
