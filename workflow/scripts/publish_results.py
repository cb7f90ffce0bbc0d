"""Rule publish_results: the staged scores, tables and figures, copied into place as one set."""

import sys

from oodcorr.core.io import publish
from oodcorr.launch.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
pairs = list(zip(sm.input, sm.output, strict=True))
try:
    publish(pairs)
except ValueError as e:
    sys.exit(f"oodcorr: {e}")
print(f"published {len(pairs)} files")
