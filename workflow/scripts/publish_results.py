"""Rule publish_results: the staged scores, tables and figures, published as one set.

Each staged file is checked against its seal, the set is built as a new version and switched
into place by one rename (oodcorr.core.published); the record of what was published (each
file's sha256) is the rule's output, written last.
"""

from pathlib import Path

from oodcorr.core.errors import WriteFailed
from oodcorr.core.locks import FolderInUse
from oodcorr.core.published import PublishRefused, describe, publish_set, write_marker
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
root = Path(sm.output[0]).parent  # the record sits in the experiment folder (oodcorr.planning.layout.Paths.published)
try:
    # each published path (relative to the experiment folder) and its staged file, in the plan's order
    staged = dict(zip(sm.params.rels, sm.input, strict=True))
    record = publish_set(root, staged, experiment=sm.params.experiment)
except (PublishRefused, FolderInUse, WriteFailed) as e:  # the message (the file, the way out) is the log's last line
    refuse(e)
for note in record["notes"]:
    print(f"oodcorr: {note}")
write_marker(root, record)
print(f"published {len(record['files'])} files: {describe(record)}")
