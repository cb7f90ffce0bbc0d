"""One run's cells: every (OOD pair, method, residualiser) of one model's run (:func:`partial_corr`)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math

import numpy as np
import pandas as pd
from scipy import stats

from ..cell.correlate import corr, residual_pair
from ..cell.form_check import GAIN_COLUMNS, curve_gain, line_of
from ..cell.inference import PHI_MAX, assess, dependence, modified_tests
from ..cell.resample import cell_rng
from ..cell.residualise import Degenerate, parse
from ..items.item_noise import run_noise
from ..items.shared_items import refusals
from ..options import Options
from .example_boot import RunExamples, example_ci, pearson_cis
from .measured import SHARED, empty, finish_bounded, run_measurements

log = logging.getLogger(__name__)


def ordered_units(units: pd.Series) -> bool:
    """Whether ``units`` are ordered (numeric, not boolean): consecutive units are then dependent."""
    return pd.api.types.is_numeric_dtype(units) and not pd.api.types.is_bool_dtype(units)


def plain(v):
    return v.item() if hasattr(v, "item") else v


_CELL_NAN = (
    *(f"{c}{sfx}" for sfx in ("", "_no_step0", "_line") for c in ("r", "ci_low", "ci_high", "p", "se_z")),
    "p_param",
    "p_perm",
    "block_length",
    "n_eff",
    "phi_x",
    "phi_y",
    "ex_ci_low",
    "ex_ci_high",
    *GAIN_COLUMNS,
)


def _nan_row(note: str) -> dict:
    return {**dict.fromkeys(_CELL_NAN, math.nan), **empty(), "n": 0, "note": note, "p_method": "", "ex_note": ""}


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every cell of one run reads: its names, score columns, units, settings and the caches its cells share."""

    model: str
    run: str
    zname: str
    cols: dict
    steps: np.ndarray | None  # the units as numbers, where they are ordered
    ordered: bool
    step0: int | None  # the position of unit 0, where the step-0 check recomputes the cells
    rex: RunExamples | None
    opts: Options
    cache: dict = dataclasses.field(default_factory=dict)
    ex_cache: dict = dataclasses.field(default_factory=dict)


def _infer(run: _Run, rp: dict, r: float, names, method: str, res: str, opts: Options, rng_parts) -> dict:
    """The uncertainty of the cell's correlation ``r`` (:func:`.inference.assess`), each series' dependence cached."""
    pos = np.flatnonzero(rp["mask"]) if run.ordered else None
    deps = []
    for label, name in zip("xy", names):
        key = ("dependence", name, method, res, rp["mask"].tobytes(), run.ordered)
        if key not in run.cache:
            run.cache[key] = dependence(rp[f"r{label}"], rp[f"R{label}"], pos)
        deps.append(run.cache[key])
    rng = cell_rng(opts.seed, run.model, run.run, *rng_parts) if opts.inference == "block" else None
    return assess(rp, r, method, pos, opts, tuple(deps), rng, defer=True)


def _finish_tests(rows: list[dict], opts: Options) -> None:
    """p, interval and se_z of every deferred cell, vectorised per method, then the low-information notes."""
    for sfx in ("", "_no_step0", "_line") if opts.inference != "block" else ("_line",):
        for m in opts.methods:
            idx = [i for i, row in enumerate(rows) if row["method"] == m and f"_defer{sfx}" in row]
            if not idx:
                continue
            r = np.array([rows[i]["r" + sfx] for i in idx], dtype=float)
            ne = np.array([rows[i]["_defer" + sfx] for i in idx], dtype=float)
            p, lo, hi, se = modified_tests(m, r, ne, opts.level)
            for j, i in enumerate(idx):
                rows[i].update({"p" + sfx: p[j], "ci_low" + sfx: lo[j], "ci_high" + sfx: hi[j], "se_z" + sfx: se[j]})
    idx = [i for i, row in enumerate(rows) if "_dof" in row]
    if idx:
        r = np.array([rows[i]["r"] for i in idx], dtype=float)
        dof = np.array([rows[i]["_dof"] for i in idx], dtype=float)
        pp = modified_tests("pearson", r, dof + 2, opts.level)[0]  # the t-test on dof degrees of freedom
        for j, i in enumerate(idx):
            rows[i]["p_param"] = float(pp[j])
    for row in rows:
        for k in ("_defer", "_defer_no_step0", "_defer_line", "_dof"):
            row.pop(k, None)
        if math.isfinite(row.get("r", math.nan)):
            notes = (row.get("note"), _information_note(row, opts), _cap_note(row["phi_x"], row["phi_y"]))
            row["note"] = "; ".join(n for n in notes if n)


def _cap_note(phi_x: float, phi_y: float) -> str:
    """What a cell's note says when a residual series' AR(1) estimate reached its cap (PHI_MAX)."""
    at = [s for s, phi in (("x", phi_x), ("y", phi_y)) if math.isfinite(phi) and phi >= PHI_MAX]
    if not at:
        return ""
    return (
        f"the AR(1) estimate of the {' and '.join(at)} residuals reached its cap {PHI_MAX:g}: the residual "
        "series trends or wanders (it looks nonstationary), so n_eff is the procedure's floor and the "
        "interval as wide as it gets; try a residualiser that follows the trend (gam, linear+step) or "
        "more checkpoints (docs/answer.md#when-the-ar1-estimate-reaches-its-cap)"
    )


