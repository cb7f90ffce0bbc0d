"""The whole analysis of one scores table: per-run cells, pooled rows, corrections.

Input is a *canonical long table* (see :mod:`oodcorr.analysis.tables` for how CSV,
parquet, long and wide inputs and the workflow's scores become one):

    model, in_domain, run, unit, testset, score

``in_domain`` names, on every row of a run, the testset whose score is the
covariate; every other testset of the run is an OOD testset. ``unit`` is the unit of
observation (a training step, or a run when each row is a separate model): when it
is numeric the units are *ordered* (consecutive steps are dependent, blocks are
resampled); otherwise they are exchangeable.

Output: one row per (model, in_domain, run or "pooled", x, y, method,
residualiser) with the columns in :data:`COLUMNS` (documented in the README).
"""
from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from . import multitest
from .correlate import METHODS, check_method, corr, p_param, residual_pair
from .pooling import pool_runs
from .resample import INTERVALS, auto_block_length, block_permutation_p, bootstrap_ci, cell_rng, interval
from .residualise import Degenerate, GamSettings, parse

log = logging.getLogger(__name__)

CANON = ["model", "in_domain", "run", "unit", "testset", "score"]
EXAMPLE_CANON = ["model", "run", "unit", "testset", "example", "correct"]

COLUMNS = ["model", "in_domain", "run", "x", "y", "method", "residualiser", "r", "ci_low", "ci_high",
           "p", "p_adj", "n", "note", "significant", "p_method", "p_param", "p_perm", "correction",
           "block_length", "n_units", "n_runs", "n_runs_finite", "ex_ci_low", "ex_ci_high", "ex_note"]

P_METHODS = ("auto", "permutation", "t-test")


@dataclass(frozen=True)
class Options:
    """Every analysis setting, with the defaults used by the workflow and the CLI."""

    methods: tuple[str, ...] = ("pearson",)
    residualisers: tuple[str, ...] = ("linear",)
    n_boot: int = 2000  # moving-block bootstrap resamples per cell
    n_perm: int = 2000  # block permutations per cell (all orderings when fewer)
    level: float = 0.95  # confidence level of every interval
    interval: str = "fisher-z"  # or "percentile"
    block_length: int | str = "auto"  # "auto": ceil(n^(1/3)) for ordered units, 1 otherwise
    p_method: str = "auto"  # "auto": block permutation for ordered units with blocks > 1, else t-test
    correction: str = "holm"  # or "bh", "none"
    alpha: float = 0.05  # significance threshold on p_adj (stars, agreement)
    seed: int = 0
    example_boot: int = 200  # example-level bootstrap resamples (0: off)
    gam: GamSettings = field(default_factory=GamSettings)

    def __post_init__(self):
        for m in self.methods:
            check_method(m)
        for r in self.residualisers:
            parse(r)
        if self.p_method not in P_METHODS:
            raise ValueError(f"unknown p_method {self.p_method!r}; choose from {', '.join(P_METHODS)}")
        if self.correction not in multitest.CORRECTIONS:
            raise ValueError(f"unknown correction {self.correction!r}; choose from {', '.join(multitest.CORRECTIONS)}")
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown interval {self.interval!r}; choose from {', '.join(INTERVALS)}")
        if not (self.block_length == "auto" or (isinstance(self.block_length, int) and self.block_length >= 1)):
            raise ValueError(f"block_length must be 'auto' or a positive integer, got {self.block_length!r}")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ValueError("level and alpha must lie strictly between 0 and 1")

    @classmethod
    def from_mapping(cls, cfg: dict) -> "Options":
        """From the config's ``analysis`` section (nested ``bootstrap``, ``permutation``,
        ``gam`` and ``example_bootstrap`` blocks); unknown keys raise naming the key."""
        cfg = dict(cfg or {})
        kw = {}
        flat = {"methods": "methods", "residualisers": "residualisers", "correction": "correction",
                "alpha": "alpha", "seed": "seed", "p_method": "p_method", "level": "level"}
        for k, attr in flat.items():
            if k in cfg:
                v = cfg.pop(k)
                kw[attr] = tuple(v) if isinstance(v, list) else v
        boot = dict(cfg.pop("bootstrap", {}) or {})
        for k, attr in (("n_boot", "n_boot"), ("block_length", "block_length"), ("interval", "interval")):
            if k in boot:
                kw[attr] = boot.pop(k)
        perm = dict(cfg.pop("permutation", {}) or {})
        if "n_perm" in perm:
            kw["n_perm"] = perm.pop("n_perm")
        ex = dict(cfg.pop("example_bootstrap", {}) or {})
        if "n_boot" in ex:
            kw["example_boot"] = ex.pop("n_boot")
        g = dict(cfg.pop("gam", {}) or {})
        gam_kw = {}
        for k in ("n_splines", "min_points"):
            if k in g:
                gam_kw[k] = g.pop(k)
        if "lam_grid" in g:
            gam_kw["lam_grid"] = tuple(float(v) for v in g.pop("lam_grid"))
        leftover = [f"analysis.{k}" for k in cfg] + [f"analysis.bootstrap.{k}" for k in boot] + \
                   [f"analysis.permutation.{k}" for k in perm] + [f"analysis.example_bootstrap.{k}" for k in ex] + \
                   [f"analysis.gam.{k}" for k in g]
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


