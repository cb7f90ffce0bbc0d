"""The Snakefile reads the embedded default config itself before Snakemake does, so a YAML slip in
an edited config/config.yaml (a tab in the indentation) is named with its file, line and column."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from helpers import REPO, SNAKEMAKE


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
