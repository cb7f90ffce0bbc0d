"""A rerun after the submitting Snakemake died (oodcorr.launch.slurm_rerun): the Snakemake lock it left,
said with why and the command, and the jobs SLURM still runs, waited for instead of submitted again;
SLURM's commands faked on PATH (tests/helpers.py FakeSlurm). The real kill and rerun on a real
cluster is tests/workflow/test_slurm.py's."""

import json
import subprocess
import sys

import pytest

from oodcorr.launch import slurm_rerun as sr

from helpers import FakeSlurm, micro_plan

RUN = "4a59fc3d-3dc5-47a8-a45c-9471c150c7de"
PENDING = f"9|PENDING|{RUN}|oodtest|30:00|2000M||rule_build_tiny_model_wildcards_micro-opt|PartitionDown\n"
ARGV = ["/x/.venv/bin/snakemake", "--workflow-profile", "profiles/slurm", "--configfile", "micro.yaml"]


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(sr.POLL_ENV, "0.2")
    return micro_plan()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return FakeSlurm(tmp_path / "fake", monkeypatch)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_runs_recorded_last_twenty(plan):
    assert sr.earlier_runs(plan) == []
    for i in range(22):
        sr.record_run(plan, "slurm", f"run{i}")
    runs = sr.earlier_runs(plan)
    assert [r["slurm_run_id"] for r in runs] == [f"run{i}" for i in range(2, 22)]
    assert {"pid", "host", "started", "workdir", "executor"} <= set(runs[-1])
    sr.runs_path(plan).write_text("{cut short")
    assert sr.earlier_runs(plan) == []


def locked(tmp_path, *paths):
    d = tmp_path / ".snakemake" / "locks"
    d.mkdir(parents=True, exist_ok=True)
    (d / "0.output.lock").write_text("\n".join(paths) + "\n")
    return d / "0.output.lock"


def _last_run(plan, **changes):
    """Record a SLURM run of the experiment, then edit its record (pid, host)."""
    sr.record_run(plan, "slurm", RUN)
    doc = json.loads(sr.runs_path(plan).read_text())
    doc["runs"][-1].update(changes)
    sr.runs_path(plan).write_text(json.dumps(doc))


def test_a_lock_left_by_a_run_gone_from_this_host_is_released_and_the_run_goes_on(plan, tmp_path, fake):
    """The earlier run ran on this host and its PID is no process, and this run holds the experiment's
    lock: no run can be writing, so Snakemake's lock on the experiment's files is removed (one line says
    so) and the run goes on to wait for that run's jobs. (Before: refused, naming `--unlock`: two commands
    after every kill, and a requeued job script that reruns the same command failed.)"""
    fake.answer("squeue", PENDING, "")
    _last_run(plan, pid=dead_pid())
    lock = locked(tmp_path, "results/micro/finetune/micro-opt/synth/n64/seed0/manifest.json")
    other = tmp_path / ".snakemake/locks/0.input.lock"
    other.write_text("results/other/scores.csv\n")  # another experiment's run in this folder: kept
    said = []
    assert sr.before_planning(plan, ARGV, said.append) is None
    assert not lock.exists() and other.exists()
    assert said[0].startswith("released Snakemake's lock on the files of experiment 'micro' (.snakemake/locks/0.")
    assert "as `--unlock` would" in said[0] and "is gone, and no run holds the experiment's lock" in said[0]
    assert "SLURM still holds 1 job(s) of an earlier run" in said[1]  # then its jobs are waited for


@pytest.mark.parametrize("where", ["another host", "alive"])
def test_a_lock_not_proven_stale_is_said_with_unlock_and_why(plan, tmp_path, fake, where):
    """The earlier run ran on another host (its process cannot be seen from here), or its PID is a
    process: the lock stays, and the refusal names `--unlock`, its command, why, and what the rerun then
    does with the jobs SLURM still runs."""
    fake.answer("squeue", PENDING)
    _last_run(plan, **({"host": "elsewhere", "pid": dead_pid()} if where == "another host" else {}))
    lock = locked(tmp_path, "results/micro/finetune/micro-opt/synth/n64/seed0/manifest.json")
    said = []
    refusal = sr.before_planning(plan, ARGV, said.append)
    assert said == [] and refusal and lock.exists()
    assert f"`{' '.join(ARGV)} --unlock` once, then this command again" in refusal
    assert str(lock.relative_to(tmp_path)) in refusal
    assert ("check there first (`ps -p" in refusal) == (where == "another host")
    assert (
        "waits for the 1 SLURM job(s) of that run that SLURM still holds, 9 (build_tiny_model micro-opt, PENDING"
        in refusal
    )
    # a lock of another experiment's files is not this experiment's business
    lock.unlink()
    locked(tmp_path, "results/other/scores.csv")
    assert sr.snakemake_locks(plan) == []


def test_the_earlier_runs_jobs_are_waited_for_not_submitted_again(plan, fake):
    fake.answer("squeue", PENDING, PENDING, PENDING.replace("PartitionDown", "Resources"), "")
    sr.record_run(plan, "local", None)
    sr.record_run(plan, "slurm", RUN)
    said = []
    assert sr.before_planning(plan, ARGV, said.append) is None
    assert fake.calls("squeue")[0] == f"-h -r -o %i|%T|%j|%P|%l|%m|%N|%k|%r --name={RUN}"
    assert len(fake.calls("squeue")) == 4
    assert "SLURM still holds 1 job(s) of an earlier run of this experiment" in said[0]
    assert (
        "9 (build_tiny_model micro-opt, PENDING: PartitionDown)" in said[0]
        and "instead of submitting them again" in said[0]
    )
    assert "`scancel 9`" in said[0]
    assert "PENDING: Resources" in said[1] and said[-1].startswith("the earlier run's SLURM jobs have ended")
    assert len(said) == 3  # said when it changed, not at every look


def test_a_dry_run_says_what_a_run_would_wait_for(plan, fake):
    fake.answer("squeue", PENDING)
    assert sr.earlier_jobs_warning(plan) == []  # no SLURM run on record: squeue is not even asked
    assert fake.calls("squeue") == []
    sr.record_run(plan, "slurm", RUN)
    (warning,) = sr.earlier_jobs_warning(plan)
    assert "9 (build_tiny_model micro-opt, PENDING: PartitionDown)" in warning and "a run waits for them" in warning


def test_squeue_that_does_not_answer_refuses_a_rerun_of_a_slurm_experiment(plan, fake):
    fake.answer(
        "squeue", "", rc=1, stderr="slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    )
    assert sr.before_planning(plan, ARGV, print) is None  # no SLURM run on record
    sr.record_run(plan, "slurm", RUN)
    refusal = sr.before_planning(plan, ARGV, print)
    assert refusal and "Unable to contact slurm controller" in refusal and "Run again when `squeue` answers" in refusal


def test_results_moved_off_the_cluster_are_not_held_up(plan, tmp_path, monkeypatch):
    """No squeue on this machine (a laptop): nothing of SLURM's can be waited for here."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sr.record_run(plan, "slurm", RUN)
    assert sr.before_planning(plan, ARGV, print) is None
