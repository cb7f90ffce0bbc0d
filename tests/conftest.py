"""Shared fixtures: tiny tokenizers and models built in a second, no download."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Property-based tests (tests/test_fuzz.py): a short, repeatable run in `make test` ("quick": the
# same examples every time), a long random one in `make fuzz` (--hypothesis-profile=fuzz). No
# deadline: other sessions share the CPU, and a slow example is not a failure.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("quick", max_examples=60, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=int(os.environ.get("OODCORR_FUZZ_EXAMPLES", "5000")),
                          deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("quick")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def smk(workdir, configfile, *args, timeout=900, env=None):
    """Run the real workflow (this checkout's Snakefile) in ``workdir`` with ``configfile``."""
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile", str(configfile),
           "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})

LABELS = ["entailment", "non-entailment"]


def label_mode(name: str = "binary") -> dict:
    """A label mode from resources/label_modes.yaml, as the workflow passes it to the package."""
    import yaml

    modes = yaml.safe_load((REPO / "resources" / "label_modes.yaml").read_text())
    return dict(modes[name], name=name)


BINARY = label_mode("binary")
PROMPT = {"template": "{premise} Question: {hypothesis} Yes or No?",
          "verbalisers": {"entailment": " Yes", "non-entailment": " No"}}

TINY_CONFIGS = {
    "opt": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "ffn_dim": 64,
            "word_embed_proj_dim": 32, "max_position_embeddings": 128},
    "olmo2": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
              "max_position_embeddings": 128},
}


@pytest.fixture(scope="session")
def corpus():
    from oodcorr.synthetic import pretraining_corpus

    return pretraining_corpus(2000, 0)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, corpus):
    """{model_type: directory} of randomly initialised tiny models with trained tokenizers."""
    import torch

    from oodcorr.tiny import build_model, train_tokenizer

    out = {}
    for mt, cfg in TINY_CONFIGS.items():
        d = tmp_path_factory.mktemp(f"tiny-{mt}")
        tok = train_tokenizer(corpus, 400, d)
        model = build_model({"model_type": mt, "config": cfg}, tok, seed=0)
        with torch.no_grad():  # make logits vary visibly between positions
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        model.save_pretrained(d)
        out[mt] = d
    return out
