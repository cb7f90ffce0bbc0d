"""Two runs of one experiment: the second is refused while planning, before any job of it starts,
naming the holder (even with --no-hooks, which skips onstart, and whichever run reaches its first
job first); a dry run is never refused and takes no lock."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from oodcorr.launch.experiment import writes

from faults import start_stopped, wait_for
from helpers import REPO, smk

# another run of the experiment: it holds the lock until it is killed
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from oodcorr.core.locks import EXPERIMENT, hold
    with hold(sys.argv[1], EXPERIMENT, extra={"config": "other.yaml"}):
        Path(sys.argv[2]).write_text("held")
        while True:
            time.sleep(1)
    """
)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["snakemake"], True),
        (["snakemake", "--cores", "2", "--no-hooks"], True),
        (["snakemake", "-j1", "--until", "finetune"], True),
        (["snakemake", "-n"], False),
        (["snakemake", "-np"], False),
        (["snakemake", "--dry-run"], False),
        (["snakemake", "--report", "r.html"], False),
        (["snakemake", "--unlock"], False),
        (["snakemake", "--summary"], False),
    ],
)
def test_which_snakemake_commands_may_write(argv, expected):
    assert writes(argv) is expected


@pytest.mark.slow
def test_a_second_run_is_refused_while_planning_before_any_job_naming_the_holder(tmp_path):
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg_path = tmp_path / "micro.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    root = tmp_path / "results" / "micro"
    held = tmp_path / "held"
    holder = start_stopped(HOLDER, str(root), str(held))
    try:
        wait_for(held, holder, timeout=60)
        # --no-hooks: Snakemake skips onstart; --until bounds what a run that is not refused would do
        res = smk(tmp_path, cfg_path, "--no-hooks", "--until", "prepare_dataset", timeout=600)
        assert res.returncode != 0
        assert "is in use by another run of the workflow" in res.stderr and f"PID {holder.pid}" in res.stderr
        assert "other.yaml" in res.stderr
        # before any job: nothing of the experiment was made (its data, logs) and no job was started
        assert sorted(p.name for p in root.iterdir()) == ["experiment.lock"]
        assert "Select jobs to execute" not in res.stdout + res.stderr
        # a dry run is not refused (it writes nothing)
        dry = smk(tmp_path, cfg_path, "-n", timeout=600)
        assert dry.returncode == 0, dry.stderr[-3000:]
    finally:
        holder.kill()
        holder.wait()
