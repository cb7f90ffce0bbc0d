"""profiles/slurm on a real (single-node) SLURM cluster, against a local run of the same config.

The cluster test needs root and apt (tests/slurm/cluster.py installs slurm-wlm and
munge when missing); it is skipped, with the reason, only where neither is available.
"""

import importlib.metadata
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import REPO, SNAKEMAKE, micro_config

sys.path.insert(0, str(REPO / "tests" / "slurm"))
import cluster as slurm_cluster  # noqa: E402

PROFILE = REPO / "profiles/slurm/config.yaml"
PLUGINS = ("snakemake-executor-plugin-slurm", "snakemake-executor-plugin-slurm-jobstep")
R = "results/micro"


# ---- the profile itself (fast) ---------------------------------------------------------


def test_plugin_is_pinned_alike_and_installed():
    reqs = (REPO / "requirements.txt").read_text().splitlines()
    env = yaml.safe_load((REPO / "envs/oodcorr.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for name in PLUGINS:
        pins = [r for r in reqs if r.split("==")[0] == name]
        assert len(pins) == 1 and pins == [p for p in pip if p.split("==")[0] == name], name
        assert importlib.metadata.version(name) == pins[0].split("==")[1]
    assert importlib.metadata.version(PLUGINS[0]).startswith("2.")


def _block(name: str) -> dict:
    """The profile's optional block ``name`` (commented out), as a user uncommenting it gets it."""
    text = PROFILE.read_text().split(f"# ---- {name}", 1)[1].split(f"# ---- end of {name}", 1)[0]
    keys = [line[2:] for line in text.splitlines() if re.match(r"# [a-z-]+: ", line)]
    return yaml.safe_load("\n".join(keys))


def packing_block() -> dict:
    return _block("PACKING")


def array_block() -> dict:
    return _block("ARRAYS")


def test_profile_keys_a_user_edits_and_optional_packing():
    prof = yaml.safe_load(PROFILE.read_text())
    assert prof["executor"] == "slurm"
    # partition and account: one place, the profile's default resources
    assert {"slurm_partition", "slurm_account"} <= set(prof["default-resources"])
    # retries scale memory and time with the attempt
    assert prof["retries"] >= 1 and "attempt" in str(prof["default-resources"]["mem_mb"])
    # evaluations are a SLURM job each unless the user uncomments the packing block
    assert "group-components" not in prof and "groups" not in prof
    assert packing_block() == {
        "groups": {"evaluate": "evaluate"},
        "group-components": {"evaluate": 21},
        "set-resource-scopes": {"gpu": "local"},
        "resources": {"gpu": 1},
    }
    # evaluations as SLURM job arrays: a switch beside PACKING, off as shipped (docs/gpus-and-slurm.md#job-arrays)
    assert "slurm-array-jobs" not in prof
    assert array_block() == {"slurm-array-jobs": "evaluate", "slurm-array-limit": 1000}
    # GPUs come from the `gpu` resource: the plugin refuses --gres/--gpus in slurm_extra
    assert not re.search(r"--(gres|gpus)", yaml.safe_dump(prof))


def _dry_resources(tmp_path, resources: dict, target: str, rule: str, attempt: int, unit="checkpoint") -> dict:
    """mem_mb, runtime and attempt of ``rule``'s job for ``target`` in a dry run at ``attempt``."""
    cfg = micro_config()
    cfg["resources"] = resources
    cfg["evaluation"]["unit"] = unit
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(path),
            "-n",
            "--cores",
            "1",
            "--attempt",
            str(attempt),
            "--forceall",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    block = res.stdout.split(f"rule {rule}:", 1)[1].split("\n\n", 1)[0]
    return {k: int(v) for k, v in re.findall(r"\b(mem_mb|runtime|attempt)=(\d+)", block)}


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2])
def test_retry_scales_memory_and_runtime(tmp_path, attempt):
    """A second attempt asks for twice the memory and time (dry-run of one finetune job)."""
    got = _dry_resources(
        tmp_path,
        {"finetune": {"mem_mb": 3000, "runtime": 20}},
        "results/micro/finetune/micro-opt/synth/n64/seed0/manifest.json",
        "finetune",
        attempt,
    )
    assert got == {"mem_mb": 3000 * attempt, "runtime": 20 * attempt}


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2])
@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_evaluation_runtime_is_per_checkpoint_and_scales_with_the_attempt(tmp_path, attempt, unit):
    """The configured evaluate runtime is minutes per checkpoint: a unit-checkpoint job asks for
    it, a unit-run job (all 5 checkpoints of the micro run) for 5 times it; twice on attempt 2."""
    ev = "results/micro/eval/micro-opt/synth/n64/seed0"
    target = f"{ev}/step8/synth-overlap.predictions.parquet" if unit == "checkpoint" else f"{ev}/synth-overlap.json"
    got = _dry_resources(tmp_path, {"evaluate": {"runtime": 7, "mem_mb": 1500}}, target, "evaluate", attempt, unit)
    per_job = 1 if unit == "checkpoint" else 5
    assert got == {"mem_mb": 1500 * attempt, "runtime": per_job * 7 * attempt, "attempt": attempt}


