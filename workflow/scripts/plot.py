"""Rules consensus_heatmap, forest_plots, heatmap, heatmap_grid, learning_curves, scatter: one figure each."""

import pandas as pd

from oodcorr.analysis import Options
from oodcorr.analysis.tables import from_scores
from oodcorr.core.errors import ResultError
from oodcorr.core.records import seal
from oodcorr.jobs import plots
from oodcorr.jobs.aggregate import read_scores
from oodcorr.launch.runtime import refuse, start_job
from oodcorr.planning.config import analysis_options

sm = snakemake  # noqa: F821
start_job(sm)
kind = sm.params.kind
# the heatmap rules pass no params.analysis: the (validated) config's analysis section is the same
opts = Options.from_mapping(getattr(sm.params, "analysis", None) or analysis_options(sm.config.get("analysis", {})))
if kind == "consensus_heatmap":
    agree = pd.read_csv(sm.input[0], keep_default_na=False, na_values=[""])
    cells = dict(agree=agree, method=sm.params.method, residualiser=sm.params.residualiser)
    print(plots.draw(kind, sm.output[0], opts, in_domain=sm.wildcards.indomain, **cells))
elif kind == "forest":
    agree = pd.read_csv(sm.input.agreement, keep_default_na=False, na_values=[""])
    pc = pd.read_csv(sm.input.pairs, keep_default_na=False, na_values=[""])
    cells = dict(agree=agree, pc=pc, method=sm.params.method, residualiser=sm.params.residualiser)
    for png, (dom, x, y) in zip(sm.output, sm.params.pairs, strict=True):
        print(png, plots.draw(kind, png, opts, in_domain=dom, pair=(x, y), **cells))
elif kind in ("heatmap", "heatmap_grid"):
    pc = pd.read_csv(sm.input[0], keep_default_na=False, na_values=[""])
    cells = dict(pc=pc, method=sm.params.method, residualiser=sm.params.residualiser)
    print(plots.draw(kind, sm.output[0], opts, model=getattr(sm.wildcards, "model", None), **cells))
else:
    try:
        long, _ = from_scores(read_scores(sm.input[0]), sm.params.score)
    except ResultError as e:
        refuse(e)
    labels = dict(x_label=sm.params.x_label, y_label=sm.params.score) if kind == "learning_curves" else {}
    print(plots.draw(kind, sm.output[0], opts, long=long, model=sm.wildcards.model, **labels))
seal(sm.output)  # what publishing checks the staged file against