def _information_note(a: dict, opts: Options) -> str:
    ne, n = a["n_eff"], a["n"]
    if not math.isfinite(ne) or ne >= opts.min_n_eff:
        return ""
    ar = (
        f" (AR(1) coefficients {a['phi_x']:.2f} and {a['phi_y']:.2f} after correction)"
        if math.isfinite(a["phi_x"])
        else ""
    )
    what = (
        "fewer than 3 effective points, so no test or interval"
        if not math.isfinite(a["p"])
        else "too little independent information, so the interval is wide"
    )
    return f"effective sample size {ne:.1f} of {n} units{ar}: {what}"


def _cell(run: _Run, a: str, b: str, method: str, res: str) -> dict:
    """One cell: the partial correlation of ``a`` and ``b`` by ``method`` on the residuals of ``res``; its checks."""
    opts, cols = run.opts, run.cols
    spec = parse(res)
    if spec.step and run.steps is None:
        return _nan_row("'+step' needs a numeric unit column (the training step); this table's units are not numeric")
    covars = cols[("covariates", spec.step)]
    xa, xb = cols[a], cols[b]
    try:
        rp = residual_pair(xa, xb, covars, method, res, opts.gam, run.cache, names=(a, b))
    except Degenerate as e:
        return {**_nan_row(str(e)), "n": int((np.isfinite(xa) & np.isfinite(xb) & np.isfinite(cols[run.zname])).sum())}
    n, r = rp["n"], corr(rp["rx"], rp["ry"], method)
    if not math.isfinite(r):
        return {**_nan_row("the residuals have no variation in rank order"), "n": n}
    got = _infer(run, rp, r, (a, b), method, res, opts, (a, b, method, res))
    out = {
        **_nan_row(""),
        **{k: got[k] for k in ("n_eff", "phi_x", "phi_y", "p_method", "p_perm", "block_length") if k in got},
        "r": r,
        "n": n,
    }
    if method == "kendall":  # its own test, from scipy
        out["p_param"] = float(stats.kendalltau(rp["rx"], rp["ry"]).pvalue)
    else:
        out["_dof"] = n - 1 - (rp["dof_x"] + rp["dof_y"]) / 2  # the i.i.d. t-test, vectorised in _finish_tests
    out.update(_tested(got))
    out["note"] = rp["form_note"]
    line = line_of(res)
    if line is not None:  # the line's correlation on the cell's units (its test deferred); what the curve explains
        line_covars = cols[("covariates", parse(line).step)]
        try:
            rl = residual_pair(xa, xb, line_covars, method, line, opts.gam, run.cache, names=(a, b))
        except Degenerate:
            pass
        else:
            plain_opts = dataclasses.replace(opts, inference="modified-t") if opts.inference == "block" else opts
            r_line = corr(rl["rx"], rl["ry"], method)
            got_line = _infer(run, rl, r_line, (a, b), method, line, plain_opts, ())
            out.update(r_line=r_line, _defer_line=got_line["n_eff"], **curve_gain(rp, rl))
    if run.step0 is not None and rp["mask"][run.step0]:
        try:
            rp0 = residual_pair(cols[("without step 0", a)], xb, covars, method, res, opts.gam, run.cache, names=(a, b))
            r0 = corr(rp0["rx"], rp0["ry"], method)
            g0 = _infer(run, rp0, r0, (a, b), method, res, opts, (a, b, method, res, "no step 0"))
            out.update(r_no_step0=r0, **_tested(g0, "_no_step0"))
        except Degenerate:
            pass
    if opts.example_boot < 2:
        out["ex_note"] = "example-level bootstrap off (fewer than 2 resamples asked for)"
    elif run.rex is None:
        out["ex_note"] = "no per-example predictions given"
    elif method == "pearson" and spec.smoother:  # the run's at once (_batched_example_cis)
        out["_ex"] = (rp["mask"], r, (rp["lam_x"], rp["lam_y"]))
    else:
        out["ex_ci_low"], out["ex_ci_high"], out["ex_note"] = example_ci(
            run.rex, run.zname, a, b, run.steps, method, res, rp, opts, run.ex_cache
        )
    return out


def _tested(got: dict, sfx: str = "") -> dict:
    """A cell's p, interval and se_z where its inference gave them (block), else its n_eff for :func:`_finish_tests`."""
    if "p" in got:
        return {f"{k}{sfx}": got[k] for k in ("p", "ci_low", "ci_high", "se_z")}
    return {f"_defer{sfx}": got["n_eff"]}


def run_units(g: pd.DataFrame, ordered: bool) -> list:
    return sorted(g["unit"].unique()) if ordered else list(dict.fromkeys(g["unit"]))


