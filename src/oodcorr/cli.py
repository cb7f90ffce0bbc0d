"""Command line.

``oodcorr analyse TABLE --in-domain NAME [...]``
    The same analysis as the workflow's rules on any scores table (CSV, TSV or
    parquet; long or wide); the tables and figures go into ``--out``.
``oodcorr prefetch --configfile X``
    On a login node: download every hub model and dataset of a config into the
    Hugging Face cache and pin them in the lock file beside it (:mod:`oodcorr.modeling.hub`).
``oodcorr budget --configfile X [--profile DIR]``
    Jobs, GPU-hours, checkpoint disk, download size and the longest path of a config,
    printed and written as markdown and JSON (:mod:`oodcorr.launch.budget`).
``oodcorr design --configfile X [--pilot TABLE]``
    What a config's grid can detect before it is paid for: the power of a per-run cell, of
    ``generalises`` and of ``sign reversal`` by effect and dependence, a few changes of the grid
    with their cost, and the budget beside it (:mod:`oodcorr.analysis.design`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd

from .core.defaults import ANALYSIS
from .core.errors import DataError
from .core.io import sha256_file, write_json_atomic, write_text_atomic
from .core.limits import analysis_cells, analysis_too_large
from .core.locks import EXPERIMENT, FolderInUse, hold
from .launch import budget
from .launch import grid as grids
from .launch.sizing import check_gpu_memory
from .modeling import hub
from .planning.plan import load
from .planning.schema import read_config

log = logging.getLogger("oodcorr")

EPILOG = """\
outputs (in --out):
  partial_correlations.csv  one row per model x run (or 'pooled' per pool group) x pair x method x
                            residualiser: r, interval, p, effective sample size, checks
  agreement.csv             per OOD pair: the answer across models -- the consensus r with its
                            interval and prediction interval, and a verdict: generalises
                            (positive/negative), sign reversal, models differ, agree near zero,
                            unresolved (corrected across pairs); each model's pooled r
  consensus/<in-domain>.png the consensus heatmap, marked by verdict (with more than one model)
  heatmaps/<model>.png      lower-triangle heatmap of the pooled partial correlations
  heatmap_grid.png          the models side by side (with more than one model)
  scatter/<model>.png       in-domain vs OOD score with the fitted residualiser curves
  learning_curves/<model>.png  score vs step (only when the unit column is numeric)
  settings.json             the settings used and the input's sha256

examples:
  oodcorr analyse results/default/scores.csv --in-domain synth-test --model model --run run_id
  oodcorr analyse accuracies_by_run.csv --format wide --unit Run --in-domain "MNLI dev acc."
  oodcorr analyse scores.csv.gz --encoding latin-1 --in-domain mnli   # compressed, Latin-1 text
  oodcorr analyse results/scores.csv --in-domain mnli --residualisers gam linear --pool-by n_train

