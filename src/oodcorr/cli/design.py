"""``oodcorr design --configfile X [--pilot TABLE]``: what a config's grid can detect before it is paid for
(simulated by :mod:`oodcorr.analysis.design`)."""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ..analysis import Options
from ..analysis.design import power as dz
from ..analysis.design.pilot import choose_assumptions, pilot_estimates
from ..analysis.design.power import MIN_ITEMS
from ..analysis.design.report import markdown, report
from ..analysis.readers import score_ranges, tables, workflow_scores
from ..core.atomic_write import write_json_atomic, write_text_atomic
from ..core.errors import DataError
from ..jobs.figures import curves
from ..launch import budget
from ..launch import grid as grids
from ..planning.plan import load
from ..planning.schema import read_config
from . import build_parser
from .budget import add_work_flags, compute_budget
from .config import read_lock, read_plan, workflow_dir
from .scores import read_scores

log = logging.getLogger("oodcorr")


def add_parser(sub, help: str) -> None:
    d = sub.add_parser(
        "design",
        help=help,
        description="Plan a study before paying for it: the power of each of the answer's claims for the config's "
        "grid over a range of effects and AR(1) coefficients, the items each testset needs, a few changes of the "
        "grid with their GPU-hours, and the budget, simulated with the analysis' own procedures "
        "(docs/design.md#planning-a-study-oodcorr-design).",
    )
    d.add_argument("--configfile", required=True, metavar="FILE", help="the workflow config")
    d.add_argument("--workflow", metavar="DIR", help="the workflow folder (default: this checkout)")
    d.add_argument(
        "--out", metavar="PREFIX", help="write PREFIX.md, .json, .png (default: results/<experiment>/design)"
    )
    d.add_argument("--profile", metavar="DIR", help="the Snakemake profile (for the budget beside it)")
    d.add_argument("--gpus", type=int, metavar="N", help="GPUs at once (for the budget's wall time)")
    a = d.add_argument_group("assumptions (a pilot replaces the defaults)")
    a.add_argument(
        "--phi",
        nargs="+",
        type=float,
        metavar="PHI",
        help="AR(1) coefficients of the residual series (default: 0.5 0.8 0.95)",
    )
    a.add_argument(
        "--phi-alternatives",
        type=float,
        metavar="PHI",
        help="the coefficient the alternatives are shown at (default 0.8)",
    )
    a.add_argument(
        "--shape",
        choices=dz.SHAPES,
        default="curve",
        help="how a simulated OOD score follows the in-domain one: a logistic curve per run or a line (default: curve)",
    )
    a.add_argument(
        "--model-sd", type=float, metavar="SD", help="sd of the models' true correlations, Fisher z (default 0)"
    )
    a.add_argument(
        "--run-sd", type=float, metavar="SD", help="sd of a model's runs' true correlations, Fisher z (default 0)"
    )
    a.add_argument(
        "--non-null-pairs", type=int, default=1, metavar="K", help="pairs of a table with the effect (default: 1)"
    )
    a.add_argument(
        "--items-in-domain",
        metavar="N",
        help="items of the in-domain testset (default: the config's or the pilot's; 'inf': no item noise)",
    )
    a.add_argument(
        "--items-ood",
        metavar="N",
        help="items of each OOD testset (default: the config's median or the pilot's; 'inf': no item noise)",
    )
    a.add_argument(
        "--item-persistence",
        type=float,
        metavar="P",
        help="AR(1) coefficient of an item's deviation across checkpoints (default 0.8, or the pilot's)",
    )
    a.add_argument(
        "--item-difficulty",
        type=float,
        metavar="D",
        help="share of an item's deviation that is its fixed difficulty (default 0.5, or the pilot's)",
    )
    a.add_argument(
        "--residual-sd",
        type=float,
        metavar="SD",
        help="sd of an OOD residual series beside its item noise, in score units (default 0.02, or the pilot's)",
    )
    a.add_argument(
        "--accuracy",
        type=float,
        metavar="P",
        help="the OOD testsets' accuracy, at which their item noise is taken (default 0.5, or the pilot's)",
    )
    a.add_argument(
        "--pilot",
        metavar="TABLE",
        help="a scores table already run (results/<exp>/scores.parquet, or any oodcorr analyse reads): "
        "phi, the item noise and the models' spread from it",
    )
    a.add_argument(
        "--pilot-examples",
        metavar="FILE",
        help="the pilot's per-item correctness (as analyse --examples): its item noise's persistence",
    )
    a.add_argument(
        "--pilot-in-domain", metavar="TESTSET", help="the pilot's in-domain testset (tables other than the workflow's)"
    )
    a.add_argument(
        "--pilot-format", choices=("long", "wide"), default="long", help="the pilot's layout (default: long)"
    )
    a.add_argument(
        "--pilot-unit", default="step", metavar="COLUMN", help="the pilot's checkpoint column (default: step)"
    )
    a.add_argument(
        "--pilot-score", default="accuracy", metavar="COLUMN", help="the pilot's score column (default: accuracy)"
    )
    q = d.add_argument_group("what is reported, and how precisely")
    q.add_argument(
        "--effects",
        nargs="+",
        type=float,
        default=list(dz.DEFAULT_EFFECTS),
        metavar="R",
        help="effects (partial correlations) simulated (default: %(default)s)",
    )
    q.add_argument(
        "--effect",
        type=float,
        metavar="R",
        help="the effect the alternatives are compared at (default: the analysis' near_zero, 0.3)",
    )
    q.add_argument("--target", type=float, default=0.8, metavar="POWER", help="the power aimed at (default: 0.8)")
    q.add_argument(
        "--studies",
        type=int,
        default=400,
        metavar="N",
        help="simulated studies per effect (default: 400, a power's standard error at most 0.025)",
    )
    q.add_argument("--seed", type=int, default=0, help="the simulation's seed (default: 0)")
    q.add_argument("--workers", type=int, metavar="N", help="processes (default: 2, or fewer cores)")
    q.add_argument("--no-alternatives", action="store_true", help="the config's grid only")
    q.add_argument("--no-items-table", action="store_true", help="leave out how many items each testset needs")
    q.add_argument(
        "--items-studies",
        type=int,
        metavar="N",
        help="simulated studies per size of the items table (default: --studies / 2, at least 100)",
    )
    q.add_argument("--no-figure", action="store_true", help="no PNG")
    add_work_flags(d)


