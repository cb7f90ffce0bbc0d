"""Rule publish_results: the staged scores, tables and figures, published as one set.

Each staged file is checked against its seal, the set is built as a new version and switched
into place by one rename (oodcorr.core.published); the record of what was published (each
file's sha256) is the rule's output, written last.
"""

from pathlib import Path

from oodcorr.core.errors import ConfigError, WriteFailed
from oodcorr.core.locks import FolderInUse
from oodcorr.core.published import PublishRefused, describe, publish_set, write_marker
from oodcorr.jobs import tracking
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
root = Path(sm.output[0]).parent  # the record sits in the experiment folder (oodcorr.planning.layout.Paths.published)
names_of, _ = tracking.of_config(sm.config)  # the trackers the answer goes to (finetune.report_to)
try:
    names = tracking.check_for(names_of, root)  # installed and reachable, before anything is published
    # each published path (relative to the experiment folder) and its staged file, in the plan's order
    staged = dict(zip(sm.params.rels, sm.input, strict=True))
    record = publish_set(root, staged, experiment=sm.params.experiment)
except (PublishRefused, FolderInUse, WriteFailed, ConfigError) as e:  # the message (file, way out): the log's last line
    refuse(e)
for note in record["notes"]:
    print(f"oodcorr: {note}")
write_marker(root, record)
print(f"published {len(record['files'])} files: {describe(record)}")
# the answer (agreement.csv, the consensus heatmaps, the explorer page, answer.txt, as published) to
# the experiment trackers finetune.report_to names, once per version of those files
answer = [root / r for r in record["files"] if tracking.is_answer_file(r)]
try:
    for line in tracking.log_answer(root, answer, names):
        print(f"logged to {line}")
except ConfigError as e:
    refuse(e)