# ---- the real cluster (minutes) -----------------------------------------------------------


def _config(path: Path) -> dict:
    """config/micro.yaml, evaluations declared as GPU jobs, and per-rule placement: every job that asks
    for no GPU (tiny-model build, tokenisation, this CPU finetune) to the CPU partition, the
    tokenisations with an extra sbatch option (resources: results do not change)."""
    cfg = micro_config()
    cfg["resources"] = {
        "evaluate": {"gpu": 1},
        "cpu": {"slurm_partition": slurm_cluster.CPU_PARTITION},
        "tokenize_testset": {"slurm_extra": "--nice=5"},
    }
    path.write_text(yaml.safe_dump(cfg))
    return cfg


def _test_profile(dest: Path) -> Path:
    """profiles/slurm with the edits docs/gpus-and-slurm.md#run-on-a-slurm-cluster tells a user to make,
    for this test cluster, and its PACKING block uncommented: 5 evaluation jobs (a run's checkpoints here)
    per SLURM job."""
    prof = yaml.safe_load(PROFILE.read_text())
    prof.update(packing_block())
    prof["group-components"] = {"evaluate": 5}
    prof["default-resources"]["slurm_partition"] = slurm_cluster.PARTITION
    del prof["default-resources"]["slurm_account"]
    prof.update(
        {
            "slurm-no-account": True,  # no accounts here
            "slurm-status-command": "squeue",  # no accounting: sacct knows no jobs
            "slurm-init-seconds-before-status-checks": 2,
            "slurm-keep-successful-logs": True,
            "cores": 4,
            "jobs": 20,
            "latency-wait": 10,
            "retries": 0,
            "verbose": True,
        }
    )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(prof))
    return dest


def _results(wd: Path) -> tuple[pd.DataFrame, dict]:
    scores = pd.read_csv(wd / R / "scores.csv").sort_values(["run_id", "step", "testset"], ignore_index=True)
    preds = {p.relative_to(wd): pd.read_parquet(p) for p in sorted((wd / R / "eval").rglob("*.predictions.parquet"))}
    return scores, preds


def _snakemake(wd: Path, profile: Path, *extra: str) -> list[str]:
    return [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(wd),
        "--configfile",
        str(wd / "micro.yaml"),
        "--workflow-profile",
        str(profile),
        *extra,
    ]


