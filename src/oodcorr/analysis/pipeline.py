"""The whole analysis of one scores table: per-run cells, pooled rows, corrections, checks.

Input is a *canonical long table* (see :mod:`oodcorr.analysis.tables` for how CSV,
parquet, long and wide inputs and the workflow's scores become one):

    model, in_domain, run, unit, testset, score

``in_domain`` names, on every row of a run, the testset whose score is the
covariate; every other testset of the run is an OOD testset. ``unit`` is the unit of
observation (a training step, or a run when each row is a separate model): when it
is numeric the units are *ordered* (consecutive steps are dependent); otherwise they
are exchangeable. An optional *run information* table (``model``, ``run`` and more
columns, e.g. ``n_train``, ``seed``) adds those columns to the output and names the
groups within which runs are pooled (``Options.pool_by``).

Output: one row per (model, in_domain, run or "pooled", pool group, x, y, method,
residualiser) with the columns in :data:`COLUMNS` (documented in
docs/analysis.md#columns-of-partial_correlationscsv), then
the run information columns.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd
from scipy import stats

from ..core.defaults import ANALYSIS as DEFAULTS
from . import multitest
from .correlate import check_method, corr, p_param, residual_pair
from .inference import INFERENCES, PHI_MAX, assess, dependence, modified_tests
from .pooling import TWO_RUNS, pool_runs
from .resample import INTERVALS, cell_rng, interval
from .residualise import Degenerate, GamSettings, one_blas_thread, parse

log = logging.getLogger(__name__)

CANON = ["model", "in_domain", "run", "unit", "testset", "score"]
EXAMPLE_CANON = ["model", "run", "unit", "testset", "example", "correct"]

COLUMNS = [
    "model",
    "in_domain",
    "run",
    "pool_group",
    "x",
    "y",
    "method",
    "residualiser",
    "r",
    "ci_low",
    "ci_high",
    "p",
    "p_adj",
    "significant",
    "conclusion",
    "n",
    "n_eff",
    "phi_x",
    "phi_y",
    "se_z",
    "note",
    "p_method",
    "p_param",
    "p_perm",
    "block_length",
    "correction",
    "n_units",
    "n_runs",
    "n_runs_finite",
    "tau2",
    "i2",
    "curvature",
    "residualiser_check",
    "r_no_step0",
    "ci_low_no_step0",
    "ci_high_no_step0",
    "step0_changes",
    "ex_ci_low",
    "ex_ci_high",
    "ex_note",
]

CONCLUSIONS = ("positive", "negative", "near zero", "unresolved")


@dataclass(frozen=True)
class Options:
    """Every analysis setting. The defaults are the config's (:data:`oodcorr.core.defaults.ANALYSIS`,
    written once there), so the workflow, the CLI and a call from Python agree."""

    methods: tuple[str, ...] = tuple(DEFAULTS["methods"])
    residualisers: tuple[str, ...] = tuple(DEFAULTS["residualisers"])
    inference: str = DEFAULTS["inference"]  # or "iid", "block" (see oodcorr.analysis.inference)
    level: float = DEFAULTS["level"]  # confidence level of every interval
    correction: str = DEFAULTS["correction"]  # or "bh", "none"
    alpha: float = DEFAULTS["alpha"]  # significance threshold on p_adj (stars, agreement)
    # below this effective sample size a cell's note says its interval is uninformative
    min_n_eff: float = float(DEFAULTS["min_n_eff"])
    # an interval inside (-near_zero, near_zero) reads "near zero", not "unresolved"
    near_zero: float = DEFAULTS["near_zero"]
    # run-information columns; runs are pooled within their groups
    pool_by: tuple[str, ...] = tuple(DEFAULTS["pooling"]["by"])
    # a model with 2 runs: "none" (no pooled test) or "fixed-effect"
    pool_two_runs: str = DEFAULTS["pooling"]["two_runs"]
    # leave out unit 0 (the pre-finetuning checkpoint) everywhere
    drop_step0: bool = DEFAULTS["step0"]["drop"]
    # recompute every cell without unit 0 and say whether its conclusion changes
    step0_check: bool = DEFAULTS["step0"]["check"]
    seed: int = DEFAULTS["seed"]
    # inference "block": moving-block bootstrap resamples per cell
    n_boot: int = DEFAULTS["bootstrap"]["n_boot"]
    # inference "block": block permutations per cell (all orderings when fewer)
    n_perm: int = DEFAULTS["permutation"]["n_perm"]
    # inference "block": or "percentile"; also the example-level bootstrap's
    interval: str = DEFAULTS["bootstrap"]["interval"]
    # inference "block": "auto" is ceil(n^(1/3)) for ordered units, 1 otherwise
    block_length: int | str = DEFAULTS["bootstrap"]["block_length"]
    # example-level bootstrap resamples (0: off)
    example_boot: int = DEFAULTS["example_bootstrap"]["n_boot"]
    gam: GamSettings = field(default_factory=GamSettings)

    def __post_init__(self):
        for m in self.methods:
            check_method(m)
        for r in self.residualisers:
            parse(r)
        if self.inference not in INFERENCES:
            raise ValueError(f"unknown inference {self.inference!r}; choose from {', '.join(INFERENCES)}")
        if self.correction not in multitest.CORRECTIONS:
            raise ValueError(f"unknown correction {self.correction!r}; choose from {', '.join(multitest.CORRECTIONS)}")
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown interval {self.interval!r}; choose from {', '.join(INTERVALS)}")
        if not (self.block_length == "auto" or (isinstance(self.block_length, int) and self.block_length >= 1)):
            raise ValueError(f"block_length must be 'auto' or a positive integer, got {self.block_length!r}")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ValueError("level and alpha must lie strictly between 0 and 1")
        if not 0 <= self.near_zero < 1:
            raise ValueError(f"near_zero must lie in [0, 1), got {self.near_zero!r}")
        if self.pool_two_runs not in TWO_RUNS:
            raise ValueError(f"unknown pool_two_runs {self.pool_two_runs!r}; choose from {', '.join(TWO_RUNS)}")
        if isinstance(self.pool_by, str):
            raise ValueError(f"pool_by must be a list of column names, got the string {self.pool_by!r}")

    @classmethod
    def from_mapping(cls, cfg: dict) -> Options:
        """From the config's ``analysis`` section (nested ``pooling``, ``step0``, ``bootstrap``,
        ``permutation``, ``gam`` and ``example_bootstrap`` blocks); unknown keys raise
        naming the key."""
        cfg = dict(cfg or {})
        if "p_method" in cfg:
            raise ValueError(
                "analysis.p_method was replaced by analysis.inference (modified-t, iid or block; "
                "block is the earlier block-permutation/bootstrap pair): see "
                "docs/analysis.md#what-is-computed-and-the-defaults"
            )
        kw = {}
        flat = (
            "methods",
            "residualisers",
            "inference",
            "correction",
            "alpha",
            "seed",
            "level",
            "min_n_eff",
            "near_zero",
        )
        for k in flat:
            if k in cfg:
                v = cfg.pop(k)
                kw[k] = tuple(v) if isinstance(v, list) else v
        nested = {
            "pooling": {"by": "pool_by", "two_runs": "pool_two_runs"},
            "step0": {"drop": "drop_step0", "check": "step0_check"},
            "bootstrap": {"n_boot": "n_boot", "block_length": "block_length", "interval": "interval"},
            "permutation": {"n_perm": "n_perm"},
            "example_bootstrap": {"n_boot": "example_boot"},
        }
        leftover = []
        for block, keys in nested.items():
            sub = dict(cfg.pop(block, {}) or {})
            for k, attr in keys.items():
                if k in sub:
                    v = sub.pop(k)
                    kw[attr] = tuple(v) if isinstance(v, list) else v
            leftover += [f"analysis.{block}.{k}" for k in sub]
        g = dict(cfg.pop("gam", {}) or {})
        gam_kw = {}
        for k in ("n_splines", "min_points"):
            if k in g:
                gam_kw[k] = g.pop(k)
        if "lam_grid" in g:
            gam_kw["lam_grid"] = tuple(float(v) for v in g.pop("lam_grid"))
        leftover = [f"analysis.{k}" for k in cfg] + leftover + [f"analysis.gam.{k}" for k in g]
        if leftover:
            raise ValueError(f"unknown analysis setting(s): {', '.join(leftover)}")
        return cls(**kw, gam=GamSettings(**gam_kw))

    def describe(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "gam"}
        d["gam"] = {"n_splines": self.gam.n_splines, "min_points": self.gam.min_points}
        return d


def _ordered(units: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(units) and not pd.api.types.is_bool_dtype(units)


def _py(v):
    """A numpy scalar as the plain Python value (for readable notes)."""
    return v.item() if hasattr(v, "item") else v


_CELL_NAN = (
    "r",
    "ci_low",
    "ci_high",
    "p",
    "p_param",
    "p_perm",
    "block_length",
    "n_eff",
    "phi_x",
    "phi_y",
    "se_z",
    "r_no_step0",
    "ci_low_no_step0",
    "ci_high_no_step0",
    "p_no_step0",
    "se_z_no_step0",
    "ex_ci_low",
    "ex_ci_high",
)


def _nan_row(note: str) -> dict:
    return {**dict.fromkeys(_CELL_NAN, math.nan), "n": 0, "note": note, "p_method": "", "ex_note": ""}


class _RunExamples:
    """Per-example correctness of one run: testset -> (units x examples) matrix, for
    the example-level bootstrap (resample each testset's examples, the same examples
    at every checkpoint, and recompute all accuracies)."""

    def __init__(self, ex: pd.DataFrame, units: list, opts: Options, model: str, run: str):
        self.units = units
        self.mats: dict[str, np.ndarray] = {}
        self.problems: dict[str, str] = {}
        self.boot: dict[str, np.ndarray] = {}
        pos = {u: i for i, u in enumerate(units)}
        for ts, g in ex.groupby("testset", sort=True):
            if g.duplicated(["unit", "example"]).any():
                self.problems[ts] = f"duplicate (unit, example) predictions for {ts}"
                continue
            per_unit = g.groupby("unit")["example"].apply(lambda s: tuple(sorted(s)))
            if per_unit.nunique() > 1:
                self.problems[ts] = f"{ts} was evaluated on different examples at different units"
                continue
            wide = g.pivot(index="unit", columns="example", values="correct")
            mat = np.full((len(units), wide.shape[1]), np.nan)
            for u, vals in zip(wide.index, wide.to_numpy(float)):
                if u in pos:
                    mat[pos[u]] = vals
            self.mats[ts] = mat
            counts = cell_rng(opts.seed, model, run, ts, "examples").multinomial(
                mat.shape[1], np.full(mat.shape[1], 1 / mat.shape[1]), size=opts.example_boot
            )
            # (units x examples) @ (examples x B) / n = accuracies under each resample
            self.boot[ts] = (np.nan_to_num(mat) @ counts.T) / mat.shape[1]
            self.boot[ts][~np.isfinite(mat[:, 0])] = np.nan

    def why_not(self, names, mask) -> str:
        for ts in names:
            if ts in self.problems:
                return self.problems[ts]
            if ts not in self.mats:
                return f"no per-example predictions for {ts}"
            missing = [_py(self.units[i]) for i in np.flatnonzero(mask & ~np.isfinite(self.mats[ts][:, 0]))]
            if missing:
                return f"no per-example predictions for {ts} at unit(s) {missing[:5]}"
        return ""


def _example_ci(rex: _RunExamples, zname, a, b, steps, method, res, rp, opts, cache) -> tuple[float, float, str]:
    mask = rp["mask"]
    why = rex.why_not([zname, a, b], mask)
    if why:
        return math.nan, math.nan, why
    rs = []
    for i in range(opts.example_boot):
        z = rex.boot[zname][:, i]
        covars = np.column_stack([z, steps]) if parse(res).step else z
        try:
            q = residual_pair(
                np.where(mask, rex.boot[a][:, i], np.nan),
                rex.boot[b][:, i],
                covars,
                method,
                res,
                opts.gam,
                cache,
                names=(f"{a}#{i}", f"{b}#{i}"),
                lams=(rp["lam_x"], rp["lam_y"]) if parse(res).kind == "gam" else None,
            )
        except Degenerate:
            continue
        rs.append(corr(q["rx"], q["ry"], method))
    rs = np.asarray(rs, dtype=float)
    rs = rs[np.isfinite(rs)]
    if len(rs) < max(2, opts.example_boot / 2):
        return math.nan, math.nan, f"only {len(rs)} of {opts.example_boot} example resamples gave a value"
    lo, hi = interval(corr(rp["rx"], rp["ry"], method), rs, opts.level, opts.interval)
    return lo, hi, ""


def _infer(rp: dict, names, method: str, res: str, opts: Options, cache: dict, ordered: bool, rng_parts) -> dict:
    """The cell's uncertainty (:func:`.inference.assess`), each series' dependence cached."""
    pos = np.flatnonzero(rp["mask"]) if ordered else None
    deps = []
    for label, name in zip("xy", names):
        key = ("dependence", name, method, res, rp["mask"].tobytes(), ordered)
        if key not in cache:
            cache[key] = dependence(rp[f"r{label}"], rp[f"R{label}"], pos)
        deps.append(cache[key])
    rng = cell_rng(opts.seed, *rng_parts) if opts.inference == "block" else None
    bl = 0 if opts.block_length == "auto" else int(opts.block_length)
    return assess(
        rp,
        method,
        opts.level,
        pos,
        opts.inference,
        deps=tuple(deps),
        rng=rng,
        block_length=bl,
        n_boot=opts.n_boot,
        n_perm=opts.n_perm,
        interval=opts.interval,
        defer=True,
    )


def _finish_tests(rows: list[dict], opts: Options) -> None:
    """p, interval and se_z of every deferred cell (modified-t, iid), vectorised per method,
    then the low-information notes."""
    if opts.inference != "block":
        for sfx in ("", "_no_step0"):
            for m in opts.methods:
                idx = [i for i, row in enumerate(rows) if row["method"] == m and f"_defer{sfx}" in row]
                if not idx:
                    continue
                r = np.array([rows[i]["r" + sfx] for i in idx], dtype=float)
                ne = np.array([rows[i]["_defer" + sfx] for i in idx], dtype=float)
                p, lo, hi, se = modified_tests(m, r, ne, opts.level)
                for j, i in enumerate(idx):
                    rows[i].update(
                        {"p" + sfx: p[j], "ci_low" + sfx: lo[j], "ci_high" + sfx: hi[j], "se_z" + sfx: se[j]}
                    )
    idx = [i for i, row in enumerate(rows) if "_dof" in row]
    if idx:
        r = np.array([rows[i]["r"] for i in idx], dtype=float)
        dof = np.array([rows[i]["_dof"] for i in idx], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.abs(r) * np.sqrt(dof / np.maximum(1 - r * r, 1e-300))
            pp = np.where(dof >= 1, np.where(np.abs(r) >= 1, 0.0, 2 * stats.t.sf(t, np.maximum(dof, 1))), np.nan)
        for j, i in enumerate(idx):
            rows[i]["p_param"] = float(pp[j])
    for row in rows:
        row.pop("_defer", None)
        row.pop("_defer_no_step0", None)
        row.pop("_dof", None)
        if math.isfinite(row.get("r", math.nan)) and not row.get("note"):
            row["note"] = _information_note(row, row["n"], opts)
        if math.isfinite(row.get("r", math.nan)):
            cap = cap_note(row.get("phi_x", math.nan), row.get("phi_y", math.nan))
            if cap:
                row["note"] = "; ".join(n for n in (row.get("note"), cap) if n)


def cap_note(phi_x: float, phi_y: float) -> str:
    """What a cell's note says when a residual series' AR(1) estimate reached its cap (PHI_MAX)."""
    at = [s for s, phi in (("x", phi_x), ("y", phi_y)) if math.isfinite(phi) and phi >= PHI_MAX]
    if not at:
        return ""
    return (
        f"the AR(1) estimate of the {' and '.join(at)} residuals reached its cap {PHI_MAX:g}: the residual "
        "series trends or wanders (it looks nonstationary), so n_eff is the procedure's floor and the "
        "interval as wide as it gets; try a residualiser that follows the trend (gam, linear+step) or "
        "more checkpoints (docs/analysis.md#when-the-ar1-estimate-reaches-its-cap)"
    )


def _information_note(a: dict, n: int, opts: Options) -> str:
    ne = a["n_eff"]
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


def _cell(cols, zname, a, b, steps, ordered, method, res, opts, cache, model, run, rex, ex_cache, step0) -> dict:
    spec = parse(res)
    if spec.step and steps is None:
        return _nan_row("'+step' needs a numeric unit column (the training step); this table's units are not numeric")
    z = cols[zname]
    covars = cols[("covariates", spec.step)]
    xa, xb = cols[a], cols[b]
    try:
        rp = residual_pair(xa, xb, covars, method, res, opts.gam, cache, names=(a, b))
    except Degenerate as e:
        out = _nan_row(str(e))
        out["n"] = int((np.isfinite(xa) & np.isfinite(xb) & np.isfinite(z)).sum())
        return out
    n = rp["n"]
    got = _infer(rp, (a, b), method, res, opts, cache, ordered, (model, run, a, b, method, res))
    r = got["r"]
    if not math.isfinite(r):
        out = _nan_row("the residuals have no variation in rank order")
        out["n"] = n
        return out
    dof = n - 1 - (rp["dof_x"] + rp["dof_y"]) / 2
    out = {
        **_nan_row(""),
        **{k: got[k] for k in ("r", "n_eff", "phi_x", "phi_y", "p_method", "p_perm", "block_length") if k in got},
        "n": n,
    }
    if method == "kendall":
        out["p_param"] = p_param(r, rp["rx"], rp["ry"], method, dof)
    else:
        out["_dof"] = dof  # the i.i.d. t-test, vectorised in _finish_tests
    if "p" in got:
        out.update({k: got[k] for k in ("p", "ci_low", "ci_high", "se_z")})
    else:
        out["_defer"] = got["n_eff"]
    if step0 is not None and rp["mask"][step0]:
        xa0 = cols[("without step 0", a)]
        try:
            rp0 = residual_pair(xa0, xb, covars, method, res, opts.gam, cache, names=(a, b))
            g0 = _infer(rp0, (a, b), method, res, opts, cache, ordered, (model, run, a, b, method, res, "no step 0"))
            out["r_no_step0"] = g0["r"]
            if "p" in g0:
                out.update({f"{k}_no_step0": g0[k] for k in ("p", "ci_low", "ci_high", "se_z")})
            else:
                out["_defer_no_step0"] = g0["n_eff"]
        except Degenerate:
            pass
    if opts.example_boot < 2:
        out["ex_note"] = "example-level bootstrap off (fewer than 2 resamples asked for)"
    elif rex is None:
        out["ex_note"] = "no per-example predictions given"
    else:
        out["ex_ci_low"], out["ex_ci_high"], out["ex_note"] = _example_ci(
            rex, zname, a, b, steps, method, res, rp, opts, ex_cache
        )
    return out


def analyse_run(
    g: pd.DataFrame, opts: Options, examples: pd.DataFrame | None = None, ordered: bool | None = None
) -> list[dict]:
    """Every (pair, method, residualiser) cell of one run (rows of one model and run)."""
    model, run = g["model"].iloc[0], g["run"].iloc[0]
    ordered = _ordered(g["unit"]) if ordered is None else ordered
    zs = list(dict.fromkeys(g["in_domain"]))
    zname = zs[0] if len(zs) == 1 else ""
    ood = sorted(set(g["testset"]) - {zname})
    base = {"model": model, "in_domain": zname, "run": run}
    units = sorted(g["unit"].unique()) if ordered else list(dict.fromkeys(g["unit"]))
    combos = list(itertools.product(itertools.combinations(ood, 2), opts.methods, opts.residualisers))
    rows = []

    def all_nan(note):
        for (a, b), m, res in combos:
            rows.append(
                {**base, "x": a, "y": b, "method": m, "residualiser": res, **_nan_row(note), "n_units": len(units)}
            )
        return rows

    if len(zs) != 1:
        return all_nan(f"need one in-domain testset per run, found {zs}")
    if zname == "":
        return all_nan("no unique in-domain testset for this run (none, or several with role in-domain)")
    if zname not in set(g["testset"]):
        return all_nan(f"the in-domain testset {zname!r} has no scores in this run")
    dup = g[g.duplicated(["unit", "testset"], keep=False)]
    dup_sets = {ts: [_py(u) for u in sorted(d["unit"].unique())[:5]] for ts, d in dup.groupby("testset")}
    if dup_sets:
        log.warning("run %s/%s: duplicate units for %s", model, run, dup_sets)
    if zname in dup_sets:
        return all_nan(f"duplicate units for the in-domain testset {zname}: {dup_sets[zname]}")
    clean = g[~g["testset"].isin(dup_sets)]
    wide = clean.pivot(index="unit", columns="testset", values="score").reindex(index=units)
    steps = wide.index.to_numpy(float) if ordered else None
    step0 = None
    if ordered and opts.step0_check and 0 in units:
        step0 = units.index(0)
    cols = {ts: wide[ts].to_numpy(float) for ts in wide.columns}
    z = cols[zname]
    cols[("covariates", False)] = z
    cols[("covariates", True)] = np.column_stack([z, steps]) if steps is not None else None
    if step0 is not None:
        for ts in ood:
            if ts in cols:
                v = cols[ts].copy()
                v[step0] = math.nan
                cols[("without step 0", ts)] = v
    rex = None
    if examples is not None:
        ex = examples[(examples["model"] == model) & (examples["run"] == run)]
        rex = _RunExamples(ex, units, opts, model, run) if len(ex) else None
    cache, ex_cache = {}, {}
    for (a, b), m, res in combos:
        row = {**base, "x": a, "y": b, "method": m, "residualiser": res, "n_units": len(units)}
        bad = [t for t in (a, b) if t in dup_sets]
        if bad:
            row.update(_nan_row("; ".join(f"duplicate units for {t}: {dup_sets[t]}" for t in bad)))
        else:
            row.update(_cell(cols, zname, a, b, steps, ordered, m, res, opts, cache, model, run, rex, ex_cache, step0))
        rows.append(row)
    _finish_tests(rows, opts)
    return rows


def _value(v) -> str:
    v = _py(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else str(v)


def run_groups(long: pd.DataFrame, run_info: pd.DataFrame | None, pool_by) -> pd.DataFrame:
    """One row per (model, run): the run information columns and ``pool_group``."""
    runs = long[["model", "run"]].drop_duplicates().reset_index(drop=True)
    if run_info is None or run_info.empty:
        info = runs
    else:
        if "run" not in run_info.columns:
            raise ValueError(f"the run information lacks a 'run' column; it has {list(run_info.columns)}")
        keys = ["model", "run"] if "model" in run_info.columns else ["run"]
        run_info = run_info.assign(**{k: run_info[k].astype(str) for k in keys})
        dup = run_info[run_info.duplicated(keys, keep=False)]
        if len(dup):
            first = dup.iloc[0]
            raise ValueError(
                f"the run information has several rows for run {tuple(first[k] for k in keys)}; "
                "a column to pool by must be constant within a run"
            )
        info = runs.merge(run_info, on=keys, how="left")
    missing = [c for c in pool_by if c not in info.columns]
    if missing:
        log.warning(
            "pooling: no run information column(s) %s; runs of a model are pooled together whatever their %s",
            missing,
            ", ".join(missing),
        )
    by = [c for c in pool_by if c in info.columns]
    if by:
        info["pool_group"] = [
            ", ".join(f"{c}={_value(v)}" for c, v in zip(by, vals)) for vals in info[by].itertuples(index=False)
        ]
    else:
        info["pool_group"] = "all runs"
    return info


def _conclusions(r, lo, hi, near: float) -> np.ndarray:
    r, lo, hi = (np.asarray(v, dtype=float) for v in (r, lo, hi))
    ok = np.isfinite(lo) & np.isfinite(hi)
    return np.select(
        [~np.isfinite(r), ~ok, lo > 0, hi < 0, ok & (lo > -near) & (hi < near)],
        ["", "unresolved", "positive", "negative", "near zero"],
        "unresolved",
    )


def _sign(lo, hi) -> np.ndarray:
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))


def _interval_text(r, lo, hi) -> str:
    ci = f" [{lo:+.2f}, {hi:+.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{r:+.2f}{ci}"


def _residualiser_checks(out: pd.DataFrame, residualisers) -> None:
    """``curvature``: the sign of r differs between the linear and the GAM residualiser and at
    least one of the two intervals excludes 0 (a shared curve the line leaves behind)."""
    out["curvature"] = None
    out["residualiser_check"] = ""
    keys = ["model", "in_domain", "run", "pool_group", "x", "y", "method"]
    for lin, gam in (("linear", "gam"), ("linear+step", "gam+step")):
        if lin not in residualisers or gam not in residualisers:
            continue
        cols = keys + ["r", "ci_low", "ci_high"]
        A = out.loc[out["residualiser"] == lin, cols].reset_index()
        B = out.loc[out["residualiser"] == gam, cols].reset_index()
        m = A.merge(B, on=keys, suffixes=("_a", "_b"))
        ra, rb = m["r_a"].to_numpy(float), m["r_b"].to_numpy(float)
        both = np.isfinite(ra) & np.isfinite(rb)
        resolved = (_sign(m["ci_low_a"], m["ci_high_a"]) != 0) | (_sign(m["ci_low_b"], m["ci_high_b"]) != 0)
        flag = both & (np.sign(ra) * np.sign(rb) < 0) & resolved
        for side in ("a", "b"):
            out.loc[m.loc[both, f"index_{side}"], "curvature"] = flag[both]
        for i in np.flatnonzero(flag):
            row = m.iloc[i]
            text = (
                f"sign differs: {lin} {_interval_text(row.r_a, row.ci_low_a, row.ci_high_a)}, "
                f"{gam} {_interval_text(row.r_b, row.ci_low_b, row.ci_high_b)}"
            )
            out.loc[[row.index_a, row.index_b], "residualiser_check"] = text


def _analyse_runs(groups, opts: Options, examples, ordered, workers: int) -> list[list[dict]]:
    """:func:`analyse_run` of each run's rows, in order; in ``workers`` processes when that is more than one."""
    if workers <= 1 or len(groups) <= 1:
        return [analyse_run(g, opts, examples, ordered) for g in groups]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    def own(g):  # each process is sent only its run's examples, chosen as analyse_run chooses them
        if examples is None:
            return None
        model, run = g["model"].iloc[0], g["run"].iloc[0]
        return examples[(examples["model"] == model) & (examples["run"] == run)]

    tasks = [(g, opts, own(g), ordered) for g in groups]
    with ProcessPoolExecutor(
        max_workers=min(workers, len(groups)), mp_context=multiprocessing.get_context("fork")
    ) as pool:
        return list(pool.map(_analyse_run_on_one_blas_thread, tasks))