def _read_pilot(args, sizes: dict, settings):
    """The pilot's estimates; for the workflow's scores table, the items from its ``n`` column and the
    per-item correctness from the predictions files it names."""
    df, _ = tables.read_table(args.pilot)
    if args.pilot_in_domain:
        flags = {"format": args.pilot_format, "in-domain": args.pilot_in_domain, "unit": args.pilot_unit}
        flags["metric"] = args.pilot_score  # a known metric as it is, another column any number
        if args.pilot_score.strip().lower() not in score_ranges.KNOWN:
            flags["metric"] = f"{args.pilot_score}=number" if args.pilot_format == "long" else "number"
        ns = build_parser(["analyse"]).parse_args(["analyse", *(f"--{k}={v}" for k, v in flags.items())])
        ns.table, ns.examples = [args.pilot], args.pilot_examples
        long, examples, info, pool_by = read_scores(ns)
    elif not {"model", "run_id", "step", "testset", "role"} <= set(df.columns):
        raise DataError(
            f"--pilot {args.pilot}: not the workflow's scores table (model, run_id, step, testset, role); name its "
            "in-domain testset with --pilot-in-domain (and its layout with --pilot-format, --pilot-unit, --pilot-score)"
        )
    else:
        examples = None
        long, info = workflow_scores.from_scores(df, args.pilot_score)
        pool_by = ("n_train",) if "n_train" in info.columns else ()
        if "n" in df.columns:
            n = pd.to_numeric(df["n"], errors="coerce").groupby(df["testset"]).median()  # a CSV's are text
            sizes = {**sizes, **{str(t): int(v) for t, v in n.items() if v == v}}
        if args.pilot_examples:
            ex, _ = tables.read_table(args.pilot_examples)
            examples = tables.from_examples_table(
                ex,
                unit=args.pilot_unit if args.pilot_unit in ex.columns else "step",
                testset="testset",
                model="model" if "model" in ex.columns else None,
                run=next((c for c in ("run", "run_id") if c in ex.columns), None),
                source=str(args.pilot_examples),
            )
        elif "predictions" in df.columns:
            try:
                examples = workflow_scores.examples_from_predictions(df)
            except DataError as e:  # the pilot's scores still say much: its sizes bound the noise
                log.warning("--pilot %s: its per-item correctness is not read (%s); its sizes are", args.pilot, e)
    return pilot_estimates(long, info, pool_by, sizes, settings, seed=args.seed, examples=examples)


