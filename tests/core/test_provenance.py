"""What made a result (oodcorr.core.provenance): the code's commit, version and interpreters, and the
libraries the jobs recorded; "unknown", never an error, where the code is not a git checkout's."""

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys

from oodcorr import __version__
from oodcorr.core.provenance import NOT_RECORDED, code_provenance, library_versions, scores_provenance

from helpers import REPO

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]


def _provenance_of(package_parent, cwd, env_path=None) -> dict:
    """code_provenance() in a fresh process that imports oodcorr from ``package_parent``."""
    env = {"PYTHONPATH": str(package_parent), "PATH": env_path if env_path is not None else "/usr/bin:/bin"}
    code = "import json; from oodcorr.core.provenance import code_provenance; print(json.dumps(code_provenance()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, check=True)
    return json.loads(out.stdout)


def _copy_package(dest):
    shutil.copytree(REPO / "src/oodcorr", dest / "oodcorr", ignore=shutil.ignore_patterns("__pycache__"))


def test_this_checkout_is_named_by_its_commit():
    p = code_provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert p["git_commit"] == head.stdout.strip() and len(p["git_commit"]) == 40
    assert p["git_dirty"] in (True, False)
    assert p["oodcorr"] == __version__ == "0.1.0"
    assert p["python"] == platform.python_version()
    assert p["snakemake"] == importlib.metadata.version("snakemake")


def test_a_copy_outside_any_checkout_says_unknown(tmp_path):
    _copy_package(tmp_path)
    p = _provenance_of(tmp_path, tmp_path)
    assert (p["git_commit"], p["git_dirty"]) == ("unknown", "unknown")
    assert p["oodcorr"] == __version__


def test_without_git_installed_it_says_unknown(tmp_path):
    # the real checkout, but no git on PATH: no error, "unknown"
    p = _provenance_of(REPO / "src", tmp_path, env_path=str(tmp_path))
    assert (p["git_commit"], p["git_dirty"]) == ("unknown", "unknown")


def test_the_commit_and_dirty_tree_of_the_checkout_the_package_is_tracked_in(tmp_path):
    repo = tmp_path / "other"
    repo.mkdir()
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("venv/\n")
    # installed into an ignored folder of another repository (a venv in a checkout): not its code
    _copy_package(repo / "venv")
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "x"], cwd=repo, check=True)
    assert _provenance_of(repo / "venv", tmp_path)["git_commit"] == "unknown"
    # tracked there: that checkout's commit, and whether its tracked files were edited since
    _copy_package(repo / "src")
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "y"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    p = _provenance_of(repo / "src", tmp_path)
    assert (p["git_commit"], p["git_dirty"]) == (head.stdout.strip(), False)
    (repo / "untracked.txt").write_text("a new file git does not track: the tracked tree is as committed\n")
    assert _provenance_of(repo / "src", tmp_path)["git_dirty"] is False
    (repo / ".gitignore").write_text("venv/\nresults/\n")
    assert _provenance_of(repo / "src", tmp_path)["git_dirty"] is True


def test_library_versions_are_read_without_importing_them():
    code = (
        "import sys, json; from oodcorr.core.provenance import library_versions; "
        "print(json.dumps([library_versions(), library_versions(('no-such-package',)), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO / "src")
    versions, missing, imported = json.loads(out.stdout)
    assert versions == {n: importlib.metadata.version(n) for n in ("torch", "transformers", "peft")}
    assert missing == {"no-such-package": None} and imported is False
    assert library_versions() == versions


def test_the_scores_provenance_counts_evaluations_and_finetuned_checkpoints():
    new = {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2"}
    old_torch = dict(new, torch="2.12.0")
    records = [
        # two testsets of one finetuned checkpoint (trained with torch 2.12), evaluated with 2.13
        {"checkpoint": "ft/checkpoint-4", "libraries": new, "finetune_libraries": old_torch},
        {"checkpoint": "ft/checkpoint-4", "libraries": new, "finetune_libraries": old_torch},
        # a checkpoint whose manifest predates the libraries; an evaluation record that predates them too
        {"checkpoint": "ft/checkpoint-8", "libraries": new, "finetune_libraries": None},
        {"checkpoint": "ft/checkpoint-12"},
        # a series checkpoint: not finetuned here
        {"checkpoint": "hub@rev", "x_unit": "tokens", "libraries": dict(new, peft=None)},
    ]
    got = scores_provenance(records)
    assert got["evaluate"] == {
        "torch": {"2.13.0": 4, NOT_RECORDED: 1},
        "transformers": {"5.24.0": 4, NOT_RECORDED: 1},
        "peft": {"0.21.2": 3, "not installed": 1, NOT_RECORDED: 1},
    }
    assert got["finetune"]["torch"] == {"2.12.0": 1, NOT_RECORDED: 2}
    assert got["finetune"]["peft"] == {"0.21.2": 1, NOT_RECORDED: 2}
    assert scores_provenance([]) == {"evaluate": {}, "finetune": {}, "aggregated_by": code_provenance()}