def _nan_row(note: str) -> dict:
    return {"r": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "p_param": math.nan,
            "p_perm": math.nan, "n": 0, "note": note, "p_method": "", "block_length": math.nan,
            "ex_ci_low": math.nan, "ex_ci_high": math.nan, "ex_note": ""}


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
                mat.shape[1], np.full(mat.shape[1], 1 / mat.shape[1]), size=opts.example_boot)
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
            q = residual_pair(np.where(mask, rex.boot[a][:, i], np.nan), rex.boot[b][:, i], covars, method, res,
                              opts.gam, cache, names=(f"{a}#{i}", f"{b}#{i}"),
                              lams=(rp["lam_x"], rp["lam_y"]) if parse(res).kind == "gam" else None)
        except Degenerate:
            continue
        rs.append(corr(q["rx"], q["ry"], method))
    rs = np.asarray(rs, dtype=float)
    rs = rs[np.isfinite(rs)]
    if len(rs) < max(2, opts.example_boot / 2):
        return math.nan, math.nan, f"only {len(rs)} of {opts.example_boot} example resamples gave a value"
    lo, hi = interval(corr(rp["rx"], rp["ry"], method), rs, opts.level, opts.interval)
    return lo, hi, ""


def _cell(wide, zname, a, b, steps, ordered, method, res, opts, cache, model, run, rex, ex_cache) -> dict:
    spec = parse(res)
    if spec.step and steps is None:
        return _nan_row("'+step' needs a numeric unit column (the training step); this table's units are not numeric")
    z = wide[zname].to_numpy(float)
    covars = z if not spec.step else np.column_stack([z, steps])
    try:
        rp = residual_pair(wide[a].to_numpy(float), wide[b].to_numpy(float), covars, method, res, opts.gam,
                           cache, names=(a, b))
    except Degenerate as e:
        out = _nan_row(str(e))
        out["n"] = int((np.isfinite(wide[a]) & np.isfinite(wide[b]) & np.isfinite(z)).sum())
        return out
    n = rp["n"]
    r = corr(rp["rx"], rp["ry"], method)
    if not math.isfinite(r):
        out = _nan_row("the residuals have no variation in rank order")
        out["n"] = n
        return out
    dof = n - 1 - (rp["dof_x"] + rp["dof_y"]) / 2
    pp = p_param(r, rp["rx"], rp["ry"], method, dof)
    bl = auto_block_length(n, ordered) if opts.block_length == "auto" else min(int(opts.block_length), n)
    rng = cell_rng(opts.seed, model, run, a, b, method, res)
    lo, hi, _ = bootstrap_ci(rp["rx"], rp["ry"], method, bl, opts.n_boot, opts.level, rng, opts.interval)
    pperm, exact = block_permutation_p(rp["rx"], rp["ry"], method, bl, opts.n_perm, rng)
    use_perm = opts.p_method == "permutation" or (opts.p_method == "auto" and bl > 1)
    if use_perm:
        p, how = pperm, ("exact " if exact else "") + "block-permutation"
    else:
        p, how = pp, ("kendall-test" if method == "kendall" else "t-test")
    out = {"r": r, "ci_low": lo, "ci_high": hi, "p": p, "p_param": pp, "p_perm": pperm, "n": n, "note": "",
           "p_method": how, "block_length": bl, "ex_ci_low": math.nan, "ex_ci_high": math.nan, "ex_note": ""}
    if opts.example_boot < 2:
        out["ex_note"] = "example-level bootstrap off (fewer than 2 resamples asked for)"
    elif rex is None:
        out["ex_note"] = "no per-example predictions given"
    else:
        out["ex_ci_low"], out["ex_ci_high"], out["ex_note"] = _example_ci(
            rex, zname, a, b, steps, method, res, rp, opts, ex_cache)
    return out


