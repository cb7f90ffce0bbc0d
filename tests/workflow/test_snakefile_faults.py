"""The Snakefile reads the embedded default config itself before Snakemake does, so a YAML slip in
an edited config/config.yaml (a tab in the indentation) is named with its file, line and column; and
it checks the room in TMPDIR before Snakemake's scheduler writes there; and when a job stops with a
sentence (a full disk), its handler repeats it as the console's last line, naming the job."""

from __future__ import annotations

import os
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


# ---- a job's refusal reaches the console's last lines, whichever job it was (issue 39) --------------
@pytest.fixture(scope="module")
def run_on_small_disk(tmp_path_factory):
    """The micro experiment run whole with results/ on a tmpfs of its own (a scratch disk that fills)."""
    wd = tmp_path_factory.mktemp("small-disk")
    with small_filesystem(wd / "results", "64m"):
        res = smk(wd, MICRO, timeout=900)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        yield wd


FULL_AT = {  # the job, what makes it run again, and the temporary file it makes just when the disk fills
    "tokenize_testset": ("results/micro/cache/tokenized/micro-opt/synth-negation.pt", ".synth-negation.pt."),
    "aggregate_scores": ("aggregate_scores", ".scores.parquet."),
    "accuracy_table": ("accuracy_table", ".accuracy.html."),
    "publish_results": ("publish_results", ".new-"),
}


@pytest.mark.slow
@pytest.mark.parametrize("rule", list(FULL_AT))
def test_a_full_disk_in_any_job_is_said_in_the_consoles_last_lines_with_the_job_named(rule, run_on_small_disk):
    """The disk fills just as the job writes its output (a real ENOSPC). Its sentence (the folder, what
    to delete) was in the job's log only; the console's last lines said that the run failed and the
    previous results stand. Now they repeat it, naming the job (after them, only Snakemake's own
    closing lines: where its log is, the time taken, that a job failed)."""
    from hooks.sitecustomize import FILL_AT_ENV, PYTHONPATH_ENTRY

    wd = run_on_small_disk
    forced, prefix = FULL_AT[rule]
    env = {
        FILL_AT_ENV: prefix,
        "PYTHONPATH": os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p),
    }
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), "--configfile", str(MICRO), "--cores", "2"]
    try:  # the console as a person sees it: stdout and stderr in the order they were written
        res = subprocess.run(
            [*cmd, "--forcerun", forced],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        for filler in (wd / "results").rglob(".test-filler"):
            filler.unlink()
    out = res.stdout.strip()
    assert res.returncode != 0, out[-3000:]
    said = [line for line in out.splitlines()[-10:] if line.startswith(f"oodcorr: job {rule}")]
    assert len(said) == 1, out[-3000:]
    assert (
        " stopped: " in said[0] and "no room in results/micro" in said[0] and "(its log: results/micro/logs/" in said[0]
    )
    if rule == "tokenize_testset":
        assert said[0].startswith("oodcorr: job tokenize_testset (model=micro-opt, testset=synth-negation) stopped:")
    assert not list((wd / "results").rglob(".*.tmp"))  # and nothing half-written was kept
