"""Rule build_tiny_model: tokenizer + small causal LM + short pretraining, saved locally."""

from pathlib import Path

from oodcorr.launch.runtime import setup_logging
from oodcorr.modeling.tiny import build_pretrained

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
corpus = Path(sm.input.corpus).read_text(encoding="utf-8").splitlines()
spec = dict(sm.params.spec, threads=sm.threads)
build_pretrained(sm.wildcards.model, spec, corpus, Path(sm.output[0]), int(sm.params.seed))
