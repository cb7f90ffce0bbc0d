"""``oodcorr analyse TABLE --in-domain NAME [...]``: the workflow's analysis on any scores table or folder of
lm-evaluation-harness results, into ``--out``."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from dataclasses import fields
from pathlib import Path

from ..analysis import Options, agreement, analyse
from ..analysis.across.multitest import CORRECTIONS
from ..analysis.across.pooling import TWO_RUNS
from ..analysis.cell.correlate import METHODS
from ..analysis.cell.inference import INFERENCES
from ..analysis.cell.resample import INTERVALS
from ..analysis.cell.residualise import RESIDUALISERS, GamSettings
from ..analysis.readers import tables
from ..analysis.readers.lmeval import MAX_FILES, MAX_RESULTS_BYTES
from ..analysis.results import summarise, write_tables
from ..core.answer import answer_lines
from ..core.atomic_write import write_json_atomic
from ..core.defaults import ANALYSIS
from ..core.digests import sha256_file
from ..core.errors import DataError
from ..core.locks import EXPERIMENT, hold
from ..core.provenance import table_provenance
from ..jobs.figures import across_models, analysis_set
from ..jobs.figures.explorer import EXPLORER_FILE
from ..launch.experiment import experiment_folder
from . import build_parser, out_record
from .scores import check_analysis_size, input_files, metric_flag, parse_groups, read_lmeval, read_scores

_EPILOG = """\
outputs (in --out; docs/outputs.md says what each holds):
  partial_correlations.csv  one row per model x run (or 'pooled') x pair x method x residualiser
  agreement.csv             per OOD pair: the answer across models and its verdict
  consensus/, forest/       the consensus heatmap and each pair's forest plot (with more than one model)
  explorer.html             every pair in a browser, one file that works offline
  heatmaps/, heatmap_grid.png, scatter/, learning_curves/  per model (see --all-figures)
  settings.json             the command, every flag and each input's sha256: --from reruns it
  .oodcorr-analyse.json     what this analysis wrote: the next one into --out removes the rest

examples:
  oodcorr analyse results/default/scores.csv --in-domain synth-test --model model --run run_id
  oodcorr analyse accuracies_by_run.csv --format wide --unit Run --in-domain "MNLI dev acc."
  oodcorr analyse mixed.csv --format wide --in-domain mnli --metric loglik=loglik
  oodcorr analyse 'wandb/*.csv' --format wide --in-domain eval/c4_en/loss --testsets 'eval/downstream/*' \
      --metric '*_soft=loglik'   # W&B exports, one file per run: the unit _step found, metrics by name
  oodcorr analyse --from analysis/settings.json --out analysis-again   # rerun what settings.json records
  oodcorr analyse lm-eval-out --format lm-eval --in-domain lambada_openai --tasks arc_easy,piqa,sciq
  oodcorr analyse pythia/evals/pythia-v1 --format lm-eval --in-domain lambada_openai \
      --path-pattern '{model}/zero-shot/*_step{step}.json' --tasks arc_easy,piqa,sciq,winogrande

