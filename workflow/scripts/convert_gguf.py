"""Rule convert_gguf: a GGUF model file converted once into a safetensors folder (oodcorr.modeling.gguf_conversion)."""

import logging

from oodcorr.launch.runtime import start_job
from oodcorr.modeling.gguf_conversion import convert

sm = snakemake  # noqa: F821
start_job(sm)
record = convert(dict(sm.params.spec), sm.output[0], threads=sm.threads)
logging.getLogger(__name__).info("converted: %s", record)
