"""Rules accuracy_table and training_loss: what the report shows beyond the analysis figures."""

import pandas as pd

from oodcorr.core.records import seal
from oodcorr.jobs import plots
from oodcorr.jobs.aggregate import write_accuracy
from oodcorr.launch.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
if sm.rule == "accuracy_table":
    print(write_accuracy(pd.read_parquet(sm.input[0]), sm.output.html, sm.output.csv, sm.config["experiment"]))
else:
    print(plots.training_loss_curves(list(sm.input), sm.wildcards.model, sm.output[0]))
seal(sm.output)  # what publishing checks the staged files against
