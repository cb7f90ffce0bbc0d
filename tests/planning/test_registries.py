"""The registries in resources/ state shared parts once (YAML anchors and `<<:` merge keys).

The rewrite must change no entry: every registry file parses, through the loader's own YAML
reader, to exactly the entries it had when it wrote everything out (BEFORE, the last commit
before the anchors), and an experiment resolved against the old and the new files gives every
dataset the same params. When a registry's content changes on purpose, move BEFORE to that
commit (or delete this test once the anchored form is the only one anyone remembers).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from oodcorr.core.yaml_files import load_yaml
from oodcorr.planning.config import Experiment

from helpers import REPO

BEFORE = "272e8f74a22326679d3942a6f170e706bcd80633"
REGISTRIES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "resources").rglob("*.yaml"))


def _old_text(rel: str) -> str:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = subprocess.run(["git", "show", f"{BEFORE}:{rel}"], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{BEFORE[:7]} is not in this clone's history (shallow clone?): {r.stderr.strip()}")
    return r.stdout


def _entries(doc):
    return doc.get("datasets", doc) if isinstance(doc, dict) and "datasets" in doc else doc


def _no_merge_keys(obj) -> bool:
    if isinstance(obj, dict):
        return "<<" not in obj and all(_no_merge_keys(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_no_merge_keys(v) for v in obj)
    return True


def test_registries_are_the_ones_this_test_knows():
    assert REGISTRIES == [
        "resources/datasets/nli-shared.yaml",
        "resources/datasets/nli.yaml",
        "resources/datasets/synthetic.yaml",
        "resources/label_modes.yaml",
    ]


@pytest.mark.parametrize("rel", REGISTRIES)
def test_every_entry_parses_as_it_was_written_out(rel, tmp_path):
    old_file = tmp_path / "old.yaml"
    old_file.write_text(_old_text(rel))
    old, new = load_yaml(old_file), load_yaml(REPO / rel)
    # every entry written out then parses as it did; entries added since (issue 46's planted pair) are new
    assert {k: v for k, v in _entries(new).items() if k in _entries(old)} == _entries(old)
    assert _no_merge_keys(new)
    # the anchors block is the only thing added, and only where the loader reads `datasets:` alone
    assert set(new) - set(old) <= ({"anchors"} if "datasets" in old else set())


def test_an_experiment_resolves_every_dataset_the_same_from_the_old_and_the_new_files(tmp_path):
    for rel in REGISTRIES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(_old_text(rel))
    # the rest of the workflow folder as it is now: only the registries differ
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config/schema.yaml", tmp_path / "config/schema.yaml")

    def experiment(basedir):
        cfg = {
            "registries": [
                "resources/datasets/synthetic.yaml",
                "resources/datasets/nli.yaml",
                "resources/datasets/nli-shared.yaml",
            ],
            "datasets": {},
            "label_mode": "binary",
            "in_domain": [{"name": "snli", "train": "snli-train", "test": "snli"}],
            "ood_testsets": ["mnli", "scitail", "rte", "hans", "anli", "wnli", "paws", "synth-overlap"],
            "models": [{"name": "m", "path": "/nonexistent", "method": "head"}],
            "prompt": {"template": "{premise} {hypothesis}", "verbalisers": {}},
            "finetune": {
                "n_train": [8],
                "seeds": [0],
                "max_steps": 4,
                "batch_size": 2,
                "learning_rate": 1e-3,
                "checkpoints": {"every": 2},
            },
        }
        return Experiment(cfg, basedir)

    old, new = experiment(tmp_path), experiment(REPO)
    assert set(new.datasets) >= set(old.datasets) and len(old.datasets) == 23
    for name in old.datasets:
        assert new.dataset_params(name) == old.dataset_params(name), name
        assert new.dataset(name)["description"] == old.dataset(name)["description"], name
    assert new.label_mode == old.label_mode
