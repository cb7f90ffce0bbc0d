"""Rule aggregate_scores: every evaluation's record -> results/<experiment>/.staging/scores.{parquet,csv}."""

from oodcorr.core.errors import DataError, ResultError, WriteFailed
from oodcorr.core.records import seal
from oodcorr.jobs.aggregate import collect, write_scores
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
try:
    # every record is checked against its place, and its data against the testset as prepared now
    df = collect(list(sm.input), data=sm.params.data, places=sm.params.places)
except (ResultError, DataError, WriteFailed) as e:  # the message (file, the way out) is the log's last line
    refuse(e)
write_scores(df, sm.output.parquet, sm.output.csv)
seal(sm.output)  # what publishing checks the staged files against
print(f"{len(df)} rows")