def _items_flag(flag: str, value: str) -> float:
    """``--items-in-domain``/``--items-ood``: items (``MIN_ITEMS`` or more), or ``math.inf`` for none."""
    word = value.strip().lower()
    if word in ("inf", "infinite", "none"):
        return math.inf
    try:
        n = float(word)
    except ValueError:
        n = math.nan
    if not math.isfinite(n) or n != int(n) or n < MIN_ITEMS:
        raise ValueError(f"{flag} {value!r}: give the testset's number of items ({MIN_ITEMS} or more), or 'inf'")
    return int(n)


def _given_items(args, sizes: dict, id_sizes: dict, sources: dict) -> dict:
    """The item noise's fields the flags and the config give, their sources into ``sources``."""
    given: dict = {}
    said = []
    for field, known, words in (("in_domain", id_sizes, "in-domain"), ("ood", sizes, "OOD")):
        flag = "--items-" + field.replace("_", "-")
        raw = getattr(args, f"items_{field}")
        if raw is not None:
            given[field] = _items_flag(flag, raw)
            said.append(f"{flag} {raw}")
        elif grids.typical_size(known):
            given[field] = grids.typical_size(known)
            said.append(f"the config's {words} testsets (median {given[field]:,})")
    if said:
        sources["items"] = "; ".join(said)
    for field in ("persistence", "difficulty", "accuracy", "residual_sd"):
        attr = {"persistence": "item_persistence", "difficulty": "item_difficulty"}.get(field, field)  # the flag's
        v = getattr(args, attr)
        if v is not None:
            given[field] = v
            sources[field] = f"--{attr.replace('_', '-')} {v:g}"
    return given


def _grid(shape: dict) -> dz.Grid:
    return dz.Grid(shape["models"], shape["runs"], shape["checkpoints"], shape["pairs"])


def _cost(b) -> dict:
    return {"gpu_hours": b.totals["gpu_hours"], "gpu_hours_work": b.work["gpu_hours"] if b.work else None}


