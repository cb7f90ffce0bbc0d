"""SLURM's commands as the SLURM executor runs them, waiting out a controller that does not answer
(oodcorr.launch.slurm_wrap), against SLURM's commands faked on PATH (tests/helpers.py FakeSlurm). The
controller stopped and started again under a real run is tests/workflow/test_slurm.py's."""

import io
import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from oodcorr.launch import slurm_cluster, slurm_wrap

from helpers import FakeSlurm

DOWN = "Slurmctld(primary) at vm is DOWN\n"
UP = "Slurmctld(primary) at vm is UP\n"
GONE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_wrap, "PAUSE_S", 0.01)
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(isatty=lambda: False, buffer=io.BytesIO(b"")))
    monkeypatch.delenv(slurm_wrap.DIR_ENV, raising=False)
    return FakeSlurm(tmp_path / "fake", monkeypatch)


def test_squeue_waits_while_the_controller_is_away(fake, capfdbinary):
    fake.answer("squeue", "", "", "12|RUNNING\n", rcs=(1, 1, 0), stderr=GONE)
    fake.answer("scontrol", DOWN, DOWN, UP, sub="ping", rcs=(1, 1, 0))
    assert slurm_wrap.main(["squeue", "--name", "x"]) == 0
    out = capfdbinary.readouterr()
    assert out.out == b"12|RUNNING\n" and fake.calls("squeue") == ["--name x"] * 3


def test_a_failure_of_an_answering_controller_passes_at_once(fake, capfdbinary):
    fake.answer("squeue", "", rc=1, stderr="squeue: error: Invalid job state specified")
    fake.answer("scontrol", UP, sub="ping")
    assert slurm_wrap.main(["squeue", "--states=bogus"]) == 1
    assert b"Invalid job state" in capfdbinary.readouterr().err and len(fake.calls("squeue")) == 1


def test_squeue_gives_up_within_the_executors_timeout(fake, monkeypatch, capfdbinary):
    monkeypatch.setitem(slurm_wrap.WAIT_S, "squeue", 0.3)
    fake.answer("squeue", "", rc=1, stderr=GONE)
    fake.answer("scontrol", DOWN, sub="ping", rc=1)
    assert slurm_wrap.main(["squeue"]) == 1
    assert GONE.encode() in capfdbinary.readouterr().err and len(fake.calls("squeue")) >= 2


def test_sbatch_waits_and_submits_once(fake, capfdbinary):
    fake.answer(
        "sbatch",
        "",
        "42\n",
        rcs=(1, 0),
        stderr="sbatch: error: Batch job submission failed: Unable to contact slurm controller",
    )
    fake.answer("scontrol", DOWN, UP, sub="ping", rcs=(1, 0))
    assert slurm_wrap.main(["sbatch", "--parsable", "--wrap=true"]) == 0
    assert capfdbinary.readouterr().out.endswith(b"42\n") and len(fake.calls("sbatch")) == 2


def test_sbatch_refused_by_an_answering_controller_is_not_repeated(fake, capfdbinary):
    fake.answer("sbatch", "", rc=1, stderr="sbatch: error: invalid partition specified: gpu")
    fake.answer("scontrol", UP, sub="ping")
    assert slurm_wrap.main(["sbatch", "-p", "gpu"]) == 1
    assert len(fake.calls("sbatch")) == 1 and b"invalid partition" in capfdbinary.readouterr().err


def test_the_config_read_at_the_start_stands_in_while_the_controller_is_away(fake, tmp_path, monkeypatch, capfdbinary):
    """Without MinJobAge the executor would ask sacct instead, which knows no job without accounting."""
    fake.answer(
        "scontrol", "", rc=1, stderr="slurm_load_ctl_conf error: Unable to contact slurm controller", sub="show"
    )
    assert slurm_wrap.main(["scontrol", "show", "config"]) == 1  # nothing read at the start: the failure
    folder = tmp_path / "wrap"
    path = os.environ["PATH"]
    slurm_wrap.install(folder, "MinJobAge = 600 sec\n")
    monkeypatch.setenv("PATH", path)
    assert slurm_wrap.main(["scontrol", "show", "config"]) == 0
    assert capfdbinary.readouterr().out.endswith(b"MinJobAge = 600 sec\n")
    fake.answer("scontrol", "MinJobAge = 300 sec\n", sub="show")
    assert slurm_wrap.main(["scontrol", "show", "config"]) == 0  # an answering controller's own answer
    assert capfdbinary.readouterr().out == b"MinJobAge = 300 sec\n"


