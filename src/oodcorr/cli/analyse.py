"""``oodcorr analyse TABLE --in-domain NAME [...]``: the same analysis as the workflow's rules on any
scores table (CSV, TSV or parquet; long or wide) or a folder of lm-evaluation-harness results
(``--format lm-eval``); the tables and figures go into ``--out``."""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path

from ..analysis import Options, agreement, analyse
from ..analysis.correlate import METHODS
from ..analysis.inference import INFERENCES
from ..analysis.lmeval_files import MAX_FILES, MAX_RESULTS_BYTES
from ..analysis.multitest import CORRECTIONS
from ..analysis.pooling import TWO_RUNS
from ..analysis.resample import INTERVALS
from ..analysis.residualise import RESIDUALISERS, GamSettings
from ..analysis.tables import summarise, write_tables
from ..core.answer import answer_lines
from ..core.defaults import ANALYSIS
from ..core.errors import DataError
from ..core.io import sha256_file, write_json_atomic
from ..core.locks import EXPERIMENT, hold
from ..jobs import answer_figures, figure_set
from ..jobs.explorer import EXPLORER_FILE
from ..launch.experiment import experiment_folder
from . import out_record
from .args import add_showing_default, block_length, positive_int
from .scores import check_analysis_size, parse_groups, read_lmeval, read_scores

log = logging.getLogger("oodcorr")

EPILOG = """\
outputs (in --out):
  partial_correlations.csv  one row per model x run (or 'pooled' per pool group) x pair x method x
                            residualiser: r, interval, p, effective sample size, checks
  agreement.csv             per OOD pair: the answer across models -- the consensus r with its
                            interval, the prediction interval for a further model, the
                            tolerance bounds of 97.5 % of models, and the strongest statement
                            the data allow: the sign in nearly every model or on average, sign
                            reversal, models differ, near zero, unresolved (each corrected
                            across pairs: --agreement-correction); each model's pooled r
  consensus/<in-domain>.png the consensus heatmap, marked by verdict (with more than one model)
  forest/<in-domain>/<x>+<y>.png  why each pair got its verdict: each model's pooled r and interval,
                            the consensus, the prediction interval and the tolerance bounds (with
                            more than one model;
                            up to --forest-max pairs per in-domain set)
  explorer.html             every pair in a browser, one file that works offline: the consensus heatmap
                            (hover for the numbers, click for the pair's forest plot), filters by verdict
                            and name, each model's view, the table to download
  heatmaps/<model>.png      lower-triangle heatmap of the pooled partial correlations
  heatmap_grid.png          the models side by side (with more than one model)
  scatter/<model>.png       in-domain vs OOD score with the fitted residualiser curves
                            (these three are left out above 30 OOD testsets with several models:
                            --all-figures)
  learning_curves/<model>.png  score vs step (only when the unit column is numeric)
  settings.json             the settings used and the input's sha256 (lm-eval: of the files read)
  .oodcorr-analyse.json     what this analysis wrote: the next analysis into --out removes what of it
                            that one does not write again (as written; files changed since, or not
                            written by an analysis, are left alone and named)

examples:
  oodcorr analyse results/default/scores.csv --in-domain synth-test --model model --run run_id
  oodcorr analyse accuracies_by_run.csv --format wide --unit Run --in-domain "MNLI dev acc."
  oodcorr analyse mixed.csv --format wide --in-domain mnli --each-scale --column-metric loglik=loglik
  oodcorr analyse scores.csv.gz --encoding latin-1 --in-domain mnli   # compressed, Latin-1 text
  oodcorr analyse results/scores.csv --in-domain mnli --residualisers gam linear --pool-by n_train
  oodcorr analyse lm-eval-out --format lm-eval --in-domain lambada_openai --tasks arc_easy,piqa,sciq
  oodcorr analyse pythia/evals/pythia-v1 --format lm-eval --in-domain lambada_openai \
      --path-pattern '{model}/zero-shot/*_step{step}.json' --tasks arc_easy,piqa,sciq,winogrande

Rows whose unit label is a summary statistic (Mean, Standard deviation, Minimum,
Maximum, ...) and empty rows are excluded with a logged warning naming each line.
"""