def _env(**more) -> dict:
    # OODCORR_SLURM_POLL_S: the run looks at its SLURM jobs every second (30 s by default)
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OODCORR_SLURM_POLL_S="1", **more)


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    """Snakemake in the background, its own process group (to kill it and its local jobs as a login
    node's end would), stdout and stderr into ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)


def _wait_for(log: Path, pattern: str, p: subprocess.Popen, timeout: float) -> re.Match:
    """The first match of ``pattern`` in ``log``, waited for at most ``timeout`` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        if p.poll() is not None:
            break
        time.sleep(0.5)
    m = re.search(pattern, log.read_text(errors="replace"))
    if m:
        return m
    _kill(p)
    raise AssertionError(f"no {pattern!r} in {log} after {timeout:.0f} s:\n{log.read_text(errors='replace')[-6000:]}")


def _finish(p: subprocess.Popen, log: Path, timeout: float) -> int:
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(p)
        tail = log.read_text(errors="replace")[-6000:]
        raise AssertionError(f"still running after {timeout:.0f} s:\n{tail}") from None


def _finish_releasing(p: subprocess.Popen, log: Path, cluster, timeout: float) -> int:
    """``_finish``, releasing any job SLURM holds after a failed launch, as the run tells its user to: a
    launch that fails because slurmctld was away is SLURM's fault, not the run's (it says so, and waits)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            return p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            released = cluster.release_held()
            if released:
                print(f"released SLURM job(s) held after a failed launch: {released}")
    return _finish(p, log, 1)


def _wait_step(job: str, p: subprocess.Popen, log: Path, timeout: float) -> None:
    """Wait until SLURM job ``job`` runs its first step: the executor's job script runs the rule with
    ``srun``, which needs slurmctld to start the step (a job whose step starts while slurmctld is away
    fails, and SLURM requeues it held: said by the run, not what this test is about)."""
    end = time.time() + timeout
    while time.time() < end and p.poll() is None:
        res = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], capture_output=True, text=True, timeout=60)
        if f"{job}.0" in res.stdout.split():
            return
        time.sleep(0.2)
    _kill(p)
    raise AssertionError(f"SLURM job {job} ran no step in {timeout:.0f} s:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def cluster():
    """One single-node cluster for the module's runs (the main run, then the fault scenarios)."""
    try:
        slurm_cluster.ensure_installed()
    except slurm_cluster.Unavailable as e:
        pytest.skip(f"no SLURM test cluster on this machine: {e}")
    # a short root: the munge socket path must fit a unix socket name
    c = slurm_cluster.Cluster(Path(tempfile.mkdtemp(prefix="oodslurm-")), gpus=8)
    c.start()
    try:
        yield c
    finally:
        if c.procs:
            c.cancel_all()
        c.stop()


_RUNS_FAILED: list[str] = []  # a module fixture that fails is set up again for each test: once is enough


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cluster):
    if _RUNS_FAILED:
        pytest.fail(f"the runs failed for an earlier test of this module: {_RUNS_FAILED[0]}")
    try:
        return _runs(tmp_path_factory, cluster)
    except BaseException as e:
        _RUNS_FAILED.append(f"{type(e).__name__}: {str(e)[:300]}")
        raise