def partial_corr(
    g: pd.DataFrame, opts: Options, ordered: bool | None = None, parts: dict | None = None, items: tuple | None = None
) -> list[dict]:
    """The partial correlations of one run ``g`` (one model and run of :data:`.pipeline.CANON`): one row per cell."""
    model, run = g["model"].iloc[0], g["run"].iloc[0]
    ordered = ordered_units(g["unit"]) if ordered is None else ordered
    zs = list(dict.fromkeys(g["in_domain"]))
    zname = zs[0] if len(zs) == 1 else ""
    ood = sorted(set(g["testset"]) - {zname})
    base = {"model": model, "in_domain": zname, "run": run}
    units = run_units(g, ordered)
    combos = list(itertools.product(itertools.combinations(ood, 2), opts.methods, opts.residualisers))

    def all_nan(note):
        return [
            {**base, "x": a, "y": b, "method": m, "residualiser": res, **_nan_row(note), "n_units": len(units)}
            for (a, b), m, res in combos
        ]

    if len(zs) != 1:
        return all_nan(f"need one in-domain testset per run, found {zs}")
    if zname == "":
        return all_nan("no unique in-domain testset for this run (none, or several with role in-domain)")
    if zname not in set(g["testset"]):
        return all_nan(f"the in-domain testset {zname!r} has no scores in this run")
    dup = g[g.duplicated(["unit", "testset"], keep=False)]
    dup_sets = {ts: [plain(u) for u in sorted(d["unit"].unique())[:5]] for ts, d in dup.groupby("testset")}
    if dup_sets:
        log.warning("run %s/%s: duplicate units for %s", model, run, dup_sets)
    if zname in dup_sets:
        return all_nan(f"duplicate units for the in-domain testset {zname}: {dup_sets[zname]}")
    clean = g[~g["testset"].isin(dup_sets)]
    wide = clean.pivot(index="unit", columns="testset", values="score").reindex(index=units)
    steps = wide.index.to_numpy(float) if ordered else None
    step0 = units.index(0) if ordered and opts.step0_check and 0 in units else None
    cols = {ts: wide[ts].to_numpy(float) for ts in wide.columns}
    z = cols[zname]
    cols[("covariates", False)] = z
    cols[("covariates", True)] = np.column_stack([z, steps]) if steps is not None else None
    if step0 is not None:
        for ts in ood:
            if ts in cols:
                cols[("without step 0", ts)] = np.where(np.arange(len(units)) == step0, math.nan, cols[ts])
    mats, problems, strata = items if items is not None else ({}, {}, {})
    rex = (
        RunExamples(mats, problems, [plain(u) for u in units], opts, model, run)
        if (mats or problems) and opts.example_boot >= 2
        else None
    )
    sizes = {}
    if "n" in g.columns:
        nw = clean.pivot(index="unit", columns="testset", values="n").reindex(index=units)
        sizes = {ts: pd.to_numeric(nw[ts], errors="coerce").to_numpy(float) for ts in nw.columns}
    noise = run_noise([zname, *ood], mats, sizes, strata)
    meas = run_measurements(cols, zname, ood, noise, opts, steps, ordered, (model, run))
    shared = refusals(zname, ood, parts or {})
    cells = _Run(model, run, zname, cols, steps, ordered, step0, rex, opts)
    rows = []
    for (a, b), m, res in combos:
        row = {**base, "x": a, "y": b, "method": m, "residualiser": res, "n_units": len(units)}
        bad = [t for t in (a, b) if t in dup_sets]
        if bad:
            row.update(_nan_row("; ".join(f"duplicate units for {t}: {dup_sets[t]}" for t in bad)))
        elif (a, b) in shared:
            row.update(_nan_row(shared[(a, b)]))
            rows.append(row)
            continue
        else:
            row.update(_cell(cells, a, b, m, res))
        spec = parse(res)  # the measurement columns (:mod:`.measured`): whole for Pearson's linear and spline kinds
        if spec.smoother and m == "pearson":
            row.update(meas.get((a, b, res), empty()))
        else:
            twin = meas.get((a, b, spec.line))
            got = empty()
            if twin is not None:
                got.update({c: twin[c] for c in SHARED})
            why = "ranks" if m != "pearson" else "pygam's GAM fitted to a noisy in-domain score"
            note = f"not corrected for item noise ({m}/{res}: {why})"
            got["noise"] = "; ".join(x for x in (got["noise"], note) if x)
            row.update(got)
        rows.append(row)
    by_res: dict[str, list[int]] = {}  # the example-level intervals of the batched Pearson cells, per residualiser
    for i, row in enumerate(rows):
        if "_ex" in row:
            by_res.setdefault(row["residualiser"], []).append(i)
    for res, idx in by_res.items():
        batch = [(rows[i]["x"], rows[i]["y"], *rows[i].pop("_ex")) for i in idx]
        for i, got in zip(idx, pearson_cis(rex, zname, batch, steps, res, opts)):
            rows[i]["ex_ci_low"], rows[i]["ex_ci_high"], rows[i]["ex_note"] = got
    _finish_tests(rows, opts)
    finish_bounded(rows, opts.level)
    return rows
