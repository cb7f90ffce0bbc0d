"""Partial correlations between OOD testsets, in-domain score regressed out (pandas, numpy, scipy; never
torch; imports only ``core``). One room per concept, each importing only those before it: ``readers`` (the
tables read), ``cell`` (one cell's statistics), ``items`` (item noise), ``across`` (pooling runs and
models, the answer), ``options`` (every setting), ``per_run`` (the partial correlation per run),
``pipeline`` (every run, pooled, corrected and checked; the tables written: ``results``), ``simulate``
(simulated studies) and ``design`` (the power of a design by simulation)."""

from ..core.answer import VERDICTS
from .across.agreement_table import AGREEMENT_COLUMNS, agreement
from .options import Options
from .per_run.cells import partial_corr
from .pipeline import CANON, COLUMNS, analyse

__all__ = [
    "AGREEMENT_COLUMNS",
    "CANON",
    "COLUMNS",
    "VERDICTS",
    "Options",
    "agreement",
    "analyse",
    "partial_corr",
]