def _runs(tmp_path_factory, cluster) -> dict:
    base = tmp_path_factory.mktemp("slurm")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    # the reference: a local run, 2 simulated GPUs shared by GPU jobs through the device pool
    local = base / "local"
    local.mkdir()
    _config(local / "micro.yaml")
    t0 = time.time()
    cmd = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(local),
        "--configfile",
        str(local / "micro.yaml"),
        "--cores",
        "2",
        "--resources",
        "gpu=2",
    ]
    local_env = dict(env, CUDA_VISIBLE_DEVICES="0,1", OODCORR_GPU_LOCK_DIR=str(base / "gpulocks"))
    # first everything the evaluations need, so that they are all ready at once and two
    # start side by side (2 cores, gpu=2)
    for extra in (["--until", "finetune", "tokenize_testset"], []):
        res = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=900, env=local_env)
        assert res.returncode == 0, res.stderr[-5000:]
    local_s = time.time() - t0

    wd = base / "cluster-run"
    wd.mkdir()
    _config(wd / "micro.yaml")
    profile = _test_profile(base / "profile")
    # every call of sacct, recorded (slurm-no-account: true must keep the executor from guessing an account)
    shim = base / "shim"
    shim.mkdir()
    (shim / "sacct").write_text(f'#!/bin/sh\necho "$*" >> {base / "sacct-calls"}\nexec /usr/bin/sacct "$@"\n')
    (shim / "sacct").chmod(0o755)
    log = base / "snakemake-slurm.log"  # kept for a failing assertion
    print(f"\nSnakemake's log of the SLURM run: {log}")
    t0 = time.time()
    p = _start(_snakemake(wd, profile), _env(PATH=f"{shim}{os.pathsep}{os.environ['PATH']}"), log)
    # slurmctld stopped while the first job (the tiny model's build) runs, and kept away until that job has
    # ended and 30 s have passed, then started again with its saved state (issues 47 and 53): the run must
    # see the job ended while the controller was away and finish, saying what it waits for meanwhile
    first = _wait_for(log, r"has been submitted with SLURM jobid (\d+)", p, 300).group(1)
    _wait_step(first, p, log, 120)
    cluster.stop_controller()
    away = time.time()
    built = wd / "results/micro/models/micro-opt/oodcorr_build.json"  # the job's last write
    while not built.exists() and time.time() < away + 600:
        time.sleep(0.5)
    assert built.exists(), f"the first job made no model in 600 s:\n{log.read_text(errors='replace')[-4000:]}"
    time.sleep(max(5.0, away + 30 - time.time()))  # (5 s: its process has exited after writing it)
    cluster.start_controller()
    rc = _finish_releasing(p, log, cluster, 900)
    slurm_s = time.time() - t0
    text = log.read_text(errors="replace")
    ctld_log = cluster.ctld_log.read_text(errors="replace")
    print(
        f"SLURM test cluster idle after {cluster.startup_s:.1f} s; local run {local_s:.0f} s; SLURM run {slurm_s:.0f} s"
    )
    assert rc == 0, text[-8000:] + ctld_log[-3000:]
    return {
        "local": local,
        "slurm": wd,
        "log": text,
        "ctld": ctld_log,
        "jobcomp": cluster.jobcomp_log.read_text(errors="replace") if cluster.jobcomp_log.exists() else "",
        "sacct_calls": (base / "sacct-calls").read_text() if (base / "sacct-calls").exists() else "",
    }


@pytest.mark.slow
def test_scores_through_slurm_equal_local(runs):
    s_local, p_local = _results(runs["local"])
    s_slurm, p_slurm = _results(runs["slurm"])
    assert len(s_slurm) == 5 * 3  # 5 checkpoints x (in-domain + 2 OOD)
    pd.testing.assert_frame_equal(s_slurm, s_local)
    assert sorted(p_slurm) == sorted(p_local) and len(p_slurm) == 15
    for k in p_local:  # every per-example prediction and logit, bit for bit
        pd.testing.assert_frame_equal(p_slurm[k], p_local[k])


