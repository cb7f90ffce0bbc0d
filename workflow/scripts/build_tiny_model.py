"""Rule build_tiny_model: tokenizer + small causal LM + short pretraining, saved locally."""

from pathlib import Path

from oodcorr.launch.runtime import start_job
from oodcorr.modeling.tiny import build_pretrained

sm = snakemake  # noqa: F821
start_job(sm)
corpus = Path(sm.input.corpus).read_text(encoding="utf-8").splitlines()
spec = dict(sm.params.spec, threads=sm.threads)
build_pretrained(sm.wildcards.model, spec, corpus, Path(sm.output[0]), int(sm.params.seed))