def run(args) -> int:
    t0, c0 = time.time(), time.process_time()
    if args.studies < 20:
        raise ValueError(f"--studies {args.studies}: give at least 20 simulated studies per effect")
    if args.items_studies is not None and args.items_studies < 20:
        raise ValueError(f"--items-studies {args.items_studies}: give at least 20 simulated studies per size")
    if not 0 < args.target < 1:
        raise ValueError(f"--target {args.target}: a power strictly between 0 and 1")
    config, plan = read_plan(args.configfile, args.workflow)
    raw = read_config(args.configfile)  # the config as written: the alternatives change copies of it
    lock = read_lock(args.configfile, config)
    settings = dz.Settings.from_options(Options.from_mapping(plan.analysis))
    shape = grids.grid_of(plan)
    sizes = {t: (n if n is not None else args.examples) for t, n in shape["sizes"].items()}
    id_sizes = {t: (n if n is not None else args.examples) for t, n in shape["in_domain_sizes"].items()}
    notes = list(shape["notes"])
    sources: dict = {}
    given = _given_items(args, sizes, id_sizes, sources)
    pilot = _read_pilot(args, {**sizes, **id_sizes}, settings) if args.pilot else None
    chosen = choose_assumptions(
        phi=args.phi,
        phi_alternatives=args.phi_alternatives,
        model_sd=args.model_sd,
        run_sd=args.run_sd,
        items=given,
        sources=sources,
        pilot=pilot,
    )
    unknown = [
        words
        for field, words in (("in_domain", "the in-domain set"), ("ood", "the OOD sets"))
        if getattr(chosen.items, field) is None and getattr(args, f"items_{field}") is None
    ]
    if unknown:
        notes.append(
            f"no item noise simulated for {' and '.join(unknown)}: the sizes are unknown before the data is "
            "prepared (give --items-in-domain N, --items-ood N, --examples N or a --pilot); the powers are then "
            "those of infinitely large testsets, the most the grid can find, and the items table says what finite "
            "ones cost"
        )
    a = dz.Assumptions(
        phi=chosen.headline,
        model_sd=chosen.model_sd,
        run_sd=chosen.run_sd,
        non_null_pairs=args.non_null_pairs,
        items=chosen.items,
        shape=args.shape,
    )
    if settings.simulated != settings.residualiser:
        notes.append(
            f"the config's heatmaps show the {settings.residualiser} residualiser (pygam, one fit per series); the "
            f"simulation analyses each run with {settings.simulated}, the same penalised cubic spline with its penalty "
            "chosen by REML instead of GCV"
        )
    if not a.items.none and not settings.residualiser.startswith("linear"):
        notes.append(
            "with item noise the answer reads the cross-fitted correlation r_eiv, which has the line's form only (a "
            f"spline of a noisy in-domain score has no measured form): the simulated {settings.simulated} gives the "
            "observed cells, the line the item-noise answer"
        )
    b = compute_budget(plan, config, args, lock)
    alternatives, cost_notes = [], []
    if not args.no_alternatives:
        for name in grids.CHANGES:
            try:
                cfg, desc = grids.change(name, raw, plan)
                plan2 = load(cfg, workflow_dir(args.workflow), sources=[args.configfile])
            except ValueError as e:
                cost_notes.append(f"{name}: not available ({e})")
                continue
            items2 = chosen.items
            if name == grids.EXAMPLES_CHANGE and items2.ood is not None and args.items_ood is None:
                items2 = replace(items2, ood=items2.ood * grids.MORE_EXAMPLES)
            cost2 = _cost(compute_budget(plan2, cfg, args, lock))
            grid2 = _grid(grids.grid_of(plan2))
            alternatives.append({"name": name, "description": desc, "grid": grid2, "items": items2, "cost": cost2})
        if any(x["name"] == grids.EXAMPLES_CHANGE for x in alternatives):
            cost_notes.append(
                f"{grids.EXAMPLES_CHANGE}: the config's evaluation time limits stay as they are (GPU-hours at the "
                "limits do not grow); its GPU-hours from the work do (--throughput)"
            )
    workers = args.workers or max(1, min(2, os.cpu_count() or 1))
    info = {
        "config": str(args.configfile),
        "experiment": plan.experiment,
        "tables": shape["tables"],
        "tables_how": shape["tables_how"],
        "testsets": shape["testsets"],
        "sizes": sizes,
        "in_domain_sizes": id_sizes,
        "testset_sizes": {"in_domain": id_sizes, "ood": sizes},
        "sources": chosen.sources,
        "cost": _cost(b),
        "cost_notes": cost_notes,
        "notes": notes,
        "pilot": pilot,
        "pilot_file": args.pilot,
        "budget": b.to_json(),
    }
    items_studies = args.items_studies or min(args.studies, max(100, args.studies // 2))
    rep = report(
        _grid(shape),
        a,
        chosen.phis,
        settings,
        dz.Draws(tuple(args.effects), args.studies, args.seed, workers),
        alternatives=alternatives,
        effect=settings.near_zero if args.effect is None else args.effect,
        target=args.target,
        info=info,
        items_studies=0 if args.no_items_table else items_studies,
    )
    rep["seconds"] = round(time.time() - t0, 1)
    rep["cpu_seconds_main_process"] = round(time.process_time() - c0, 1)
    rep["workers"] = workers
    rep["load_average"] = list(os.getloadavg())
    text = markdown(rep, budget.markdown(b))
    print(text, end="")
    prefix = Path(args.out or f"{plan.paths.root}/design")
    md, js, png = (prefix.with_name(prefix.name + ext) for ext in (".md", ".json", ".png"))
    write_text_atomic(md, text)
    write_json_atomic(js, rep)
    if not args.no_figure:
        curves.design_power(rep, str(png))
    log.info("wrote %s, %s%s in %.0f s", md, js, "" if args.no_figure else f" and {png}", time.time() - t0)
    return 0