@pytest.mark.slow
def test_jobs_went_through_slurm(runs):
    log = runs["log"]
    ids = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    # build + finetune + 3 tokenisations + the 15 evaluation jobs (5 checkpoints x 3 testsets)
    # packed 5 to a SLURM job by the profile's PACKING block
    assert len(ids) == len(set(ids)) == 8, log[-5000:]
    # slurmctld ran every one of them on the node and each exited 0. Read from the job completion
    # records (jobcomp/filetxt: one ``key=value`` line per finished job, written by slurmctld's
    # completion logger whichever scheduler started the job), not from slurmctld's log: a job
    # the main scheduler starts logs ``sched: Allocate JobId=N``, one the backfill scheduler starts
    # logs ``sched/backfill: _start_job: Started JobId=N`` (Slurm 22.05's job_scheduler.c and
    # backfill.c), and which one starts a job depends on timing (the old assertion on the first
    # line failed once under load).
    finished = slurm_cluster.job_records(runs["jobcomp"])
    for i in ids:
        assert i in finished, (i, runs["jobcomp"][-3000:])
        rec = finished[i]
        assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", rec
        assert rec["NodeList"] == slurm_cluster.NODE, rec
    comments = re.findall(r"sbatch call: sbatch .*?--comment (\S+)", log)
    groups = re.findall(r"sbatch call: (sbatch .*?--comment rule_evaluate_evaluate .*)", log)
    assert len(groups) == 3, log[-5000:]
    packed = []
    for call in groups:
        jobs = re.findall(
            r"'evaluate:model=micro-opt,indomain=synth,ntrain=64,seed=0,step=(\d+),testset=([\w-]+)'", call
        )
        assert len(jobs) == 5, call
        packed += jobs
        # one GPU, the 5 jobs one after another: 5 x the default 10 minutes per checkpoint
        assert "--gpus=1" in call and "--cpus-per-task=1" in call and " -t 50 " in call, call
    assert sorted(packed) == sorted(
        (str(k), t) for k in (0, 4, 8, 12, 16) for t in ("synth-test", "synth-overlap", "synth-negation")
    )
    assert " -p oodtest " in log and " -A " not in log
    # per-rule placement from the config's resources: CPU-only jobs in the CPU partition, the GPU
    # jobs in the profile's; an extra sbatch option only where the config sets it
    placed, extra = {}, {}
    for call in re.findall(r"sbatch call: (sbatch .*)", log):
        rule = re.search(r"--comment rule_([a-z_]+?)(?:_wildcards_|_evaluate\b|\s)", call).group(1)
        placed.setdefault(rule, set()).add(re.search(r" -p (\S+)", call).group(1))
        extra.setdefault(rule, set()).add("--nice=5" in call)
    cpu = slurm_cluster.CPU_PARTITION
    assert placed == {
        "build_tiny_model": {cpu},
        "tokenize_testset": {cpu},
        "finetune": {cpu},
        "evaluate": {slurm_cluster.PARTITION},
    }, placed
    assert extra == {
        "build_tiny_model": {False},
        "tokenize_testset": {True},
        "finetune": {False},
        "evaluate": {False},
    }, extra
    # aggregation and plots stayed on the submitting node
    for rule in ("aggregate_scores", "partial_correlations", "heatmap", "prepare_dataset"):
        assert f"localrule {rule}:" in log and f"rule_{rule}" not in " ".join(comments), rule


@pytest.mark.slow
def test_local_gpu_jobs_spread_over_the_devices(runs):
    """In the local run (--resources gpu=2, two simulated devices) the 15 evaluation jobs,
    started two at a time, used both devices."""
    claimed = []
    for log in (runs["local"] / R / "logs/eval").rglob("*.log"):
        claimed += re.findall(r"claimed GPU (\S+) of 0,1", log.read_text())
    assert len(claimed) == 15 and set(claimed) == {"0", "1"}


@pytest.mark.slow
def test_the_run_outlived_the_controller_away_and_said_so(runs):
    """slurmctld stopped for 30 s while the first job ran (the `runs` fixture): the executor stops watching
    jobs whose status it cannot query, and the run waited forever (issue 47). It finished (the fixture
    checks, and the results equal a local run's), and said what it waited for meanwhile."""
    log = runs["log"]
    assert "SLURM's controller (slurmctld) does not answer (`scontrol ping`); this run waits for it" in log
    assert re.search(r"SLURM's controller answers again, after \d+ s", log)


@pytest.mark.slow
def test_no_account_guess_with_slurm_no_account(runs):
    """`slurm-no-account: true`: the executor (2.8.0) still guessed an account with a broken sacct call,
    printed as "not able to get a SLURM account via sacct: sacct: invalid option -- '1'"."""
    assert "Account" not in runs["sacct_calls"], runs["sacct_calls"]
    assert " -A " not in runs["log"]


