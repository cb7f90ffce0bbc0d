"""Rule prepare_dataset: registry entry -> normalised JSONL + provenance JSON."""

from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
from oodcorr.jobs.prepare_dataset import prepare
from oodcorr.launch.runtime import start_job

sm = snakemake  # noqa: F821
start_job(sm)
spec = dict(sm.params.spec)
if len(sm.input):  # a local file, resolved by the workflow
    spec["path"] = sm.input[0]
records, provenance = prepare(sm.wildcards.dataset, spec, sm.params.mode)
if "warning" in provenance:
    print("WARNING:", provenance["warning"])
write_jsonl_atomic(sm.output.data, records)
write_json_atomic(sm.output.meta, provenance)
print(provenance)
