"""Rule aggregate_scores: every evaluation's record -> results/<experiment>/scores.{parquet,csv}."""
from oodcorr.aggregate import collect, write_scores
from oodcorr.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
df = collect(list(sm.input), coarse=sm.params.coarse)
write_scores(df, sm.output.parquet, sm.output.csv)
print(f"{len(df)} rows")