def _scenario(tmp_path: Path, shipped: bool = False) -> tuple[Path, Path]:
    """A working folder with the test config and a profile: the test's (as a user edits it for this
    cluster), or, with ``shipped``, profiles/slurm's YOUR CLUSTER block left as shipped."""
    wd = tmp_path / "wd"
    wd.mkdir()
    _config(wd / "micro.yaml")
    if not shipped:
        return wd, _test_profile(tmp_path / "profile")
    prof = yaml.safe_load(PROFILE.read_text())
    prof.update({"slurm-init-seconds-before-status-checks": 2, "cores": 4, "jobs": 20, "retries": 0, "verbose": True})
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(prof))
    return wd, tmp_path / "profile"


def _submitted(text: str) -> list[str]:
    return re.findall(r"has been submitted with SLURM jobid (\d+)", text)


@pytest.mark.slow
def test_the_profile_as_shipped_is_refused_before_anything_is_submitted(cluster, tmp_path):
    """profiles/slurm as shipped on this cluster: partition `gpu` (it has oodtest and oodcpu), account
    `my_account` (no accounting here), no status command (the executor's default, sacct, knows no job
    here: the run waited forever). Found in onstart, naming each profile key; nothing submitted."""
    wd, profile = _scenario(tmp_path, shipped=True)
    res = subprocess.run(_snakemake(wd, profile), capture_output=True, text=True, timeout=600, env=_env())
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-5000:]
    assert "oodcorr: nothing was submitted: " in out
    assert "partition 'gpu' (`slurm_partition` in the profile's default-resources; for the evaluate jobs)" in out
    assert "whose partitions are oodcpu, oodtest (`sinfo`)" in out
    assert "Set `slurm-status-command: squeue` in the profile" in out
    assert "account 'my_account'" in out and "set `slurm-no-account: true`" in out
    assert _submitted(out) == [] and "sbatch call" not in out


@pytest.mark.slow
def test_a_drained_node_is_said_while_a_job_waits_and_a_cancelled_job_named_last(cluster, tmp_path):
    wd, profile = _scenario(tmp_path)
    log = tmp_path / "run.log"
    cluster.set_node("drain", "maintenance test")
    try:
        p = _start(_snakemake(wd, profile, "--until", "build_tiny_model"), _env(), log)
        job = _wait_for(log, r"has been submitted with SLURM jobid (\d+)", p, 300).group(1)
        _wait_for(log, r"wait because no node of partition 'oodcpu' can start them", p, 120)
        subprocess.run(["scancel", job], check=True, timeout=60)
        rc = _finish(p, log, 300)
    finally:
        cluster.set_node("resume")
    text = log.read_text(errors="replace")
    assert rc != 0
    assert f"oodcorr: 1 SLURM job(s) of this run ({job}) wait because no node of partition 'oodcpu'" in text
    assert "oodnode is drained ('maintenance test')" in text
    # the last of the run's own lines (before Snakemake's closing lines: the log's name, the time, and with
    # --verbose a traceback), after Snakemake's "Exiting because a job execution failed"
    ours = [i for i, line in enumerate(text.splitlines()) if line.startswith("oodcorr: ")]
    last = text.splitlines()[ours[-1]]
    assert last.startswith(
        f"oodcorr: SLURM ended job {job} (rule build_tiny_model, micro-opt): it was cancelled (CANCELLED"
    )
    assert ours[-1] > text.splitlines().index("Exiting because a job execution failed. Look above for error messages")


