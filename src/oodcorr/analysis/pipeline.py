"""The whole analysis of one scores table: per-run cells, pooled rows, corrections, checks."""

from __future__ import annotations

import itertools
import logging
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from ..core.answer import NEAR_ZERO, NEGATIVE, POSITIVE, UNRESOLVED
from .across import multitest
from .across.pooling import POOL_KEYS, _groups, pool_runs
from .cell import form_check
from .cell.form_check import sign_of
from .items.item_noise import item_matrices, item_strata
from .items.measurement import pool_measured
from .items.shared_items import leaves
from .options import Options
from .per_run.cells import ordered_units, partial_corr, plain, run_units
from .per_run.measured import COLUMNS as MEASURED

log = logging.getLogger(__name__)

CANON = ["model", "in_domain", "run", "unit", "testset", "score"]

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
    *form_check.LINE_COLUMNS,
    "depends_on_form",
    "form_check",
    *form_check.GAIN_COLUMNS,
    *(f"{c}_no_step0" for c in ("r", "ci_low", "ci_high")),
    "step0_changes",
    "ex_ci_low",
    "ex_ci_high",
    "ex_note",
    *MEASURED,
    "eiv_from",
    "noise",
]


def _value(v) -> str:
    v = plain(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else str(v)


def pool(runs: pd.DataFrame, opts: Options) -> pd.DataFrame:
    """The pooled rows of a table's run rows: their correlations and measurement columns, per model and pool group."""
    runs = runs.reset_index(drop=True)
    pooled = pool_runs(runs, opts.level, opts.pool_two_runs)
    _, parts = _groups(runs, POOL_KEYS)
    for c, v in pool_measured(runs, parts, opts.level).items():
        pooled[c] = v
    return pooled


def analyse(
    long: pd.DataFrame,
    opts: Options | None = None,
    examples: pd.DataFrame | None = None,
    ordered: bool | None = None,
    run_info: pd.DataFrame | None = None,
    workers: int = 1,
    task_groups: dict | None = None,
) -> pd.DataFrame:
    """Per-run rows plus pooled rows (``run == "pooled"``), with ``p_adj``, ``significant`` and
    the checks."""
    opts = opts or Options()
    missing = [c for c in CANON if c not in long.columns]
    if missing:
        raise ValueError(f"scores table lacks column(s) {missing}")
    long = long.assign(
        score=pd.to_numeric(long["score"], errors="coerce").replace([np.inf, -np.inf], np.nan),
        model=long["model"].astype(str),
        run=long["run"].astype(str),
    )
    ordered = ordered_units(long["unit"]) if ordered is None else ordered
    if opts.drop_step0:
        if ordered:
            log.info("leaving out unit 0 (the pre-finetuning checkpoint): %d rows", int((long["unit"] == 0).sum()))
            long = long[long["unit"] != 0]
        else:
            log.warning("drop_step0: the units are not numeric, so there is no step 0 to leave out")
    # one row per (model, run): the run information columns and ``pool_group``
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
    missing = [c for c in opts.pool_by if c not in info.columns]
    if missing:
        log.warning(
            "pooling: no run information column(s) %s; runs of a model are pooled together whatever their %s",
            missing,
            ", ".join(missing),
        )
    by = [c for c in opts.pool_by if c in info.columns]
    if by:
        info["pool_group"] = [
            ", ".join(f"{c}={_value(v)}" for c, v in zip(by, vals)) for vals in info[by].itertuples(index=False)
        ]
    else:
        info["pool_group"] = "all runs"
    groups = [g for _, g in long.groupby(["model", "run"], sort=True)]
    parts, items = leaves(task_groups), [None] * len(groups)
    if examples is not None:  # each run's per-item matrices, problems and item labels, from its rows of examples
        where = examples.groupby(["model", "run"], sort=False, observed=True).indices
        items = []
        for g in groups:
            idx = where.get((g["model"].iloc[0], g["run"].iloc[0]))
            if idx is None:
                items.append(({}, {}, {}))
                continue
            sub = examples.take(idx)
            mats, problems = item_matrices(sub, run_units(g, ordered))
            items.append((mats, problems, item_strata(sub, mats)))
    if workers <= 1 or len(groups) <= 1:
        per_run = [partial_corr(g, opts, ordered, parts, it) for g, it in zip(groups, items)]
    else:  # each process sent its runs' per-item matrices, not the examples' rows, and on one BLAS thread
        one_blas_thread = partial(threadpool_limits, limits=1, user_api="blas")
        with ProcessPoolExecutor(
            min(workers, len(groups)), multiprocessing.get_context("fork"), one_blas_thread
        ) as procs:
            more = itertools.repeat
            per_run = list(procs.map(partial_corr, groups, more(opts), more(ordered), more(parts), items))
    runs = pd.DataFrame([row for rows in per_run for row in rows])
    extra = [c for c in info.columns if c not in ("model", "run", "pool_group")]
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS + extra)
    runs = runs.merge(info[["model", "run", "pool_group"]], on=["model", "run"], how="left")
    runs["n_runs"], runs["n_runs_finite"] = 1, np.isfinite(runs["r"].astype(float)).astype(int)
    pooled = pool(runs, opts)
    pooled[["ex_ci_low", "ex_ci_high"]] = math.nan
    pooled["ex_note"] = "not computed for pooled rows"
    out = pd.concat([runs, pooled], ignore_index=True)
    out["correction"] = opts.correction
    out["p_adj"] = math.nan
    fam = ["model", "in_domain", "run", "pool_group", "method", "residualiser"]
    for _, idx in out.groupby(fam, sort=False).groups.items():
        out.loc[idx, "p_adj"] = multitest.adjust(out.loc[idx, "p"].to_numpy(float), opts.correction)
    out["significant"] = out["p_adj"] < opts.alpha
    r, lo, hi = (out[c].to_numpy(float) for c in ("r", "ci_low", "ci_high"))
    ok = np.isfinite(lo) & np.isfinite(hi)
    out["conclusion"] = np.select(
        [~np.isfinite(r), ~ok, lo > 0, hi < 0, ok & (lo > -opts.near_zero) & (hi < opts.near_zero)],
        ["", UNRESOLVED, POSITIVE, NEGATIVE, NEAR_ZERO],
        UNRESOLVED,
    )
    done = np.isfinite(out["r"].astype(float)) & np.isfinite(out["r_no_step0"].astype(float))
    changes = sign_of(out["ci_low"], out["ci_high"]) != sign_of(out["ci_low_no_step0"], out["ci_high_no_step0"])
    out["step0_changes"] = pd.Series(np.where(done, changes, None), index=out.index, dtype=object)
    form_check.mark(out)
    if extra:  # each run's information; a pooled row's, its group's values of the columns pooled by
        by = [c for c in opts.pool_by if c in extra]
        groups = info.drop_duplicates(["model", "pool_group"]).assign(run="pooled")[["model", "run", "pool_group", *by]]
        keys = ["model", "run", "pool_group"]
        vals = pd.concat([info, groups]).set_index(keys).reindex(pd.MultiIndex.from_frame(out[keys]))
        for c in extra:
            out[c] = pd.array(vals[c], dtype="Int64") if pd.api.types.is_integer_dtype(info[c]) else vals[c].to_numpy()
    out["_pooled"] = (out["run"] == "pooled").astype(int)
    out = out.sort_values(
        ["model", "in_domain", "pool_group", "_pooled", "run", "method", "residualiser", "x", "y"],
        kind="stable",
        ignore_index=True,
    )
    return out[COLUMNS + extra]
