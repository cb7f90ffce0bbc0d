"""Rule heatmap: one PNG per model."""
import pandas as pd

from oodcorr.plots import heatmap
from oodcorr.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
summary = pd.read_csv(sm.input[0], keep_default_na=True)
sel = summary[(summary["method"] == sm.params.method) & (summary["residualiser"] == sm.params.residualiser)]
heatmap(sel, sm.wildcards.model, sm.output[0])