Rows whose unit label is a summary statistic (Mean, Standard deviation, Minimum,
Maximum, ...) and empty rows are excluded with a logged warning naming each line.
"""


def _block_length(v: str):
    return v if v == "auto" else _positive_int("--block-length", "'auto' or ")(v)


def _positive_int(flag: str, also: str = ""):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be {also}a positive integer, got {v!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {n}")
        return n

    return parse


def _add_showing_default(group, flag: str, default, text: str, spec: str = "", **kwargs) -> None:
    """An option whose help is ``text`` and then "(default: D)", D written from ``default`` itself
    (a list: its items, space-separated; else formatted with ``spec``), so the two cannot differ."""
    shown = " ".join(default) if isinstance(default, list) else format(default, spec)
    group.add_argument(flag, default=default, help=f"{text} (default: {shown})", **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from .analysis.correlate import METHODS  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.inference import INFERENCES  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.multitest import CORRECTIONS  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.pipeline import Options  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.pooling import TWO_RUNS  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.resample import INTERVALS  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.residualise import RESIDUALISERS  # pandas/scipy: only the analysis commands pay their start-up

    d = Options()
    p = argparse.ArgumentParser(prog="oodcorr", description="oodcorr: do OOD results generalise?")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser(
        "analyse",
        help="partial correlations between OOD testsets of any scores table",
        description="Partial correlations between every pair of OOD testsets, in-domain score regressed "
        "out, with intervals and p-values that allow for autocorrelated checkpoints (one "
        "procedure, so they agree), multiple-comparison correction, pooling over runs as a "
        "random-effects meta-analysis, tests of heterogeneity and sign reversal across models, "
        "residualiser and step-0 checks, and plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("table", help="scores table: .csv, .tsv or .parquet")
    g = a.add_argument_group("input layout")
    g.add_argument(
        "--format",
        choices=("long", "wide"),
        default="long",
        help="long: one row per unit x testset; wide: one row per unit, one column per testset (default: long)",
    )
    g.add_argument(
        "--in-domain",
        required=True,
        metavar="TESTSET",
        help="the in-domain testset (a column in wide format, a value of --testset-column in long)",
    )
    g.add_argument(
        "--unit",
        default="step",
        metavar="COLUMN",
        help="column with the unit of observation, e.g. the training step or a run label "
        "(default: step). Numeric units are ordered (blocks of consecutive units are "
        "resampled); other units are exchangeable",
    )
    g.add_argument(
        "--testset-column",
        default="testset",
        metavar="COLUMN",
        help="long format: column naming the testset (default: testset)",
    )
    g.add_argument(
        "--score",
        default="accuracy",
        metavar="COLUMN",
        help="long format: column with the score (default: accuracy); the workflow's scores table "
        "also has macro_f1, ece, accuracy_ci_low and accuracy_ci_high",
    )
    g.add_argument(
        "--model",
        metavar="COLUMN",
        help="column naming the model (default: 'model' if the table has it, else one model)",
    )
    g.add_argument(
        "--run",
        metavar="COLUMN",
        help="column naming the run within a model (default: 'run_id' or 'run' if present, else one run)",
    )
    g.add_argument(
        "--model-name", metavar="NAME", help="model name when there is no model column (default: the table's file name)"
    )
    g.add_argument("--testsets", nargs="+", metavar="TESTSET", help="analyse only these OOD testsets")
    g.add_argument(
        "--exclude", nargs="+", default=[], metavar="NAME", help="columns (wide) or testsets (long) to leave out"
    )
    g.add_argument(
        "--summary-label",
        action="append",
        default=[],
        metavar="LABEL",
        help="another unit label that marks a summary row to exclude (repeatable)",
    )
    g.add_argument(
        "--encoding",
        metavar="NAME",
        help="the text encoding of a CSV/TSV table that is not UTF-8 (with or without a byte-order "
        "mark), e.g. latin-1 or cp1252; gzip/bzip2/xz-compressed tables are read as they are",
    )
    g.add_argument(
        "--examples",
        metavar="FILE",
        help="per-example correctness, long: the --unit, --testset-column (and model/run) columns "
        "plus 'example' and 'correct' (0/1); enables the example-level bootstrap",
    )
    s = a.add_argument_group("statistics")
    _add_showing_default(s, "--methods", list(d.methods), "correlation methods", nargs="+", choices=METHODS)
    _add_showing_default(
        s,
        "--residualisers",
        list(d.residualisers),
        "residualisers; '+step' adds the training step as a covariate",
        nargs="+",
        choices=RESIDUALISERS,
    )
    _add_showing_default(
        s,
        "--inference",
        d.inference,
        "how intervals and p-values are computed: modified-t = t-test on the effective sample "
        "size from the residuals' (design-corrected AR(1)) autocorrelation, its interval by "
        "inverting it; iid = the same with independent units; block = the earlier moving-block "
        "bootstrap interval and block-permutation p",
        choices=INFERENCES,
    )
    _add_showing_default(s, "--level", d.level, "confidence level", type=float)
    _add_showing_default(
        s,
        "--min-n-eff",
        d.min_n_eff,
        "a cell whose effective sample size is below this says so in its note",
        spec="g",
        type=float,
    )
    _add_showing_default(
        s,
        "--near-zero",
        d.near_zero,
        "an interval inside (-X, X) is concluded 'near zero' rather than 'unresolved'",
        spec="g",
        type=float,
    )
    s.add_argument(
        "--pool-by",
        nargs="*",
        metavar="COLUMN",
        help="pool runs within the groups of these columns (constant within a run), e.g. n_train; "
        "give the flag with no column to pool all runs of a model (default: n_train when the "
        "table has that column, else all runs)",
    )
    _add_showing_default(
        s,
        "--pool-two-runs",
        d.pool_two_runs,
        "a model with exactly 2 runs in a group: no pooled interval or p-value (none), or a fixed-effect combination",
        choices=TWO_RUNS,
    )
    s.add_argument(
        "--drop-step0", action="store_true", help="leave out unit 0 (the pre-finetuning checkpoint) everywhere"
    )
    s.add_argument(
        "--no-step0-check",
        action="store_true",
        help="skip recomputing every cell without unit 0 (columns *_no_step0, step0_changes)",
    )
    _add_showing_default(s, "--n-boot", d.n_boot, "--inference block: bootstrap resamples", type=int)
    _add_showing_default(s, "--n-perm", d.n_perm, "--inference block: block permutations", type=int)
    _add_showing_default(
        s,
        "--block-length",
        d.block_length,
        "--inference block: block length, or 'auto': ceil(n^(1/3)) for numeric (ordered) units, 1 otherwise",
        type=_block_length,
    )
    _add_showing_default(
        s, "--interval", d.interval, "bootstrap interval of --inference block and of --examples", choices=INTERVALS
    )
    _add_showing_default(
        s,
        "--correction",
        d.correction,
        "multiple-comparison correction across the pairs of a heatmap, and across the pairs of the agreement table",
        choices=CORRECTIONS,
    )
    _add_showing_default(s, "--alpha", d.alpha, "significance level for p_adj", type=float)
    _add_showing_default(s, "--seed", d.seed, "seed of every resampling", type=int)
    _add_showing_default(
        s, "--example-boot", d.example_boot, "example-level bootstrap resamples with --examples", type=int
    )
    _add_showing_default(s, "--gam-n-splines", d.gam.n_splines, "GAM basis size per covariate", type=int)
    _add_showing_default(s, "--gam-min-points", d.gam.min_points, "fewest points the GAM is fitted to", type=int)
    _add_showing_default(
        s,
        "--max-cells",
        ANALYSIS["max_cells"],
        "refuse an analysis of more cells (OOD pairs x methods x residualisers, summed over runs) than "
        "this, giving the count; raise it to run a larger one on purpose",
        type=_positive_int("--max-cells"),
    )
    o = a.add_argument_group("output")
    o.add_argument("--out", default="analysis", metavar="DIR", help="output folder (default: ./analysis)")
    o.add_argument(
        "--force",
        action="store_true",
        help="write into --out even when it is inside an experiment folder of the workflow "
        "(results/<experiment>/), whose published tables it would replace until the next run publishes "
        "them again; refused while a run writes that experiment",
    )
    o.add_argument("--no-plots", action="store_true", help="write the tables only")
    o.add_argument("--plot-method", metavar="METHOD", help="method the heatmaps show (default: the first)")
    o.add_argument("--plot-residualiser", metavar="NAME", help="residualiser the heatmaps show (default: the first)")
    o.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")

    f = sub.add_parser(
        "prefetch",
        help="download a config's hub models and datasets and pin them in a lock file",
        description="Run on a machine with hub access (a login node), with HF_HOME on the shared file system the "
        "jobs see: resolves every hub model's and dataset's revision to a commit, downloads what the "
        "jobs load into the Hugging Face cache (safetensors only unless the entry opts in to pickle "
        "weights) and writes the lock file. Jobs then load exactly those commits, offline.",
    )
    f.add_argument("--configfile", required=True, metavar="FILE", help="the workflow config")
    f.add_argument(
        "--lock",
        metavar="FILE",
        help="where to write the lock (default: hub.lock of the config, else <config>.lock.yaml)",
    )
    f.add_argument("--workflow", metavar="DIR", help="the workflow folder (default: this checkout)")

    b = sub.add_parser(
        "budget",
        help="jobs, GPU-hours, checkpoint disk, download size and longest path of a config",
        description="What a config will cost before it is submitted, for a compute-time request. GPU-hours are "
        "GPUs x time limits (the config's runtime), and expected where finished jobs of this "
        "experiment measured their cost on a GPU.",
    )
    b.add_argument("--configfile", required=True, metavar="FILE", help="the workflow config")
    b.add_argument("--profile", metavar="DIR", help="the Snakemake profile to submit with (e.g. profiles/slurm)")
    b.add_argument("--gpus", type=int, metavar="N", help="GPUs available at once: also print the wall time on them")
    b.add_argument(
        "--out", metavar="PREFIX", help="write PREFIX.md and PREFIX.json (default: results/<experiment>/budget)"
    )
    b.add_argument("--workflow", metavar="DIR", help="the workflow folder (default: this checkout)")
    _add_work_flags(b)
    _add_design_parser(sub)
    return p


def _add_work_flags(p) -> None:
    w = p.add_argument_group("GPU-hours from the work (beside the time limits)")
    w.add_argument(
        "--throughput",
        nargs="+",
        metavar="[KEY=]TFLOPS",
        help="TFLOP/s one GPU reaches (bf16, achieved, not peak), for every job or KEY=... for a model name or "
        "size class: adds GPU-hours from the work (parameters x tokens); finished jobs' measured throughput "
        "replaces it for their model",
    )
    w.add_argument(
        "--tokens-per-example",
        type=float,
        metavar="N",
        help="tokens of a scored example (default: evaluation.max_length, an upper bound)",
    )
    w.add_argument(
        "--examples",
        type=int,
        metavar="N",
        help="examples per OOD testset where the config does not say (max_examples) and the data is not prepared",
    )


def _add_design_parser(sub) -> None:
    from .analysis.design import DEFAULT_EFFECTS  # numpy: only the analysis commands pay their start-up

    d = sub.add_parser(
        "design",
        help="the power of each verdict for a config's grid, a few changes of it and their cost",
        description="Plan a study before paying for it: for the config's grid (models, runs per pool group, "
        "checkpoints per run, OOD pairs per table), the power of a per-run cell, of 'generalises' and of "
        "'sign reversal' over a range of effects and AR(1) coefficients of the residual series, the "
        "smallest effect each finds in 80%% of studies, the same for a few changes of the grid with their "
        "GPU-hours, and the budget beside it. By simulation with the analysis' own procedures, seeded: "
        "docs/analysis.md#planning-a-study-oodcorr-design says how to read it and what it assumes.",
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
        "--model-sd", type=float, metavar="SD", help="sd of the models' true correlations, Fisher z (default 0)"
    )
    a.add_argument(
        "--run-sd", type=float, metavar="SD", help="sd of a model's runs' true correlations, Fisher z (default 0)"
    )
    a.add_argument(
        "--non-null-pairs", type=int, default=1, metavar="K", help="pairs of a table with the effect (default: 1)"
    )
    a.add_argument(
        "--residual-sd",
        type=float,
        default=0.02,
        metavar="SD",
        help="sd of an OOD score's residual series beside its sampling noise, in score units (default: 0.02)",
    )
    a.add_argument(
        "--accuracy",
        type=float,
        default=0.5,
        metavar="P",
        help="accuracy at which a testset's binomial sampling noise is taken (default 0.5: the largest)",
    )
    a.add_argument(
        "--pilot",
        metavar="TABLE",
        help="a scores table already run (results/<exp>/scores.parquet, or any "
        "table oodcorr analyse reads): estimate phi, the sampling noise and the spread between models from it",
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
        default=list(DEFAULT_EFFECTS),
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
        help="simulated studies per effect (default: 400, a standard error of at most 0.025 per power)",
    )
    q.add_argument("--seed", type=int, default=0, help="the simulation's seed (default: 0)")
    q.add_argument("--workers", type=int, metavar="N", help="processes (default: 2, or fewer cores)")
    q.add_argument("--no-alternatives", action="store_true", help="the config's grid only")
    q.add_argument("--no-figure", action="store_true", help="no PNG")
    _add_work_flags(d)


def workflow_dir(given: str | None) -> Path:
    """The workflow folder (config/schema.yaml, resources/): given, else this checkout, else the current one."""
    if given:
        return Path(given)
    here = Path(__file__).resolve().parents[2]
    return here if (here / "Snakefile").exists() else Path.cwd()


def _plan(configfile: str, workflow: str | None):
    base = workflow_dir(workflow)
    config = read_config(configfile)
    return config, load(config, base, sources=[configfile])


def prefetch_command(args) -> int:
    config, plan = _plan(args.configfile, args.workflow)
    dirs = hub.cache_dirs()
    log.info("Hugging Face cache: %s (hub), %s (datasets)", dirs["hub"], dirs["datasets"])
    for w in hub.cache_warnings():
        log.warning("%s", w)
    if not hub.hub_models(plan) and not hub.hub_datasets(plan):
        log.info("%s names no hub model or dataset: nothing to fetch, no lock written", args.configfile)
        return 0
    path = Path(args.lock) if args.lock else hub.lock_path(args.configfile, config)
    lock = hub.prefetch(plan, args.configfile, path, say=log.info)
    for line in hub.describe(lock):
        log.info("%s", line)
    log.info("wrote %s; jobs now load these commits offline (keep HF_HOME as it is now for them)", path)
    try:
        for w in check_gpu_memory(plan, hub.HubLock.read(path)):
            log.warning("%s", w)
    except ValueError as e:
        log.error("the lock is written, but planning will stop: %s", e)
        return 2
    return 0


def budget_command(args) -> int:
    config, plan = _plan(args.configfile, args.workflow)
    path = hub.lock_path(args.configfile, config)
    lock = hub.HubLock.read(path) if path.exists() else None
    if lock is not None:
        try:
            hub.check_lock(plan, lock)
        except ValueError as e:
            log.warning("%s (sizes from it may be out of date)", e)
    b = _budget(plan, config, args, lock)
    text = budget.markdown(b)
    print(text, end="")
    md, js = budget.write(b, args.out or f"{plan.paths.root}/budget")
    log.info("wrote %s and %s", md, js)
    return 0


def _budget(plan, config, args, lock):
    """The budget of ``plan`` with ``args``' profile, GPUs and work flags (``oodcorr budget`` and ``design``)."""
    measured = budget.measured_costs(plan)
    b = budget.compute(
        plan,
        configfile=args.configfile,
        lock=lock,
        profile=budget.read_profile(args.profile),
        gpus=args.gpus,
        measured=measured,
    )
    if args.throughput:
        sizes = grids.testset_sizes(plan, sorted({t for d in plan.testsets for t, _ in plan.testsets[d]}))
        sizes = {t: (n if n is not None else args.examples) for t, n in sizes.items()}
        b.work = budget.work(
            plan,
            budget.parse_throughput(args.throughput),
            lock=lock,
            examples=sizes,
            tokens_per_example=args.tokens_per_example,
            measured=measured,
        )
    return b