Empty rows and summary rows (unit label Mean, Standard deviation, ...) are left out, each line named.
"""


def _positive_int(flag: str, also: str = ""):
    """An argument type: an integer of at least 1, else an error naming ``flag``."""

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
    """An option whose help ends "(default: D)", D written from ``default`` itself."""
    shown = " ".join(default) if isinstance(default, list) else format(default, spec)
    group.add_argument(flag, default=default, help=f"{text} (default: {shown})", **kwargs)


def add_parser(sub, help: str) -> None:
    d = Options()
    a = sub.add_parser(
        "analyse",
        help=help,
        description="Partial correlations between every pair of OOD testsets, in-domain score regressed out, "
        "pooled over runs and compared across models. The first group is all most analyses need "
        "(docs/your-own-table.md).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,  # -h goes last, in its own group (below): --help shows the essentials first
    )
    g = a.add_argument_group("the essentials")
    g.add_argument(
        "table",
        nargs="*",
        metavar="INPUT",
        help="a table (.csv, .tsv, .parquet), several (a run each) or a glob ('exports/*.csv'); "
        "--format lm-eval: a folder of lm-evaluation-harness results",
    )
    g.add_argument(
        "--in-domain",
        metavar="TESTSET",
        help="the in-domain testset (a column in wide format, a value of --testset-column in long); required",
    )
    g.add_argument(
        "--format",
        choices=("long", "wide", "lm-eval"),
        default="long",
        help="long: a row per unit x testset; wide: a row per unit, a column per testset; lm-eval: a folder "
        "of lm-evaluation-harness results (default: long)",
    )
    g.add_argument(
        "--unit",
        metavar="COLUMN",
        help="column of the unit of observation, e.g. the training step (default: 'step', else the one of "
        f"{', '.join(tables.UNIT_COLUMNS[1:])} the table has); numeric units are ordered, others exchangeable",
    )
    g.add_argument(
        "--testsets",
        nargs="+",
        metavar="NAME",
        help="only these OOD testsets: names or quoted globs, e.g. 'eval/downstream/*'",
    )
    g.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="NAME",
        help="testsets (columns of a wide table) to leave out: names or globs",
    )
    g.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="[COLUMN=]METRIC",
        help="what the scores are (repeatable). Long: the score column named by its metric (default: accuracy) "
        "or COLUMN=METRIC. Wide: COLUMN=METRIC (globs allowed), METRIC for the rest (default: what a column's "
        "name says, else accuracy). lm-eval: the metric (default: acc; NAME,FILTER for a task's filter)",
    )
    g.add_argument(
        "--path-pattern",
        metavar="PATTERN",
        help="where each path gives its model and run ({model}, {run}; lm-eval: also {step}); * any text in a "
        "name, **/ any folders; e.g. '{model}/{run}.csv'",
    )
    g.add_argument("--out", metavar="DIR", help="output folder (default: ./analysis)")
    g.add_argument(
        "--from",
        dest="from_settings",
        metavar="SETTINGS",
        help="rerun the analysis a settings.json records (the same input and flags), into --out if given, else "
        "the folder it names",
    )
    g = a.add_argument_group("table layout (long and wide)")
    g.add_argument(
        "--testset-column",
        default="testset",
        metavar="COLUMN",
        help="long format: column naming the testset (default: testset)",
    )
    g.add_argument(
        "--model",
        metavar="COLUMN",
        help="column naming the model (default: 'model' if the table has it, else one model)",
    )
    g.add_argument(
        "--run",
        metavar="COLUMN",
        help="column naming the run (default: 'run_id' or 'run' if present, else one run, or each file's name)",
    )
    g.add_argument(
        "--model-name",
        metavar="NAME",
        help="model name without a model column (default: the file's name; several files: their folder's)",
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
        help="text encoding of a CSV/TSV table that is not UTF-8, e.g. latin-1 (compressed tables are read as "
        "they are)",
    )
    g.add_argument(
        "--examples",
        metavar="FILE",
        help="per-example correctness: the --unit, --testset-column (and model/run) columns plus 'example' and "
        "'correct' (0/1), for the item noise and the example-level bootstrap",
    )
    g.add_argument(
        "--n-column",
        metavar="COLUMN",
        help="long format: the column of the items behind each score (the workflow's 'n'): bounds the item "
        "noise of an accuracy",
    )
    g.add_argument(
        "--items",
        nargs="+",
        default=[],
        metavar="[TESTSET=]N",
        help="the items behind the scores without --n-column: N for every testset, TESTSET=N for one",
    )
    g.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="GROUP=TESTSET,...",
        help="a testset scored on the items of others (repeatable), e.g. mmlu=mmlu_anatomy,mmlu_astronomy: "
        "pairs that share items are left out",
    )
    e = a.add_argument_group(
        "lm-evaluation-harness results (--format lm-eval; docs/analysis.md#i-already-have-lm-eval-results)"
    )
    e.add_argument(
        "--tasks",
        metavar="T1,T2,...",
        help="only these tasks, comma-separated, and the in-domain one (default: every task with the metric)",
    )
    e.add_argument(
        "--follow-links",
        action="store_true",
        help="follow symbolic links out of the folder (default: name each, follow none)",
    )
    e.add_argument(
        "--no-samples",
        action="store_true",
        help="leave the --log_samples files out: no example-level bootstrap",
    )
    _add_showing_default(
        e,
        "--max-files",
        MAX_FILES,
        "refuse a folder of more .json/.jsonl files than this (they are counted first)",
        type=_positive_int("--max-files"),
    )
    _add_showing_default(
        e,
        "--max-file-mb",
        MAX_RESULTS_BYTES // 2**20,
        "refuse a results file larger than this many MiB, before it is parsed",
        type=_positive_int("--max-file-mb"),
    )
    s = a.add_argument_group("statistics")

    def stat(flag: str, text: str, **kwargs) -> None:  # an option of Options: its default is the field's
        default = getattr(d, flag[2:].replace("-", "_"))
        _add_showing_default(s, flag, list(default) if isinstance(default, tuple) else default, text, **kwargs)

    stat("--methods", "correlation methods", nargs="+", choices=METHODS)
    stat(
        "--residualisers",
        "residualisers; '+step' adds the training step as a covariate",
        nargs="+",
        choices=RESIDUALISERS,
    )
    stat(
        "--inference",
        "intervals and p-values: modified-t, a t-test on the effective sample size; iid, independent units; "
        "block, block bootstrap and permutation",
        choices=INFERENCES,
    )
    stat("--level", "confidence level", type=float)
    stat(
        "--min-n-eff",
        "a cell whose effective sample size is below this says so in its note",
        spec="g",
        type=float,
    )
    stat(
        "--near-zero",
        "an interval inside (-X, X) is concluded 'near zero' rather than 'unresolved'",
        spec="g",
        type=float,
    )
    s.add_argument(
        "--pool-by",
        nargs="*",
        metavar="COLUMN",
        help="pool runs within the groups of these columns, e.g. n_train; no column: all runs of a model "
        "(default: n_train if the table has it, else all runs)",
    )
    stat(
        "--pool-two-runs",
        "a model with 2 runs in a group: no pooled interval (none) or a fixed-effect combination",
        choices=TWO_RUNS,
    )
    s.add_argument("--drop-step0", action="store_true", help="leave out unit 0 (before finetuning) everywhere")
    s.add_argument(
        "--no-step0-check",
        action="store_true",
        help="skip recomputing every cell without unit 0 (columns *_no_step0, step0_changes)",
    )
    stat("--n-boot", "--inference block: bootstrap resamples", type=int)
    stat("--n-perm", "--inference block: block permutations", type=int)
    stat(
        "--block-length",
        "--inference block: block length, or 'auto': ceil(n^(1/3)) for numeric units, else 1",
        type=lambda v: v if v == "auto" else _positive_int("--block-length", "'auto' or ")(v),
    )
    stat("--interval", "bootstrap interval of --inference block and of --examples", choices=INTERVALS)
    stat(
        "--correction",
        "multiple-comparison correction across the pairs of a heatmap (the per-model cells' stars)",
        choices=CORRECTIONS,
    )
    stat(
        "--agreement-correction",
        "correction of the answer across the agreement table's pairs: bh (false discovery rate) or holm",
        choices=CORRECTIONS,
    )
    stat("--alpha", "significance level for p_adj", type=float)
    stat("--seed", "seed of every resampling", type=int)
    stat("--example-boot", "example-level bootstrap resamples with --examples", type=int)
    _add_showing_default(s, "--gam-n-splines", d.gam.n_splines, "GAM basis size per covariate", type=int)
    _add_showing_default(s, "--gam-min-points", d.gam.min_points, "fewest points the GAM is fitted to", type=int)
    _add_showing_default(
        s,
        "--max-cells",
        ANALYSIS["max_cells"],
        "refuse an analysis of more cells (OOD pairs x methods x residualisers, over runs) than this",
        type=_positive_int("--max-cells"),
    )
    o = a.add_argument_group("output")
    o.add_argument(
        "--force",
        action="store_true",
        help="write into --out even inside a workflow's results/<experiment>/, replacing its published tables",
    )
    o.add_argument("--no-plots", action="store_true", help="write the tables only (no figure, no explorer page)")
    o.add_argument(
        "--all-figures",
        action="store_true",
        help="draw the per-model heatmaps, their grid and the scatter grids (by default left out with over "
        f"{analysis_set.LEGIBLE_TESTSETS} OOD testsets and several models)",
    )
    o.add_argument(
        "--workers",
        type=_positive_int("--workers"),
        metavar="N",
        help="processes for the runs and figures (default: 2, or 1 on one core); the tables do not depend on it",
    )
    _add_showing_default(
        o,
        "--forest-max",
        across_models.FOREST_CAP,
        "forest plots per in-domain set at most (those whose verdicts say most); 0: none",
        type=int,
    )
    o.add_argument(
        "--forest-pairs",
        nargs="+",
        metavar="X+Y",
        help="draw the forest plots of these OOD pairs (X+Y) instead of choosing",
    )
    o.add_argument("--plot-method", metavar="METHOD", help="method the heatmaps show (default: the first)")
    o.add_argument("--plot-residualiser", metavar="NAME", help="residualiser the heatmaps show (default: the first)")
    o.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    a.add_argument_group("other").add_argument("-h", "--help", action="help", help="show this help message and exit")


log = logging.getLogger("oodcorr")
_NOT_RECORDED = ("argv", "from_settings", "command")


def _from_settings(args) -> argparse.Namespace:
    """``args`` for ``--from SETTINGS``: the flags it records (its inputs checked to be the bytes it read), with
    --out, --force, --workers and -q as given."""
    defaults = vars(build_parser(["analyse"]).parse_args(["analyse"]))
    recordable = {k: v for k, v in defaults.items() if k not in _NOT_RECORDED}
    beside = ("out", "force", "workers", "quiet")  # where and how to write: the analysis is the one recorded
    given = [k for k, v in recordable.items() if k not in beside and getattr(args, k) != v]
    if given:
        flags = sorted("INPUT" if k == "table" else "--" + k.replace("_", "-") for k in given)
        raise DataError(
            f"--from reruns the analysis its settings.json records; {', '.join(flags)} given beside it would "
            "change that: give only --out, --force, --workers or -q with --from"
        )
    path = args.from_settings
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        recorded = doc["command"]["args"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"--from {path}: not the settings.json of an oodcorr analyse that records its command ({e}); "
            "give the settings.json an analysis wrote"
        ) from None
    for item in doc.get("inputs", []):
        if doc.get("format") != "lm-eval" and (
            not Path(item["path"]).is_file() or sha256_file(item["path"]) != item["sha256"]
        ):
            raise DataError(
                f"--from {path}: the input {item['path']} is missing or not the bytes analysed then (sha256 "
                f"{item['sha256'][:12]}...)"
            )
    unknown = sorted(set(recorded) - set(recordable))
    if unknown:
        raise DataError(f"--from {path}: records flags this version of oodcorr analyse lacks: {unknown}")
    ns = argparse.Namespace(**{**recordable, **recorded})
    for k in beside:
        if getattr(args, k) != defaults[k]:
            setattr(ns, k, getattr(args, k))
    ns.argv, ns.from_settings = args.argv, path
    return ns


def run(args) -> int:
    if args.from_settings:
        args = _from_settings(args)
    if not args.in_domain:
        raise DataError("--in-domain: name the in-domain testset (a column of a wide table, a testset of a long one)")
    args.table = [os.path.abspath(f) for f in input_files(args.table, args.format)]
    if args.examples:
        args.examples = os.path.abspath(args.examples)
    out = Path(args.out or "analysis")
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: is an existing file; give a folder (it is created if missing)")
    experiment = experiment_folder(out)
    if experiment is not None and not args.force:
        raise DataError(
            f"--out {out}: is inside the experiment folder {experiment}, whose tables and figures the workflow "
            "publishes. Give another --out (e.g. --out my-analysis), or pass --force to replace them there"
        )
    with contextlib.ExitStack() as held:
        if experiment is not None:  # --force: not while a run of the workflow writes that experiment
            held.enter_context(hold(experiment, EXPERIMENT, extra={"config": f"oodcorr analyse --out {out}"}))
        return _analyse_into(args, out, out_record.snapshot(out))


def _analyse_into(args, out: Path, before: dict) -> int:
    command = {"argv": list(args.argv), "args": {k: v for k, v in vars(args).items() if k not in _NOT_RECORDED}}
    if args.format == "lm-eval":
        long, examples, info, pool_by, digest, task_groups = read_lmeval(args)
        inputs = [{"path": args.table[0], "sha256": digest}]
    else:
        task_groups = None
        if args.tasks:
            raise DataError(
                "--tasks: reads lm-evaluation-harness results (--format lm-eval); for a table, --testsets and "
                "--exclude choose the testsets"
            )
        long, examples, info, pool_by = read_scores(args)
        inputs = [{"path": f, "sha256": sha256_file(f)} for f in args.table]
    source = args.table[0] if len(args.table) == 1 else f"{len(args.table)} files in {Path(args.table[0]).parent}"
    given = {f.name: getattr(args, f.name) for f in fields(Options) if hasattr(args, f.name)}  # a flag per field
    given.update(methods=tuple(args.methods), residualisers=tuple(args.residualisers), pool_by=pool_by)
    opts = Options(
        **given,
        step0_check=not args.no_step0_check,
        gam=GamSettings(n_splines=args.gam_n_splines, min_points=args.gam_min_points),
    )
    check_analysis_size(long, opts.methods, opts.residualisers, args.max_cells, source)
    if not args.no_plots:
        analysis_set.check_figure_names(long, source)
    task_groups = parse_groups(args.group, task_groups)
    workers = args.workers or analysis_set.default_workers()
    pc = analyse(long, opts, examples, run_info=info, workers=workers, task_groups=task_groups)
    agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    settings = {
        "inputs": inputs,
        "format": args.format,
        "unit": "step" if args.format == "lm-eval" else args.unit,
        "metric": metric_flag(args.metric, args.format)[0],
        "in_domain": args.in_domain,
        "options": opts.describe(),
        "command": command,  # every flag as given: --from reruns it
        # never part of the results: a new commit changes none
        "provenance": table_provenance(inputs[0]["path"], inputs[0]["sha256"]),
    }
    method = args.plot_method or opts.methods[0]
    res = args.plot_residualiser or opts.residualisers[0]
    if not args.no_plots and (method not in opts.methods or res not in opts.residualisers):
        raise ValueError(f"--plot-method/--plot-residualiser ({method}, {res}) must be among the ones analysed")
    rows = agree.astype(object).where(agree.notna(), "").astype(str).to_dict("records")
    choice = pool = None
    if not args.no_plots:
        choice = analysis_set.choose(
            pc, agree, long, out, method, res, args.forest_max, args.forest_pairs, args.all_figures
        )
    lines = answer_lines(
        rows, method, res, out, consensus_sets=choice.consensus_sets if choice else [], file_name=analysis_set.safe_name
    )
    if choice is not None:  # the page and the figures in other processes, while this one writes the tables
        title = f"oodcorr: {Path(source).name}, in-domain {args.in_domain}"
        page = analysis_set.explorer_page(out, title, {"input": source, **opts.describe()}, lines, (method, res))
        held = dict(pc=pc, agree=agree, agreement=agree, long=long, opts=opts)
        pool = analysis_set.FigurePool([page, *choice.figures], workers, **held)
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
