"""The flags of ``oodcorr analyse`` (:mod:`.analyse`): its parser, help and examples."""

from __future__ import annotations

import argparse

from ..analysis import Options
from ..analysis.across.multitest import CORRECTIONS
from ..analysis.across.pooling import TWO_RUNS
from ..analysis.cell.correlate import METHODS
from ..analysis.cell.inference import INFERENCES
from ..analysis.cell.resample import INTERVALS
from ..analysis.cell.residualise import RESIDUALISERS
from ..analysis.readers import tables
from ..analysis.readers.lmeval_files import MAX_FILES, MAX_RESULTS_BYTES
from ..core.defaults import ANALYSIS
from ..jobs import answer_figures, figure_set
from .args import add_showing_default, block_length, positive_int

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
  settings.json             the command, every flag and the settings used, and each input's sha256
                            (lm-eval: of the files read): --from reruns it
  .oodcorr-analyse.json     what this analysis wrote: the next analysis into --out removes what of it
                            that one does not write again (as written; files changed since, or not
                            written by an analysis, are left alone and named)

examples:
  oodcorr analyse results/default/scores.csv --in-domain synth-test --model model --run run_id
  oodcorr analyse accuracies_by_run.csv --format wide --unit Run --in-domain "MNLI dev acc."
  oodcorr analyse mixed.csv --format wide --in-domain mnli --metric loglik=loglik
  oodcorr analyse 'wandb/*.csv' --format wide --in-domain eval/c4_en/loss --testsets 'eval/downstream/*' \
      --metric '*_soft=loglik'   # W&B exports, one file per run: the unit _step found, metrics by name
  oodcorr analyse --from analysis/settings.json --out analysis-again   # rerun what settings.json records
  oodcorr analyse scores.csv.gz --encoding latin-1 --in-domain mnli   # compressed, Latin-1 text
  oodcorr analyse results/scores.csv --in-domain mnli --residualisers gam linear --pool-by n_train
  oodcorr analyse lm-eval-out --format lm-eval --in-domain lambada_openai --tasks arc_easy,piqa,sciq
  oodcorr analyse pythia/evals/pythia-v1 --format lm-eval --in-domain lambada_openai \
      --path-pattern '{model}/zero-shot/*_step{step}.json' --tasks arc_easy,piqa,sciq,winogrande

Rows whose unit label is a summary statistic (Mean, Standard deviation, Minimum,
Maximum, ...) and empty rows are excluded with a logged warning naming each line.
"""


def add_parser(sub, help: str) -> None:
    d = Options()
    a = sub.add_parser(
        "analyse",
        help=help,
        description="Partial correlations between every pair of OOD testsets, in-domain score regressed "
        "out, with intervals and p-values that allow for autocorrelated checkpoints (one "
        "procedure, so they agree), multiple-comparison correction, pooling over runs as a "
        "random-effects meta-analysis, tests of heterogeneity and sign reversal across models, "
        "residualiser and step-0 checks, and plots. The first group of flags is all most analyses need "
        "(docs/your-own-table.md).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,  # -h goes last, in its own group (below): --help shows the essentials first
    )
    g = a.add_argument_group("the essentials")
    g.add_argument(
        "table",
        nargs="*",
        metavar="INPUT",
        help="the scores: a table (.csv, .tsv or .parquet), several (each file a run), or a glob such as "
        "'exports/*.csv'; with --format lm-eval, a folder of lm-evaluation-harness results",
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
        help="long: one row per unit x testset; wide: one row per unit, one column per testset (a tracker's "
        "export); lm-eval: a folder of lm-evaluation-harness results files (default: long)",
    )
    g.add_argument(
        "--unit",
        metavar="COLUMN",
        help="column with the unit of observation, e.g. the training step or a run label (default: 'step', "
        f"else the one of {', '.join(tables.UNIT_COLUMNS[1:])} the table has). Numeric units are ordered "
        "(blocks of consecutive units are resampled); other units are exchangeable",
    )
    g.add_argument(
        "--testsets",
        nargs="+",
        metavar="NAME",
        help="analyse only these OOD testsets: names or shell-style globs (case-sensitive; quote them), e.g. "
        "'eval/downstream/*'",
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
        help="what the scores are (repeatable). Long: the score column, named after its metric (default: "
        "accuracy; the workflow's table also has macro_f1, ece, ...), or COLUMN=METRIC. Wide: COLUMN=METRIC "
        "for columns (globs allowed, e.g. '*_soft=loglik'), METRIC for the rest; by default a column's metric is "
        "what its name says (*_acc, *len_norm a share; *loss, *bpb, *ppl any number or not negative; said on the "
        "console), else accuracy. Each is checked against its metric's range, each column on its own scale "
        "(shares or percentages). lm-eval: the metric analysed (default: acc; NAME,FILTER where a task has "
        "several filters)",
    )
    g.add_argument(
        "--path-pattern",
        metavar="PATTERN",
        help="where each file's path gives its model and run ({model}, {run}; lm-eval: also {step}); * any text "
        "within a name, **/ any folders; e.g. '{model}/{run}.csv' or, lm-eval, '{model}/zero-shot/*_step{step}.json'",
    )
    g.add_argument("--out", metavar="DIR", help="output folder (default: ./analysis)")
    g.add_argument(
        "--from",
        dest="from_settings",
        metavar="SETTINGS",
        help="rerun the analysis a settings.json records (its input and every flag; the input must be as it was), "
        "into --out if given, else into the folder it names",
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
        help="column naming the run within a model (default: 'run_id' or 'run' if present, else one run, or with "
        "several files each file's name)",
    )
    g.add_argument(
        "--model-name",
        metavar="NAME",
        help="model name when there is no model column (default: the table's file name; several files: their folder's)",
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
        "(docs/measurement.md#scores-as-measurements), and the example-level bootstrap runs",
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
        "--tasks",
        metavar="T1,T2,...",
        help="read only these tasks (comma-separated; the in-domain task is always read); default: every task "
        "that has the metric",
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
    a.add_argument_group("other").add_argument("-h", "--help", action="help", help="show this help message and exit")