def _analyse_run_on_one_blas_thread(task) -> list[dict]:
    with one_blas_thread():
        return analyse_run(*task)


def analyse(
    long: pd.DataFrame,
    opts: Options | None = None,
    examples: pd.DataFrame | None = None,
    ordered: bool | None = None,
    run_info: pd.DataFrame | None = None,
    workers: int = 1,
) -> pd.DataFrame:
    """Per-run rows plus pooled rows (``run == "pooled"``), with ``p_adj``, ``significant`` and
    the checks.

    ``long`` has the :data:`CANON` columns; ``examples`` (optional) the
    :data:`EXAMPLE_CANON` columns. ``ordered`` overrides the detection of ordered units.
    ``run_info`` (optional): one row per run (``run``, optionally ``model``) with more
    columns, e.g. ``n_train`` and ``seed``; they are added to the output, and
    ``opts.pool_by`` names those within which runs are pooled. ``workers`` > 1 analyses the runs in
    that many processes, each on one BLAS thread: every cell draws from its own seeded stream
    (:func:`.resample.cell_rng`), so the table is the same whatever the number.
    """
    opts = opts or Options()
    missing = [c for c in CANON if c not in long.columns]
    if missing:
        raise ValueError(f"scores table lacks column(s) {missing}")
    long = long.assign(
        score=pd.to_numeric(long["score"], errors="coerce").replace([np.inf, -np.inf], np.nan),
        model=long["model"].astype(str),
        run=long["run"].astype(str),
    )
    ordered = _ordered(long["unit"]) if ordered is None else ordered
    if opts.drop_step0:
        if ordered:
            log.info("leaving out unit 0 (the pre-finetuning checkpoint): %d rows", int((long["unit"] == 0).sum()))
            long = long[long["unit"] != 0]
        else:
            log.warning("drop_step0: the units are not numeric, so there is no step 0 to leave out")
    info = run_groups(long, run_info, opts.pool_by)
    groups = [g for _, g in long.groupby(["model", "run"], sort=True)]
    rows = [row for per_run in _analyse_runs(groups, opts, examples, ordered, workers) for row in per_run]
    runs = pd.DataFrame(rows)
    extra = [c for c in info.columns if c not in ("model", "run", "pool_group")]
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS + extra)
    runs = runs.merge(info[["model", "run", "pool_group"]], on=["model", "run"], how="left")
    runs["n_runs"], runs["n_runs_finite"] = 1, np.isfinite(runs["r"].astype(float)).astype(int)
    pooled = pool_runs(runs, opts.level, opts.pool_two_runs)
    pooled[["ex_ci_low", "ex_ci_high"]] = math.nan
    pooled["ex_note"] = "not computed for pooled rows"
    out = pd.concat([runs, pooled], ignore_index=True)
    out["correction"] = opts.correction
    out["p_adj"] = math.nan
    fam = ["model", "in_domain", "run", "pool_group", "method", "residualiser"]
    for _, idx in out.groupby(fam, sort=False).groups.items():
        out.loc[idx, "p_adj"] = multitest.adjust(out.loc[idx, "p"].to_numpy(float), opts.correction)
    out["significant"] = out["p_adj"] < opts.alpha
    out["conclusion"] = _conclusions(out["r"], out["ci_low"], out["ci_high"], opts.near_zero)
    done = np.isfinite(out["r"].astype(float)) & np.isfinite(out["r_no_step0"].astype(float))
    changes = _sign(out["ci_low"], out["ci_high"]) != _sign(out["ci_low_no_step0"], out["ci_high_no_step0"])
    out["step0_changes"] = pd.Series(np.where(done, changes, None), index=out.index, dtype=object)
    _residualiser_checks(out, opts.residualisers)
    if extra:
        per_run = info.set_index(["model", "run"])[extra]
        idx = pd.MultiIndex.from_arrays([out["model"], out["run"]])
        vals = per_run.reindex(idx)
        for c in extra:
            out[c] = vals[c].to_numpy()
        by = [c for c in opts.pool_by if c in extra]
        group_vals = info.drop_duplicates(["model", "pool_group"]).set_index(["model", "pool_group"])[by]
        pooled_rows = out["run"] == "pooled"
        gv = group_vals.reindex(
            pd.MultiIndex.from_arrays([out.loc[pooled_rows, "model"], out.loc[pooled_rows, "pool_group"]])
        )
        for c in by:
            out.loc[pooled_rows, c] = gv[c].to_numpy()
        for c in extra:
            if pd.api.types.is_integer_dtype(info[c]):
                out[c] = pd.array(out[c], dtype="Int64")
    out["_pooled"] = (out["run"] == "pooled").astype(int)
    out = out.sort_values(
        ["model", "in_domain", "pool_group", "_pooled", "run", "method", "residualiser", "x", "y"],
        kind="stable",
        ignore_index=True,
    )
    return out[COLUMNS + extra]
