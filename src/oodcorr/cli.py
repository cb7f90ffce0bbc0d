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
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
from pathlib import Path

import pandas as pd

from .core.defaults import ANALYSIS
from .core.errors import DataError
from .core.io import sha256_file, write_json_atomic
from .core.limits import analysis_cells, analysis_too_large
from .core.locks import EXPERIMENT, FolderInUse, hold
from .launch import budget
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
    if v == "auto":
        return v
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--block-length must be 'auto' or a positive integer, got {v!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--block-length must be at least 1, got {n}")
    return n


def _positive_int(flag: str):
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive integer, got {v!r}") from None
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
    return p


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
    b = budget.compute(
        plan,
        configfile=args.configfile,
        lock=lock,
        profile=budget.read_profile(args.profile),
        gpus=args.gpus,
        measured=budget.measured_costs(plan),
    )
    text = budget.markdown(b)
    print(text, end="")
    md, js = budget.write(b, args.out or f"{plan.paths.root}/budget")
    log.info("wrote %s and %s", md, js)
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
    except (DataError, ValueError, FolderInUse) as e:
        log.error("%s", e)
        return 2
    except OSError as e:  # a folder that cannot be written, a disk that is full...
        log.error("%s", f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
