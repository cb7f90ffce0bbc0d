"""Rule series_checkpoint: one given checkpoint's manifest (its location; a local one's files and sha256s)."""

from oodcorr.jobs.series_checkpoint import write_manifest
from oodcorr.launch.runtime import start_job

sm = snakemake  # noqa: F821
start_job(sm)
job = sm.params.job
doc = write_manifest(
    sm.output[0],
    model=job["model"],
    x=int(sm.wildcards.step),
    x_unit=job["x_unit"],
    checkpoint=job["checkpoint"],
    entry=job["entry"],
)
print({"model": doc["model"], job["x_unit"]: doc["step"], "source": doc["source"], "files": len(doc["files"])})
