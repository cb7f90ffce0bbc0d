"""Rule aggregate_scores: every evaluation's record -> results/<experiment>/.staging/scores.{parquet,csv}."""

import sys

from oodcorr.core.errors import DataError, DiskFull, ResultError
from oodcorr.core.records import seal
from oodcorr.jobs.aggregate import collect, write_scores
from oodcorr.launch.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
try:
    # every record is checked against its place, and its data against the testset as prepared now
    df = collect(list(sm.input), coarse=sm.params.coarse, data=sm.params.data, places=sm.params.places)
except (ResultError, DataError, DiskFull) as e:  # the message (file, the way out) is the log's last line
    sys.exit(f"oodcorr: {e}")
write_scores(df, sm.output.parquet, sm.output.csv)
seal(sm.output)  # what publishing checks the staged files against
print(f"{len(df)} rows")