def analyse_run(g: pd.DataFrame, opts: Options, examples: pd.DataFrame | None = None,
                ordered: bool | None = None) -> list[dict]:
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
            rows.append({**base, "x": a, "y": b, "method": m, "residualiser": res, **_nan_row(note),
                         "n_units": len(units)})
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
            row.update(_cell(wide, zname, a, b, steps, ordered, m, res, opts, cache, model, run, rex, ex_cache))
        rows.append(row)
    return rows


def analyse(long: pd.DataFrame, opts: Options | None = None, examples: pd.DataFrame | None = None,
            ordered: bool | None = None) -> pd.DataFrame:
    """Per-run rows plus pooled rows (``run == "pooled"``), with ``p_adj`` and ``significant``.

    ``long`` has the :data:`CANON` columns; ``examples`` (optional) the
    :data:`EXAMPLE_CANON` columns. ``ordered`` overrides the detection of ordered units.
    """
    opts = opts or Options()
    missing = [c for c in CANON if c not in long.columns]
    if missing:
        raise ValueError(f"scores table lacks column(s) {missing}")
    long = long.assign(score=pd.to_numeric(long["score"], errors="coerce").replace([np.inf, -np.inf], np.nan))
    ordered = _ordered(long["unit"]) if ordered is None else ordered
    rows = []
    for _, g in long.groupby(["model", "run"], sort=True):
        rows += analyse_run(g, opts, examples, ordered)
    runs = pd.DataFrame(rows)
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    runs["n_runs"], runs["n_runs_finite"] = 1, np.isfinite(runs["r"].astype(float)).astype(int)
    pooled = pool_runs(runs, opts.level)
    pooled[["ex_ci_low", "ex_ci_high"]] = math.nan
    pooled["ex_note"] = "not computed for pooled rows"
    out = pd.concat([runs, pooled], ignore_index=True)
    out["correction"] = opts.correction
    out["p_adj"] = math.nan
    for _, idx in out.groupby(["model", "in_domain", "run", "method", "residualiser"], sort=False).groups.items():
        out.loc[idx, "p_adj"] = multitest.adjust(out.loc[idx, "p"].to_numpy(float), opts.correction)
    out["significant"] = out["p_adj"] < opts.alpha
    order = {"pooled": 1}
    out["_pooled"] = out["run"].map(order).fillna(0)
    out = out.sort_values(["model", "in_domain", "_pooled", "run", "method", "residualiser", "x", "y"],
                          kind="stable", ignore_index=True)
    return out[COLUMNS]