def column_metric(v: str) -> tuple[str, str]:
    """``--column-metric COLUMN=METRIC`` -> (column, metric)."""
    column, sep, metric = v.rpartition("=")
    if not sep or not column or not metric.strip():
        raise argparse.ArgumentTypeError(f"{v!r}: give COLUMN=METRIC, e.g. loglik=loglik or f1=f1")
    return column, metric.strip()


def add_parser(sub, help: str) -> None:
    d = Options()
    a = sub.add_parser(
        "analyse",
        help=help,
        description="Partial correlations between every pair of OOD testsets, in-domain score regressed "
        "out, with intervals and p-values that allow for autocorrelated checkpoints (one "
        "procedure, so they agree), multiple-comparison correction, pooling over runs as a "
        "random-effects meta-analysis, tests of heterogeneity and sign reversal across models, "
        "residualiser and step-0 checks, and plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument(
        "table",
        help="scores table: .csv, .tsv or .parquet; with --format lm-eval, a folder of lm-evaluation-harness results",
    )
    g = a.add_argument_group("input layout")
    g.add_argument(
        "--format",
        choices=("long", "wide", "lm-eval"),
        default="long",
        help="long: one row per unit x testset; wide: one row per unit, one column per testset; lm-eval: a "
        "folder of lm-evaluation-harness results files, one per model x checkpoint (default: long)",
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
        "--each-scale",
        action="store_true",
        help="wide format: read each testset column on its own scale (shares or percentages, told column by "
        "column: a table of shares beside percentages); by default every column is an accuracy on one scale",
    )
    g.add_argument(
        "--column-metric",
        action="append",
        default=[],
        type=column_metric,
        metavar="COLUMN=METRIC",
        help="wide format: the metric of a column that is not an accuracy, its range checked as that metric's "
        "(f1, mcc, perplexity, ...; a name without a known range, such as loglik, takes any number); repeatable. "
        "In long format, --score names the score column instead",
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
        "plus 'example' and 'correct' (0/1): each testset's item noise is estimated from it "
        "(docs/analysis.md#scores-as-measurements), and the example-level bootstrap runs",
    )
    g.add_argument(
        "--n-column",
        metavar="COLUMN",
        help="long format: the column with the items behind each score (the workflow's scores table has 'n'); "
        "for a share of items (accuracy) the binomial variance at that size bounds each testset's item noise",
    )
    g.add_argument(
        "--items",
        nargs="+",
        default=[],
        metavar="[TESTSET=]N",
        help="the items behind the scores, for a table without an n column (a wide one): N for every testset, "
        "TESTSET=N for one (e.g. --items 1000 wnli=71 rte=277); bounds each testset's item noise as --n-column does",
    )
    g.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="GROUP=TESTSET,...",
        help="a testset scored on the items of others (repeatable; e.g. --group crows_pairs_english="
        "crows_pairs_english_age,crows_pairs_english_gender): pairs that share items are left out "
        "(docs/analysis.md#testsets-that-share-items); lm-eval results say their groups themselves",
    )
    e = a.add_argument_group(
        "lm-evaluation-harness results (--format lm-eval; docs/analysis.md#i-already-have-lm-eval-results)"
    )
    e.add_argument(
        "--metric",
        default="acc",
        metavar="NAME",
        help="the metric analysed: acc, acc_norm, exact_match, ...; NAME,FILTER where a task has it under several "
        "filters (default: acc)",
    )
    e.add_argument(
        "--tasks",
        metavar="T1,T2,...",
        help="read only these tasks (comma-separated; the in-domain task is always read); default: every task "
        "that has the metric",
    )
    e.add_argument(
        "--path-pattern",
        metavar="PATTERN",
        help="where each file's path (below the folder) gives model, run or step: placeholders {model}, {run}, "
        "{step}; * any text within a name, **/ any folders; e.g. '{model}/zero-shot/*_step{step}.json'. "
        "What it names wins over config.model_args for model and run; only matching .json files are read",
    )
    e.add_argument(
        "--follow-links",
        action="store_true",
        help="follow symbolic links that lead out of the folder (by default each is named in a warning and not "
        "followed: a link to / would walk the whole machine)",
    )
    e.add_argument(
        "--no-samples",
        action="store_true",
        help="leave the --log_samples files (samples_<task>_<date>.jsonl) out: no example-level bootstrap",
    )
    add_showing_default(
        e,
        "--max-files",
        MAX_FILES,
        "refuse a folder of more .json/.jsonl files than this (they are counted first)",
        type=positive_int("--max-files"),
    )
    add_showing_default(
        e,
        "--max-file-mb",
        MAX_RESULTS_BYTES // 2**20,
        "refuse a results file larger than this many MiB, before it is parsed",
        type=positive_int("--max-file-mb"),
    )
    s = a.add_argument_group("statistics")
    add_showing_default(s, "--methods", list(d.methods), "correlation methods", nargs="+", choices=METHODS)
    add_showing_default(
        s,
        "--residualisers",
        list(d.residualisers),
        "residualisers; '+step' adds the training step as a covariate",
        nargs="+",
        choices=RESIDUALISERS,
    )
    add_showing_default(
        s,
        "--inference",
        d.inference,
        "how intervals and p-values are computed: modified-t = t-test on the effective sample "
        "size from the residuals' (design-corrected AR(1)) autocorrelation, its interval by "
        "inverting it; iid = the same with independent units; block = the earlier moving-block "
        "bootstrap interval and block-permutation p",
        choices=INFERENCES,
    )
    add_showing_default(s, "--level", d.level, "confidence level", type=float)
    add_showing_default(
        s,
        "--min-n-eff",
        d.min_n_eff,
        "a cell whose effective sample size is below this says so in its note",
        spec="g",
        type=float,
    )
    add_showing_default(
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
    add_showing_default(
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
    add_showing_default(s, "--n-boot", d.n_boot, "--inference block: bootstrap resamples", type=int)
    add_showing_default(s, "--n-perm", d.n_perm, "--inference block: block permutations", type=int)
    add_showing_default(
        s,
        "--block-length",
        d.block_length,
        "--inference block: block length, or 'auto': ceil(n^(1/3)) for numeric (ordered) units, 1 otherwise",
        type=block_length,
    )
    add_showing_default(
        s, "--interval", d.interval, "bootstrap interval of --inference block and of --examples", choices=INTERVALS
    )
    add_showing_default(
        s,
        "--correction",
        d.correction,
        "multiple-comparison correction across the pairs of a heatmap (the per-model cells' stars)",
        choices=CORRECTIONS,
    )
    add_showing_default(
        s,
        "--agreement-correction",
        d.agreement_correction,
        "correction of the answer's statements across the pairs of the agreement table: bh, the false "
        "discovery rate; holm, the chance of any false statement",
        choices=CORRECTIONS,
    )
    add_showing_default(s, "--alpha", d.alpha, "significance level for p_adj", type=float)
    add_showing_default(s, "--seed", d.seed, "seed of every resampling", type=int)
    add_showing_default(
        s, "--example-boot", d.example_boot, "example-level bootstrap resamples with --examples", type=int
    )
    add_showing_default(s, "--gam-n-splines", d.gam.n_splines, "GAM basis size per covariate", type=int)
    add_showing_default(s, "--gam-min-points", d.gam.min_points, "fewest points the GAM is fitted to", type=int)
    add_showing_default(
        s,
        "--max-cells",
        ANALYSIS["max_cells"],
        "refuse an analysis of more cells (OOD pairs x methods x residualisers, summed over runs) than "
        "this, giving the count; raise it to run a larger one on purpose",
        type=positive_int("--max-cells"),
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
    o.add_argument("--no-plots", action="store_true", help="write the tables only (no figure, no explorer page)")
    o.add_argument(
        "--all-figures",
        action="store_true",
        help="draw the per-model heatmaps, their grid and the scatter grids even where they cannot be read: with "
        f"more than {figure_set.LEGIBLE_TESTSETS} OOD testsets and more than one model they are left out (the log "
        "says so; the explorer page shows each model's correlations)",
    )
    o.add_argument(
        "--workers",
        type=positive_int("--workers"),
        metavar="N",
        help="processes for the runs and the figures (default: 2, or 1 on one core); the tables do not depend on it",
    )
    add_showing_default(
        o,
        "--forest-max",
        answer_figures.FOREST_CAP,
        "forest plots per in-domain set at most: with more pairs, those whose verdicts say most (sign reversal, "
        "the sign in nearly every model, on average, models differ, near zero, then unresolved; the largest "
        "consensus first); 0: none",
        type=int,
    )
    o.add_argument(
        "--forest-pairs",
        nargs="+",
        metavar="X+Y",
        help="draw the forest plots of these OOD pairs (testset names joined by '+') instead of choosing",
    )
    o.add_argument("--plot-method", metavar="METHOD", help="method the heatmaps show (default: the first)")
    o.add_argument("--plot-residualiser", metavar="NAME", help="residualiser the heatmaps show (default: the first)")
    o.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")


def run(args) -> int:
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
        return _analyse_into(args, out, out_record.snapshot(out))


def _analyse_into(args, out: Path, before: dict) -> int:
    if args.format == "lm-eval":
        long, examples, info, pool_by, digest, task_groups = read_lmeval(args)
    else:
        task_groups = None
        if args.tasks or args.path_pattern:
            flag = "--tasks" if args.tasks else "--path-pattern"
            raise DataError(
                f"{flag}: reads lm-evaluation-harness results (--format lm-eval); for a table, --testsets and "
                "--exclude choose the testsets"
            )
        long, examples, info, pool_by = read_scores(args)
        digest = sha256_file(args.table)
    same = ("inference", "level", "correction", "agreement_correction", "alpha", "min_n_eff", "near_zero")
    same += ("pool_two_runs", "drop_step0")
    same += ("seed", "n_boot", "n_perm", "interval", "block_length", "example_boot")
    opts = Options(
        methods=tuple(args.methods),
        residualisers=tuple(args.residualisers),
        pool_by=pool_by,
        step0_check=not args.no_step0_check,
        gam=GamSettings(n_splines=args.gam_n_splines, min_points=args.gam_min_points),
        **{k: getattr(args, k) for k in same},
    )
    check_analysis_size(long, opts.methods, opts.residualisers, args.max_cells, str(args.table))
    if not args.no_plots:
        figure_set.check_figure_names(long, str(args.table))
    task_groups = parse_groups(args.group, task_groups)
    workers = args.workers or figure_set.default_workers()
    pc = analyse(long, opts, examples, run_info=info, workers=workers, task_groups=task_groups)
    agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    settings = {
        "input": str(args.table),
        "sha256": digest,
        "format": args.format,
        "unit": "step" if args.format == "lm-eval" else args.unit,
        **({"metric": args.metric, "path_pattern": args.path_pattern} if args.format == "lm-eval" else {}),
        "in_domain": args.in_domain,
        "options": opts.describe(),
    }
    method = args.plot_method or opts.methods[0]
    res = args.plot_residualiser or opts.residualisers[0]
    if not args.no_plots and (method not in opts.methods or res not in opts.residualisers):
        raise ValueError(f"--plot-method/--plot-residualiser ({method}, {res}) must be among the ones analysed")
    rows = agree.astype(object).where(agree.notna(), "").astype(str).to_dict("records")
    choice = pool = None
    if not args.no_plots:
        choice = figure_set.choose(
            pc, agree, long, out, method, res, args.forest_max, args.forest_pairs, args.all_figures
        )
    lines = answer_lines(
        rows, method, res, out, consensus_sets=choice.consensus_sets if choice else [], file_name=figure_set.safe_name
    )
    if choice is not None:  # the page and the figures in other processes, while this one writes the tables
        title = f"oodcorr: {Path(str(args.table)).name}, in-domain {args.in_domain}"
        page = figure_set.explorer_page(out, title, {"input": str(args.table), **opts.describe()}, lines, (method, res))
        held = dict(pc=pc, agree=agree, agreement=agree, long=long, opts=opts)
        pool = figure_set.FigurePool([page, *choice.figures], workers, **held)
    write_tables(pc, agree, out)
    write_json_atomic(out / "settings.json", settings)
    log.info("wrote %s (%d rows) and %s", out / "partial_correlations.csv", len(pc), out / "agreement.csv")
    summarise(pc, agree, opts, log)
    if pool is not None:
        written = pool.wait()[0]
        for line in choice.left_out:
            log.info("%s", line)
        log.info("wrote figures under %s", out)
        lines.append(
            f"every pair, explored in a browser (one file, offline): {out / EXPLORER_FILE} "
            f"({written['pairs']} pairs, {written['bytes'] / 2**20:.1f} MB)"
        )
    for line in out_record.settle(out, before):  # the earlier analysis's outputs this one did not write
        log.warning("%s", line)
    for line in lines:
        log.info("%s", line)
    return 0
