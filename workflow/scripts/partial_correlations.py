"""Rule partial_correlations: scores table -> per-run pairs and per-model summary."""
import pandas as pd

from oodcorr.analysis import model_summary, run_pairs
from oodcorr.io import atomic_path
from oodcorr.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
pairs = run_pairs(pd.read_parquet(sm.input[0]), sm.params.methods, sm.params.residualisers)
summary = model_summary(pairs)
for df, path in ((pairs, sm.output.pairs), (summary, sm.output.summary)):
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
print(summary.to_string())
