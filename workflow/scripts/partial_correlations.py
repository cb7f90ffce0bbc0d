"""Rule partial_correlations: scores + per-example predictions -> pairs table, agreement table."""

import logging
from pathlib import Path

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.readers.workflow_scores import example_bootstrap_applies, examples_from_predictions, from_scores
from oodcorr.analysis.results import summarise, write_tables
from oodcorr.core.errors import DataError, ResultError, WriteFailed
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import read_scores
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
log = logging.getLogger("partial_correlations")
opts = Options.from_mapping(sm.params.analysis)
score = sm.params.score  # analysis.score: the metric column analysed
# per-example correctness gives accuracy only: its item noise (every cell's reliabilities and the
# tasks' correlation) and the example-level bootstrap
by_example = example_bootstrap_applies(score)
try:
    scores = read_scores(sm.input.scores)
    long, info = from_scores(scores, score)
    examples = examples_from_predictions(scores) if by_example else None
except (ResultError, DataError, WriteFailed) as e:  # a damaged scores table or predictions file: named, the way out
    refuse(e)
# n_train and seed beside each run's rows; runs are pooled within opts.pool_by (n_train by default)
pc = analyse(long, opts, examples, ordered=True, run_info=info, workers=sm.threads)  # runs in parallel processes
if not by_example:
    pc["ex_note"] = f"example-level bootstrap resamples correctness (accuracy); not run for analysis.score {score}"
log.info("score analysed: %s", score)
agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
write_tables(pc, agree, Path(sm.output.pairs).parent)
seal(sm.output)  # what publishing checks the staged files against
summarise(pc, agree, opts, log)