def _read_pilot(args, sizes: dict, settings):
    """The pilot's estimates (:func:`oodcorr.analysis.design.pilot_estimates`) and the examples per testset it says."""
    import argparse as _argparse

    from .analysis import tables  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.design import pilot_estimates

    df, _ = tables.read_table(args.pilot)
    workflow = {"model", "run_id", "step", "testset", "role"} <= set(df.columns)
    if workflow and not args.pilot_in_domain:
        long, info = tables.from_scores(df, args.pilot_score)
        pool_by = ("n_train",) if "n_train" in info.columns else ()
        if "n" in df.columns:
            n = df.groupby("testset")["n"].median()
            sizes = {**sizes, **{str(t): int(v) for t, v in n.items() if v == v}}
    elif not args.pilot_in_domain:
        raise DataError(
            f"--pilot {args.pilot}: not the workflow's scores table (it lacks some of the columns model, run_id, "
            "step, testset, role); name its in-domain testset with --pilot-in-domain (and its layout with "
            "--pilot-format, --pilot-unit, --pilot-score)"
        )
    else:
        ns = _argparse.Namespace(
            table=args.pilot,
            format=args.pilot_format,
            in_domain=args.pilot_in_domain,
            unit=args.pilot_unit,
            testset_column="testset",
            score=args.pilot_score,
            model=None,
            run=None,
            model_name=None,
            testsets=None,
            exclude=[],
            summary_label=[],
            encoding=None,
            examples=None,
            pool_by=None,
        )
        long, _, info, pool_by = _load(ns)
    return pilot_estimates(long, info, pool_by, sizes, settings, seed=args.seed)


