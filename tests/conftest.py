"""Fixtures and test-session settings only; names tests import live in tests/helpers.py."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the experiment trackers (finetune.report_to) stay on this machine whatever the developer's shell
# says: W&B offline, MLflow to the experiment folder's file store (oodcorr.core.trackers)
for _var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "WANDB_API_KEY", "WANDB_BASE_URL"):
    os.environ.pop(_var, None)
for _var in ("WANDB_PROJECT", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_JOB_TYPE", "WANDB_TAGS", "WANDB_ENTITY"):
    os.environ.pop(_var, None)
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")

# Property-based tests (tests/jobs/test_prepare_dataset_fuzz.py): a short, repeatable run in `make test` ("quick": the
# same examples every time), a long random one in `make fuzz` (--hypothesis-profile=fuzz). No
# deadline: other sessions share the CPU, and a slow example is not a failure.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "quick",
    max_examples=60,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("OODCORR_FUZZ_EXAMPLES", "5000")),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("quick")

from helpers import LONGEST_FIRST, PRECIOUS, TINY_CONFIGS  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """The files of LONGEST_FIRST first, in that order; every file's tests in their own order. A test
    that uses the real SLURM test cluster (the ``cluster`` fixture) is marked ``slurm_cluster``."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm_cluster)
    rank = {path: k for k, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def corpus():
    from oodcorr.modeling.synthetic import pretraining_corpus

    return pretraining_corpus(2000, 0)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, corpus):
    """{model_type: directory} of randomly initialised tiny models with trained tokenizers."""
    import torch

    from oodcorr.modeling.tiny import build_model, train_tokenizer

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


@pytest.fixture
def victim(tmp_path):
    """A file outside the run folder that a link in it points at."""
    path = tmp_path / "home" / "thesis.txt"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path
