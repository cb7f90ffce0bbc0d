"""The Snakefile reads the embedded default config itself before Snakemake does, so a YAML slip in
an edited config/config.yaml (a tab in the indentation) is named with its file, line and column; and
it checks the room in TMPDIR before Snakemake's scheduler writes there."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from faults import fill, small_filesystem
from helpers import MICRO, REPO, SNAKEMAKE, smk


@pytest.mark.slow
def test_a_tab_in_the_edited_default_config_is_named_with_its_line(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(REPO / "Snakefile", checkout / "Snakefile")
    for d in ("workflow", "config", "src", "resources", "profiles"):
        shutil.copytree(REPO / d, checkout / d, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = checkout / "config" / "config.yaml"
    lines = cfg.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if line.startswith("  ") and ":" in line)  # an indented key
    lines[n] = "\t" + lines[n].lstrip()
    cfg.write_text("\n".join(lines) + "\n")
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(checkout / "Snakefile"), "-d", str(tmp_path / "wd"), "-n", "--cores", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode != 0
    assert f"{cfg}:{n + 1}:" in res.stdout + res.stderr and "never tabs" in res.stdout + res.stderr


@pytest.mark.slow
def test_a_full_tmpdir_stops_the_run_while_planning_with_a_sentence_not_a_scheduler_traceback(tmp_path):
    """A cluster node's small /tmp, full: Snakemake's ILP scheduler wrote its solver's files there once
    jobs were ready and died with `OSError: [Errno 28]` and a traceback through pulp. Now planning
    names the folder and what to do, before any job runs; a dry run only warns."""
    with small_filesystem(tmp_path / "tmp", "256k") as tmp:
        fill(tmp)
        env = {"TMPDIR": str(tmp), "TMP": str(tmp)}
        res = smk(tmp_path / "wd", MICRO, timeout=300, env=env)
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-3000:]
        last = out.strip().splitlines()[-1]
        assert last.startswith(
            f"oodcorr: no room to run: the temp folder of Snakemake's scheduler (TMP, else TMPDIR), {tmp}"
        )
        assert "Traceback" not in out and "pulp/" not in out  # no traceback through pulp's files
        assert not (tmp_path / "wd" / "results" / "micro" / "data").exists()  # no job ran
        dry = smk(tmp_path / "wd", MICRO, "-n", timeout=300, env=env)
        assert dry.returncode == 0 and "oodcorr warning: no room to run: the temp folder" in dry.stderr