def design_command(args) -> int:
    from .analysis import Options  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis import design as dz  # numpy/scipy: only the analysis commands pay their start-up

    t0, c0 = time.time(), time.process_time()
    if args.studies < 20:
        raise ValueError(f"--studies {args.studies}: give at least 20 simulated studies per effect")
    if not 0 < args.target < 1:
        raise ValueError(f"--target {args.target}: a power strictly between 0 and 1")
    config, plan = _plan(args.configfile, args.workflow)
    raw = read_config(args.configfile)  # the config as written: the alternatives change copies of it
    path = hub.lock_path(args.configfile, config)
    lock = hub.HubLock.read(path) if path.exists() else None
    settings = dz.Settings.from_options(Options.from_mapping(plan.analysis))
    shape = grids.grid_of(plan)
    grid = dz.Grid(shape["models"], shape["runs"], shape["checkpoints"], shape["pairs"])
    sizes = {t: (n if n is not None else args.examples) for t, n in shape["sizes"].items()}
    notes = list(shape["notes"])
    sources = {}
    size = grids.typical_size(sizes)
    sampling = grids.sampling_ratio(size, args.residual_sd, args.accuracy)
    if size:
        sources["sampling"] = (
            f"binomial at accuracy {args.accuracy:g} on {size:,} examples (the OOD testsets' median), over a "
            f"residual sd of {args.residual_sd:g}"
        )
    else:
        sources["sampling"] = "none: the testsets' sizes are unknown before their data is prepared (--examples N)"
    phis = args.phi or [0.5, 0.8, 0.95]
    headline = (
        args.phi_alternatives if args.phi_alternatives is not None else (0.8 if 0.8 in phis else phis[len(phis) // 2])
    )
    model_sd, run_sd = args.model_sd or 0.0, args.run_sd or 0.0
    pilot = None
    if args.pilot:
        pilot = _read_pilot(args, sizes, settings)
        ph = pilot["phi"]
        if args.phi is None:
            phis = [ph["low"], ph["estimate"], ph["high"]]
            sources["phi"] = f"the pilot: {ph['estimate']:.2f}, with its 95 % interval's ends"
        if args.phi_alternatives is None:
            headline = ph["estimate"]
        if args.model_sd is None:
            model_sd = pilot["model_sd"]["estimate"]
            sources["model_sd"] = f"the pilot's median between-model variance over {pilot['model_sd']['pairs']} pairs"
        if args.run_sd is None:
            run_sd = pilot["run_sd"]["estimate"]
            sources["run_sd"] = "the pilot's median between-run variance"
        if pilot["sampling"]["per_testset"] and any("sampling" in e for e in pilot["sampling"]["per_testset"].values()):
            sampling = pilot["sampling"]["estimate"]
            sources["sampling"] = (
                "the pilot's testsets: binomial sd at their mean score over their residual sd (median)"
            )
    phis = [min(max(float(p), 0.0), 0.98) for p in phis]
    headline = min(max(float(headline), 0.0), 0.98)
    a = dz.Assumptions(
        phi=headline, model_sd=model_sd, run_sd=run_sd, sampling=sampling, non_null_pairs=args.non_null_pairs
    )
    res = tuple(Options.from_mapping(plan.analysis).residualisers)
    if res[0] != "linear":
        notes.append(
            f"the config's heatmaps show the {res[0]} residualiser; the simulation uses the linear one (a GAM "
            "fit costs 0.25 s per series): benchmarks/README.md#4-analysis-calibration-of-intervals-and-p-values "
            "measures the GAM's power beside it (per run, 21 checkpoints, effect 0.6: 0.64 against 0.67 at "
            "phi 0.5, 0.52 against 0.39 at phi 0.8)"
        )
    b = _budget(plan, config, args, lock)
    cost = {"gpu_hours": b.totals["gpu_hours"], "gpu_hours_work": b.work["gpu_hours"] if b.work else None}
    alternatives, cost_notes = [], []
    if not args.no_alternatives:
        for name in grids.CHANGES:
            try:
                cfg, desc = grids.change(name, raw, plan)
                plan2 = load(cfg, workflow_dir(args.workflow), sources=[args.configfile])
            except ValueError as e:
                cost_notes.append(f"{name}: not available ({e})")
                continue
            s2 = grids.grid_of(plan2)
            samp2 = sampling
            if name == "examples x4":
                samp2 = sampling / 2  # four times the examples: half the binomial sd
            b2 = _budget(plan2, cfg, args, lock)
            alternatives.append(
                {
                    "name": name,
                    "description": desc,
                    "grid": dz.Grid(s2["models"], s2["runs"], s2["checkpoints"], s2["pairs"]),
                    "sampling": samp2,
                    "cost": {
                        "gpu_hours": b2.totals["gpu_hours"],
                        "gpu_hours_work": b2.work["gpu_hours"] if b2.work else None,
                    },
                }
            )
        if any(x["name"] == "examples x4" for x in alternatives):
            cost_notes.append(
                "examples x4: the config's evaluation time limits stay as they are (GPU-hours at the limits do not "
                "grow); its GPU-hours from the work do (--throughput)"
            )
    workers = args.workers or max(1, min(2, os.cpu_count() or 1))
    info = {
        "config": str(args.configfile),
        "experiment": plan.experiment,
        "tables": shape["tables"],
        "tables_how": shape["tables_how"],
        "testsets": shape["testsets"],
        "sizes": sizes,
        "sources": sources,
        "cost": cost,
        "cost_notes": cost_notes,
        "notes": notes,
        "pilot": pilot,
        "pilot_file": args.pilot,
        "budget": b.to_json(),
    }
    rep = dz.report(
        grid,
        a,
        phis,
        headline,
        settings,
        effects=args.effects,
        studies=args.studies,
        seed=args.seed,
        alternatives=alternatives,
        effect=settings.near_zero if args.effect is None else args.effect,
        target=args.target,
        workers=workers,
        info=info,
    )
    rep["seconds"] = round(time.time() - t0, 1)
    rep["cpu_seconds_main_process"] = round(time.process_time() - c0, 1)
    rep["workers"] = workers
    rep["load_average"] = list(os.getloadavg())
    text = dz.markdown(rep, budget.markdown(b))
    print(text, end="")
    prefix = Path(args.out or f"{plan.paths.root}/design")
    md, js, png = (prefix.with_name(prefix.name + ext) for ext in (".md", ".json", ".png"))
    write_text_atomic(md, text)
    write_json_atomic(js, rep)
    if not args.no_figure:
        from .jobs import plots  # matplotlib: kept out of planning

        plots.design_power(rep, str(png))
    log.info("wrote %s, %s%s in %.0f s", md, js, "" if args.no_figure else f" and {png}", time.time() - t0)
    return 0


def safe_name(name: str) -> str:
    """A model name as a file name: anything but letters, digits, '.', '_' and '-' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._") or "model"


def _load(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...]]:
    """(canonical long table, examples or None, run information, columns to pool by)."""
    from .analysis import tables  # pandas/scipy: only the analysis commands pay their start-up

    df, where = tables.read_table(args.table, args.encoding)
    src = str(args.table)
    model = args.model or ("model" if "model" in df.columns else None)
    run = args.run or next((c for c in ("run_id", "run") if c in df.columns and c != args.unit), None)
    if args.pool_by is None:
        pool_by = ("n_train",) if "n_train" in df.columns and "n_train" != args.unit else ()
    else:
        pool_by = tuple(args.pool_by)
    labels = tables.SUMMARY_LABELS | set(args.summary_label)
    exclude = tuple(args.exclude) + (pool_by if args.format == "wide" else ())
    common = dict(
        source=src,
        where=where,
        model=model,
        run=run,
        model_name=args.model_name or Path(args.table).stem,
        testsets=args.testsets,
        exclude=exclude,
        summary_labels=labels,
    )
    # run information: the columns to pool by, and (long tables) the workflow's n_train and seed
    info_cols = [
        c for c in ("n_train", "seed") if args.format == "long" and c in df.columns and c not in (args.unit, model, run)
    ]
    info_cols = list(dict.fromkeys(list(pool_by) + info_cols))
    body = tables.drop_summary_rows(df, args.unit, src, where, labels, quiet=True) if info_cols else df
    info = tables.run_info(body, info_cols, source=src, model=model, run=run, model_name=common["model_name"])
    if args.format == "wide":
        long = tables.from_wide(df, unit=args.unit, in_domain=args.in_domain, **common)
    else:
        long = tables.from_long(
            df, unit=args.unit, testset=args.testset_column, score=args.score, in_domain=args.in_domain, **common
        )
    log.info(
        "%s: %d models, %d runs, %d units, %d testsets (in-domain: %s)",
        src,
        long["model"].nunique(),
        long.groupby(["model", "run"]).ngroups,
        long["unit"].nunique(),
        long["testset"].nunique(),
        args.in_domain,
    )
    if not pd.api.types.is_numeric_dtype(long["unit"]) or pd.api.types.is_bool_dtype(long["unit"]):
        shown = ", ".join(repr(str(u)) for u in list(dict.fromkeys(long["unit"]))[:3])
        log.info(
            "%s: the units in column %r are not numbers (%s, ...), so they are treated as exchangeable: in no "
            "order, with no autocorrelation between them allowed for, and no learning curves; give a numeric "
            "--unit (a training step) for ordered units",
            src,
            args.unit,
            shown,
        )
    examples = None
    if args.examples and not tables.example_bootstrap_applies(args.score):
        raise DataError(
            f"--examples: the example-level bootstrap resamples correctness, which gives accuracy, "
            f"not --score {args.score}; leave --examples out"
        )
    if args.examples:
        ex, _ = tables.read_table(args.examples, args.encoding)
        examples = tables.from_examples_table(
            ex,
            unit=args.unit,
            testset=args.testset_column,
            example="example",
            correct="correct",
            model=model if model in ex.columns else None,
            run=run if run in ex.columns else None,
            model_name=common["model_name"],
            source=str(args.examples),
        )
    return long, examples, info, pool_by


def analyse_command(args) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: is an existing file; give a folder (it is created if missing)")
    experiment = experiment_folder(out)
    if experiment is not None and not args.force:
        raise DataError(
            f"--out {out}: is inside the experiment folder {experiment}, whose tables and figures the workflow "
            "publishes; writing there would replace them (and could mix with a run publishing now). Give another "
            "--out (e.g. --out my-analysis), or pass --force to write there anyway (the next run of the workflow "
            "publishes its own set again and keeps yours aside)"
        )
    with contextlib.ExitStack() as held:
        if experiment is not None:  # --force: not while a run of the workflow writes that experiment
            held.enter_context(hold(experiment, EXPERIMENT, extra={"config": f"oodcorr analyse --out {out}"}))
        return _analyse_into(args, out)


def experiment_folder(out: Path) -> Path | None:
    """The workflow's experiment folder that ``out`` is (or is inside), or None: a folder holding what
    only the workflow writes there (its published set, its staging folder, its lock or record)."""
    marks = (".published", ".staging", "experiment.lock", "experiment.json", "published.json")
    here = out.resolve()
    for d in (here, *here.parents):
        if any((d / m).exists() for m in marks):
            return d
    return None


def _analyse_into(args, out: Path) -> int:
    from .analysis import Options, agreement, analyse  # pandas/scipy: only the analysis commands pay their start-up
    from .analysis.residualise import GamSettings
    from .analysis.tables import summarise, write_tables

    long, examples, info, pool_by = _load(args)
    opts = Options(
        methods=tuple(args.methods),
        residualisers=tuple(args.residualisers),
        inference=args.inference,
        level=args.level,
        correction=args.correction,
        alpha=args.alpha,
        min_n_eff=args.min_n_eff,
        near_zero=args.near_zero,
        pool_by=pool_by,
        pool_two_runs=args.pool_two_runs,
        drop_step0=args.drop_step0,
        step0_check=not args.no_step0_check,
        seed=args.seed,
        n_boot=args.n_boot,
        n_perm=args.n_perm,
        interval=args.interval,
        block_length=args.block_length,
        example_boot=args.example_boot,
        gam=GamSettings(n_splines=args.gam_n_splines, min_points=args.gam_min_points),
    )
    check_analysis_size(long, opts.methods, opts.residualisers, args.max_cells, str(args.table))
    pc = analyse(long, opts, examples, run_info=info)
    agree = agreement(pc, opts.alpha, opts.correction, opts.level, opts.near_zero)
    write_tables(pc, agree, out)
    write_json_atomic(
        out / "settings.json",
        {
            "input": str(args.table),
            "sha256": sha256_file(args.table),
            "format": args.format,
            "unit": args.unit,
            "in_domain": args.in_domain,
            "options": opts.describe(),
        },
    )
    log.info("wrote %s (%d rows) and %s", out / "partial_correlations.csv", len(pc), out / "agreement.csv")
    summarise(pc, agree, opts, log)
    if not args.no_plots:
        method = args.plot_method or opts.methods[0]
        res = args.plot_residualiser or opts.residualisers[0]
        if method not in opts.methods or res not in opts.residualisers:
            raise ValueError(f"--plot-method/--plot-residualiser ({method}, {res}) must be among the ones analysed")
        make_plots(pc, agree, long, out, method, res, opts)
    return 0


def check_analysis_size(long: pd.DataFrame, methods, residualisers, max_cells: int, source: str = "this table") -> int:
    """The cells the analysis will compute (each run's OOD pairs x methods x residualisers), said
    before it starts; above ``--max-cells`` a DataError gives the count and the flag that allows it."""
    ood = [len(set(g["testset"]) - set(g["in_domain"])) for _, g in long.groupby(["model", "run"], sort=False)]
    cells, detail = analysis_cells(ood, len(methods), len(residualisers))
    if cells > max_cells:
        raise DataError(
            analysis_too_large(
                cells,
                detail,
                max_cells,
                what=f"the analysis of {source}",
                limit_name="--max-cells" + (" (its default)" if max_cells == ANALYSIS["max_cells"] else ""),
                fewer="--testsets, --exclude, --methods or --residualisers",
                allow=f"pass --max-cells {cells}",
            )
        )
    log.info("analysing %s cells (%s)", f"{cells:,}", detail)
    return cells


def make_plots(pc, agree, long, out: Path, method: str, residualiser: str, opts) -> None:
    from .jobs import plots  # numpy/pandas: kept out of planning

    models = sorted(pc["model"].unique())
    cells = dict(pc=pc, method=method, residualiser=residualiser)
    if len(models) > 1:  # the answer first: the consensus across models, one figure per in-domain set
        for dom in sorted(agree["in_domain"].astype(str).unique()):
            png = str(out / "consensus" / f"{safe_name(dom)}.png")
            plots.draw(
                "consensus_heatmap", png, opts, agree=agree, in_domain=dom, method=method, residualiser=residualiser
            )
    for m in models:
        png = f"{safe_name(m)}.png"
        plots.draw("heatmap", str(out / "heatmaps" / png), opts, model=m, **cells)
        plots.draw("scatter", str(out / "scatter" / png), opts, long=long, model=m)
        if pd.api.types.is_numeric_dtype(long["unit"]):
            plots.draw("learning_curves", str(out / "learning_curves" / png), opts, long=long, model=m)
    if len(models) > 1:
        plots.draw("heatmap_grid", str(out / "heatmap_grid.png"), opts, **cells)
    else:
        log.info("one model: no side-by-side grid (heatmap_grid.png) to draw")
    log.info("wrote figures under %s", out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # a no-op when logging is already configured (e.g. under pytest); the level is ours either way
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("oodcorr").setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)

    try:
        if args.command == "analyse":
            return analyse_command(args)
        if args.command == "prefetch":
            return prefetch_command(args)
        if args.command == "budget":
            return budget_command(args)
        if args.command == "design":
            return design_command(args)
    except (DataError, ValueError, FolderInUse) as e:
        log.error("%s", e)
        return 2
    except OSError as e:  # a folder that cannot be written, a disk that is full...
        log.error("%s", f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
