"""Partial correlations between OOD testsets, in-domain score regressed out.

For one run, each unit (checkpoint) has an in-domain score z and OOD scores x, y,
... For every pair (x, y) a residualiser removes what z (and optionally the
training step) explains from x and from y; the correlation of the residuals is
the partial correlation. Degenerate cells are NaN with the reason in ``note``.

Modules (imports go down this list, never up; nothing here imports torch or the workflow's modules):
:mod:`.residualise` (linear, GAM, their residual-maker matrices), :mod:`.correlate` (methods, one
pair), :mod:`.resample` (block bootstrap, block permutation: the ``block`` inference),
:mod:`.inference` (effective sample size, the modified t-test and its interval: one procedure per
cell), :mod:`.multitest` (Holm, BH), :mod:`.pooling` (runs -> model as a random-effects
meta-analysis), :mod:`.consensus` (models -> the answer: the consensus across models, heterogeneity,
sign reversal, the verdict), :mod:`.predictive` (where a further model is expected: the prediction
interval, the tolerance bounds ``generalises`` reads), :mod:`.tables` (reading long/wide tables,
summary rows; the range a metric's scores lie in: :mod:`.score_ranges`; the workflow's scores table:
:mod:`.workflow_scores`; the results written and summarised: :mod:`.results`), :mod:`.lmeval` (reading a
folder of lm-evaluation-harness results: its files found and opened with care, :mod:`.lmeval_files`,
one results file read and its scores checked, :mod:`.lmeval_results`, which model, run and step
each is, :mod:`.lmeval_identity`, and their per-sample logs: :mod:`.lmeval_samples`),
:mod:`.options` (every analysis setting),
:mod:`.shared_items` (testsets that share items: a group beside its subtasks), :mod:`.cells` (one
run's cells, :func:`partial_corr`; their example-level bootstrap, :mod:`.example_boot`), :mod:`.pipeline`
(every run, pooled, corrected and checked),
:mod:`.runs` (simulated runs and the calibration loop the tests and
``benchmarks/analysis_coverage.py`` use), :mod:`.stacked` (the per-run procedures on stacks
of simulated runs), :mod:`.power` (the power of each verdict for a grid, by simulated studies
analysed with the procedures above: ``oodcorr design``), :mod:`.items` (the item noise of
its simulated studies and the measured answer through it), :mod:`.pilot` and
:mod:`.pilot_items` (the assumptions of a design, from a pilot's scores and items or the
defaults), :mod:`.report` and :mod:`.sizes` (the design's report, as JSON and
Markdown, and its table of the items each testset needs).
"""

from ..core.answer import VERDICTS
from .across.agreement_table import AGREEMENT_COLUMNS, agreement
from .across.multitest import adjust, bh, holm
from .across.pooling import combine, fisher_mean, pool_runs
from .cell.correlate import METHODS, corr, residual_pair
from .cell.inference import INFERENCES, assess, dependence, effective_n
from .cell.resample import auto_block_length, block_permutation_p, bootstrap_ci, moving_block_indices
from .cell.residualise import RESIDUALISERS, Degenerate, GamSettings
from .options import Options
from .per_run.cells import partial_corr
from .pipeline import CANON, COLUMNS, analyse

__all__ = [
    "AGREEMENT_COLUMNS",
    "CANON",
    "COLUMNS",
    "INFERENCES",
    "METHODS",
    "RESIDUALISERS",
    "VERDICTS",
    "Degenerate",
    "GamSettings",
    "Options",
    "adjust",
    "agreement",
    "analyse",
    "assess",
    "auto_block_length",
    "bh",
    "block_permutation_p",
    "bootstrap_ci",
    "combine",
    "corr",
    "dependence",
    "effective_n",
    "fisher_mean",
    "holm",
    "moving_block_indices",
    "partial_corr",
    "pool_runs",
    "residual_pair",
]