@pytest.mark.slow
def test_a_rerun_after_the_submitting_snakemake_died_waits_for_its_jobs(cluster, tmp_path):
    """Snakemake killed on the login node while its job waits in SLURM, then the same command: the
    rerun needed --unlock, unsaid, and then submitted the job again (issue 47: 9 SLURM jobs for 6
    outputs); then it said to --unlock (a second command; issue 53). Now the same command releases the
    lock the killed run left, says so, and waits for the job instead of submitting it again."""
    wd, profile = _scenario(tmp_path)
    cmd = _snakemake(wd, profile, "--until", "build_tiny_model")
    cluster.set_node("drain")  # the job waits in SLURM while the test kills and reruns
    try:
        first = _start(cmd, _env(), tmp_path / "first.log")
        job = _wait_for(tmp_path / "first.log", r"has been submitted with SLURM jobid (\d+)", first, 300).group(1)
        _kill(first)  # the login node's session ends: SIGKILL to Snakemake and its local jobs

        log = tmp_path / "rerun.log"
        rerun = _start(cmd, _env(), log)
        _wait_for(log, r"This run waits for them instead of submitting them again", rerun, 300)
        cluster.set_node("resume")
        rc = _finish(rerun, log, 600)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.NODE}", "state=resume"], capture_output=True)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-5000:]
    assert _submitted(text) == [], text[-5000:]  # nothing submitted twice
    assert "oodcorr: released Snakemake's lock on the files of experiment 'micro'" in text
    assert "--unlock` once" not in text
    assert f"{job} (build_tiny_model micro-opt, PENDING" in text
    assert "the earlier run's SLURM jobs have ended; planning what is left" in text
    assert slurm_cluster.job_records(cluster.jobcomp_log.read_text())[job]["JobState"] == "COMPLETED"
    assert (wd / R / "models" / "micro-opt" / "config.json").is_file()


