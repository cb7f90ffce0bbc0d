"""Partial correlations between OOD testsets, in-domain score regressed out.

For one run, each unit (checkpoint) has an in-domain score z and OOD scores x, y,
... For every pair (x, y) a residualiser removes what z (and optionally the
training step) explains from x and from y; the correlation of the residuals is
the partial correlation. Degenerate cells are NaN with the reason in ``note``.

Modules: :mod:`.residualise` (linear, GAM), :mod:`.correlate` (methods, one pair),
:mod:`.resample` (block bootstrap, block permutation), :mod:`.multitest` (Holm,
BH), :mod:`.pooling` (runs -> model, agreement across models), :mod:`.tables`
(reading long/wide tables, summary rows), :mod:`.pipeline` (everything together).
"""
from .correlate import METHODS, corr, partial_corr, residual_pair
from .multitest import adjust, bh, holm
from .pipeline import CANON, COLUMNS, Options, analyse, analyse_run
from .pooling import agreement, fisher_mean, pool_runs
from .resample import auto_block_length, block_permutation_p, bootstrap_ci, moving_block_indices
from .residualise import RESIDUALISERS, Degenerate, GamSettings

__all__ = ["METHODS", "RESIDUALISERS", "CANON", "COLUMNS", "Degenerate", "GamSettings", "Options", "adjust",
           "agreement", "analyse", "analyse_run", "auto_block_length", "bh", "block_permutation_p",
           "bootstrap_ci", "corr", "fisher_mean", "holm", "moving_block_indices", "partial_corr",
           "pool_runs", "residual_pair"]
