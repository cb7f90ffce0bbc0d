"""Rules accuracy_table and training_loss: what the report shows beyond the analysis figures."""

from oodcorr.core.errors import ResultError
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import read_scores, write_accuracy
from oodcorr.jobs.figures import curves
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
try:  # a damaged scores table or run manifest: named, with the way out, as the log's last line
    if sm.rule == "accuracy_table":
        print(write_accuracy(read_scores(sm.input[0]), sm.output.html, sm.output.csv, sm.config["experiment"]))
    else:
        print(curves.training_loss_curves(list(sm.input), sm.wildcards.model, sm.output[0]))
except ResultError as e:
    refuse(e)
seal(sm.output)  # what publishing checks the staged files against