@pytest.mark.slow
def test_a_job_script_requeued_mid_run_reruns_the_same_command(cluster, tmp_path):
    """Snakemake run inside a SLURM job (a head job), the job requeued while it runs (`scontrol requeue`,
    what a preemption does): SLURM runs the job script again, whose same command resumes and finishes
    with no --unlock and no second command (issue 53)."""
    wd, _ = _scenario(tmp_path)
    cmd = " ".join(shlex.quote(a) for a in [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd)])
    script = tmp_path / "head.sh"
    script.write_text(
        "#!/bin/sh\necho 'head job: attempt started'\n"
        f"exec {cmd} --configfile {shlex.quote(str(wd / 'micro.yaml'))} --cores 1 --until finetune\n"
    )
    out = tmp_path / "head.out"
    res = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--open-mode=append", "-p", slurm_cluster.CPU_PARTITION]
        + ["-o", str(out), str(script)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    built = wd / R / "models/micro-opt/oodcorr_build.json"  # the first job's output: the run is under way
    end = time.time() + 300
    while not built.exists() and time.time() < end:
        time.sleep(0.5)
    assert built.exists(), out.read_text(errors="replace")[-4000:] if out.exists() else "no output"
    assert subprocess.run(["scontrol", "requeue", job], capture_output=True, timeout=60).returncode == 0
    manifest = wd / R / "finetune/micro-opt/synth/n64/seed0/manifest.json"
    end = time.time() + 600
    while time.time() < end:
        record = slurm_cluster.job_records(cluster.jobcomp_log.read_text(errors="replace")).get(job, {})
        if record.get("JobState") == "COMPLETED" or (record and not _task_state(job)):
            break
        time.sleep(1)
    text = out.read_text(errors="replace")
    assert record.get("JobState") == "COMPLETED" and record.get("ExitCode") == "0:0", (record, text[-5000:])
    assert text.count("head job: attempt started") == 2, text[-5000:]  # the same script, run again
    assert manifest.is_file() and "--unlock" not in text, text[-5000:]


def _array_profile(dest: Path, jobs: int) -> Path:
    """The test's profile with the ARRAYS block instead of PACKING, ``jobs`` at once, one retry."""
    _test_profile(dest)
    prof = yaml.safe_load((dest / "config.yaml").read_text())
    for key in packing_block():
        del prof[key]
    prof.update(array_block())
    prof.update({"jobs": jobs, "retries": 1})
    (dest / "config.yaml").write_text(yaml.safe_dump(prof))
    return dest


OVERLAP = [f"{R}/eval/micro-opt/synth/n64/seed0/step{k}/synth-overlap.predictions.parquet" for k in (0, 4, 8, 12, 16)]


def _task_state(task: str) -> str:
    res = subprocess.run(["squeue", "-h", "-r", "--states=all", "-j", task, "-o", "%T"], capture_output=True, text=True)
    return res.stdout.strip()


@pytest.mark.slow
def test_evaluations_as_one_job_array_and_a_cancelled_task_redone_alone(runs, cluster, tmp_path):
    """The profile's ARRAYS block, on the finished SLURM run's folder with one testset's 5 evaluations
    deleted: with `jobs: 2` the run is refused before it submits (the executor 2.8.0 dropped the 2 jobs it
    was handed while 3 more waited, and the run waited forever with nothing in SLURM); with room for every
    job, the 5 go as one SLURM job array of 5 tasks, and a task cancelled while it runs
    (`scancel <array>_3`) is retried alone, as a job of its own, the other 4 run once."""
    wd = tmp_path / "wd"
    shutil.copytree(runs["slurm"], wd, symlinks=True)
    expected = {f: pd.read_parquet(wd / f) for f in OVERLAP}
    for f in OVERLAP:
        (wd / f).unlink()
    cmd = _snakemake(wd, _array_profile(tmp_path / "few", jobs=2), *OVERLAP)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "oodcorr: nothing was submitted: `jobs: 2`, fewer than this run's 5" in out, out
    assert "sbatch call" not in out

    log = tmp_path / "run.log"
    p = _start(_snakemake(wd, _array_profile(tmp_path / "arrays", jobs=20), *OVERLAP), _env(), log)
    m = _wait_for(log, r"Submitted array job with Snakemake IDs ([\d,]+) and SLURM job ID (\d+)", p, 300)
    array = m.group(2)
    end = time.time() + 300
    while _task_state(f"{array}_3") in ("", "PENDING") and time.time() < end and p.poll() is None:
        time.sleep(0.2)
    # cancelled while it waits, a task leaves SLURM no record and the executor awaits it forever (said by the
    # run's watcher after LOST_AFTER_S): not what this test is about
    state = _task_state(f"{array}_3")
    if state != "RUNNING":
        _kill(p)
    assert state == "RUNNING", log.read_text(errors="replace")[-4000:]
    subprocess.run(["scancel", f"{array}_3"], check=True, timeout=60)
    rc = _finish(p, log, 600)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-6000:]
    assert len(m.group(1).split(",")) == 5 and text.count("Submitted array job with") == 1, text[-6000:]
    task = dict(re.findall(r"external_jobid=(\d+_\d+), snakemake_jobid=(\d+)", text))
    assert sorted(task) == [f"{array}_{i}" for i in range(1, 6)], text[-6000:]
    # the cancelled task's job, and only it, submitted again: alone, not as an array
    again = re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", text)
    assert [j for j, _ in again] == [task[f"{array}_3"]], text[-6000:]
    assert {i: _task_state(f"{array}_{i}") for i in range(1, 6)} == {
        1: "COMPLETED",
        2: "COMPLETED",
        3: "CANCELLED",
        4: "COMPLETED",
        5: "COMPLETED",
    }
    assert _task_state(again[0][1]) == "COMPLETED"
    for f in OVERLAP:  # the same predictions as the packed run's, bit for bit
        pd.testing.assert_frame_equal(pd.read_parquet(wd / f), expected[f])


@pytest.mark.slow
def test_cluster_daemons_are_gone(cluster):
    """Last in this file: the module's cluster stopped, every daemon is gone and the conf removed."""
    assert cluster.startup_s < 60
    pids = [p.pid for p in cluster.procs.values()]
    cluster.cancel_all()
    cluster.stop()
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (
        not (slurm_cluster.CONF_DIR / "slurm.conf").exists()
        or slurm_cluster.MARKER not in (slurm_cluster.CONF_DIR / "slurm.conf").read_text()
    )
