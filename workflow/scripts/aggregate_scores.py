"""Rule aggregate_scores: every evaluation's record -> results/<experiment>/.staging/scores.{parquet,csv}, and
what made them, provenance.json; then each checkpoint's scores to the experiment trackers
finetune.report_to names (oodcorr.jobs.tracking)."""

from pathlib import Path

from oodcorr.core.atomic_write import write_json_atomic
from oodcorr.core.errors import ConfigError, DataError, ResultError, WriteFailed
from oodcorr.core.provenance import scores_provenance
from oodcorr.core.seals import seal
from oodcorr.jobs import tracking
from oodcorr.jobs.aggregate_scores import collect, write_scores
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
root = Path(sm.output.parquet).parents[1]  # results/<experiment>/.staging/scores.parquet
# the trackers, from the config (editing finetune.report_to reruns nothing), checked before any work
names_of, series = tracking.of_config(sm.config)
try:
    tracking.check_for(names_of, root)
    # every record is checked against its place, and its data against the testset as prepared now
    records = []
    df = collect(list(sm.input), data=sm.params.data, places=sm.params.places, keep_records=records)
except (ConfigError, ResultError, DataError, WriteFailed) as e:  # the message (file, the way out): the log's last line
    refuse(e)
write_scores(df, sm.output.parquet, sm.output.csv)
# the libraries the finetunes and evaluations recorded, and this code (never a param: a new commit reruns nothing)
write_json_atomic(sm.output.provenance, scores_provenance(records))
seal(sm.output)  # what publishing checks the staged files against
print(f"{len(df)} rows")
try:
    for line in tracking.log_scores(df, root, names_of, series):
        print(f"logged to {line}")
except ConfigError as e:
    refuse(e)
