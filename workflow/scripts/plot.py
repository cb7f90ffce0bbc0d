"""Rules consensus_heatmap, forest_plots, heatmap, heatmap_grid, learning_curves, scatter: one figure each."""

from oodcorr.analysis import Options
from oodcorr.analysis.readers.workflow_scores import from_scores
from oodcorr.core.errors import ResultError
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import read_analysis_table, read_scores
from oodcorr.jobs.figures.analysis_set import draw
from oodcorr.launch.runtime import refuse, start_job
from oodcorr.planning.config import analysis_options

sm = snakemake  # noqa: F821
start_job(sm)
kind = sm.params.kind
# the heatmap rules pass no params.analysis: the (validated) config's analysis section is the same
opts = Options.from_mapping(getattr(sm.params, "analysis", None) or analysis_options(sm.config.get("analysis", {})))
try:  # a staged table cut short or changed since its job wrote it: named, with the way out
    if kind == "forest":
        tables = dict(agree=read_analysis_table(sm.input.agreement), pc=read_analysis_table(sm.input.pairs))
    elif kind == "consensus_heatmap":
        tables = dict(agree=read_analysis_table(sm.input[0]))
    elif kind in ("heatmap", "heatmap_grid"):
        tables = dict(pc=read_analysis_table(sm.input[0]))
    else:
        tables = dict(long=from_scores(read_scores(sm.input[0]), sm.params.score)[0])
except ResultError as e:
    refuse(e)
if kind == "consensus_heatmap":
    cells = dict(method=sm.params.method, residualiser=sm.params.residualiser)
    print(draw(kind, sm.output[0], opts, tables, in_domain=sm.wildcards.indomain, **cells))
elif kind == "forest":
    cells = dict(method=sm.params.method, residualiser=sm.params.residualiser)
    for png, (dom, x, y) in zip(sm.output, sm.params.pairs, strict=True):
        print(png, draw(kind, png, opts, tables, in_domain=dom, pair=(x, y), **cells))
elif kind in ("heatmap", "heatmap_grid"):
    cells = dict(method=sm.params.method, residualiser=sm.params.residualiser)
    print(draw(kind, sm.output[0], opts, tables, model=getattr(sm.wildcards, "model", None), **cells))
else:
    labels = dict(labels=(sm.params.x_label, sm.params.score)) if kind == "learning_curves" else {}
    print(draw(kind, sm.output[0], opts, tables, model=sm.wildcards.model, **labels))
seal(sm.output)  # what publishing checks the staged file against