def test_installed_wrappers_come_first_and_reach_the_real_command(fake, tmp_path, monkeypatch):
    fake.answer("squeue", "7|PENDING\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    bin_dir = slurm_wrap.install(tmp_path / "wrap", "")
    assert os.environ["PATH"].split(os.pathsep)[0] == str(bin_dir)
    assert sorted(p.name for p in bin_dir.iterdir()) == ["sbatch", "scontrol", "squeue"]
    slurm_wrap.install(tmp_path / "wrap", "")  # again: PATH holds the folder once
    assert os.environ["PATH"].split(os.pathsep).count(str(bin_dir)) == 1
    res = subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout) == (0, "7|PENDING\n") and fake.calls("squeue") == ["-h"]


def test_oodcorrs_own_queries_skip_the_wrappers_and_see_the_controller_away_at_once(fake, tmp_path, monkeypatch):
    """The run's watcher asks squeue itself: through the wrapper it would wait out the whole outage (CI of
    2026-12-03: slurmctld away for 30 s, the watcher blocked in a wrapped squeue, the outage never said)."""
    fake.answer("squeue", "", rc=1, stderr=GONE)
    fake.answer("scontrol", DOWN, sub="ping", rc=1)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    slurm_wrap.install(tmp_path / "wrap", "")
    res = slurm_cluster.run(["squeue", "-h"], timeout=10)
    assert res is not None and res.returncode != 0 and GONE in res.stderr
    assert fake.calls("squeue") == ["-h"]  # asked once, not retried by a wrapper


@pytest.mark.parametrize("no_account", [True, False])
def test_slurm_no_account_answers_the_executors_account_guess(fake, tmp_path, monkeypatch, no_account):
    """`slurm-no-account: true`, which the executor (2.8.0) never reads: its own account guess (its
    `sacct ... | tail -1`, the pipe passed as arguments) finds "none", so it submits without `-A`, and
    SLURM's sacct is not asked; any other sacct call passes through. Without the setting nothing of
    sacct is wrapped. (Before: a private attribute of the executor was set, `_fallback_account_arg`.)"""
    from snakemake_executor_plugin_slurm.accounts import get_account

    fake.answer("sacct", "lab\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    bin_dir = slurm_wrap.install(tmp_path / "wrap", "", no_account=True)
    if not no_account:
        slurm_wrap.install(tmp_path / "wrap", "")  # the same folder under a profile without it
    assert (bin_dir / "sacct").exists() == no_account
    assert get_account(logging.getLogger("test")) == (None if no_account else "lab")
    assert len(fake.calls("sacct")) == (0 if no_account else 1)
    res = subprocess.run(["sacct", "-j", "7"], capture_output=True, text=True, timeout=60)
    assert res.stdout == "lab\n" and fake.calls("sacct")[-1] == "-j 7"


def test_the_last_answer_stands_in_for_a_controller_away_longer_than_a_query(fake, tmp_path, monkeypatch, capfdbinary):
    """A failed status round makes the executor drop its jobs (issue 53): the controller's last answer
    to the same query keeps them watched instead; another query gets no stand-in."""
    monkeypatch.setitem(slurm_wrap.WAIT_S, "squeue", 0.3)
    path = os.environ["PATH"]
    slurm_wrap.install(tmp_path / "wrap", "")
    monkeypatch.setenv("PATH", path)
    query = ["--format=%i|%T", "--states=all", "--noheader", "--name", "run-1"]
    fake.answer("squeue", "12|RUNNING\n13|PENDING\n")
    fake.answer("scontrol", UP, sub="ping")
    assert slurm_wrap.main(["squeue", *query]) == 0
    capfdbinary.readouterr()
    fake.answer("squeue", "", rc=1, stderr=GONE)
    fake.answer("scontrol", DOWN, sub="ping", rc=1)
    assert slurm_wrap.main(["squeue", *query]) == 0
    out = capfdbinary.readouterr()
    assert out.out == b"12|RUNNING\n13|PENDING\n" and b"does not answer" in out.err
    assert slurm_wrap.main(["squeue", "--name", "run-2"]) == 1  # never answered: the failure, as before
    fake.answer("squeue", "12|COMPLETED\n")
    fake.answer("scontrol", UP, sub="ping")
    assert slurm_wrap.main(["squeue", *query]) == 0  # back: its own answer, the new state
    assert capfdbinary.readouterr().out == b"12|COMPLETED\n"
