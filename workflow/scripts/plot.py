"""Rules heatmap, heatmap_grid, learning_curves, scatter: one figure each (params.kind)."""

import sys

import pandas as pd

from oodcorr.analysis import Options
from oodcorr.analysis.tables import from_scores
from oodcorr.core.errors import ResultError
from oodcorr.jobs import plots
from oodcorr.jobs.aggregate import read_scores
from oodcorr.launch.runtime import setup_logging
from oodcorr.planning.config import analysis_options

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
kind = sm.params.kind
# the heatmap rules pass no params.analysis: the (validated) config's analysis section is the same
opts = Options.from_mapping(getattr(sm.params, "analysis", None) or analysis_options(sm.config.get("analysis", {})))
if kind in ("heatmap", "heatmap_grid"):
    pc = pd.read_csv(sm.input[0], keep_default_na=False, na_values=[""])
    marks = plots.heatmap_marks(opts)
    if kind == "heatmap":
        print(plots.heatmap(pc, sm.wildcards.model, sm.output[0], sm.params.method, sm.params.residualiser, **marks))
    else:
        print(plots.heatmap_grid(pc, sm.output[0], sm.params.method, sm.params.residualiser, **marks))
else:
    try:
        long, _ = from_scores(read_scores(sm.input[0]), sm.params.score)
    except ResultError as e:
        sys.exit(f"oodcorr: {e}")
    if kind == "learning_curves":
        print(
            plots.learning_curves(
                long, sm.wildcards.model, sm.output[0], x_label=sm.params.x_label, y_label=sm.params.score
            )
        )
    else:
        fits = plots.scatter_fits(opts.residualisers)
        print(plots.scatter(long, sm.wildcards.model, sm.output[0], residualisers=fits, gam_settings=opts.gam))
