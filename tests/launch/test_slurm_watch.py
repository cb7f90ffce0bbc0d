"""A run's SLURM jobs watched from the submitting process (oodcorr.launch.slurm_watch): pending reasons
said while jobs wait, jobs SLURM ended named with the config key that set their limit, the controller
away, a job the executor lost; SLURM's commands faked on PATH (tests/helpers.py FakeSlurm). The real
cluster runs are in tests/workflow/test_slurm.py."""

import threading
from types import SimpleNamespace

import pytest

from oodcorr.launch import slurm_cluster as sc
from oodcorr.launch import slurm_watch as sw

from helpers import FakeSlurm, micro_config, micro_plan

DRAINED = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
RUN = "4a59fc3d-3dc5-47a8-a45c-9471c150c7de"
CONFIG = sc.parse_config("AccountingStorageType = accounting_storage/none\nMinJobAge = 600 sec\n")


def qline(
    i,
    state,
    reason="None",
    comment="rule_finetune_wildcards_micro-opt_synth_64_0",
    limit="20:00",
    mem="3000M",
    part="oodtest",
    node="oodnode",
):
    return f"{i}|{state}|{RUN}|{part}|{limit}|{mem}|{node}|{comment}|{reason}\n"


class SmJob:
    """A Snakemake job as the executor hands it over: its rule, wildcards, not a group (hashable, as jobs are)."""

    def __init__(self, rule, wildcards):
        self.rule, self.wildcards_dict = SimpleNamespace(name=rule), wildcards

    def is_group(self):
        return False


def sm_job(rule="finetune", **wildcards):
    return SmJob(rule, wildcards or {"model": "micro-opt", "indomain": "synth", "ntrain": "64", "seed": "0"})


@pytest.fixture
def fake(tmp_path, monkeypatch):
    f = FakeSlurm(tmp_path / "fake", monkeypatch)
    f.answer("scontrol", "Slurmctld(primary) at vm is UP\n", sub="ping")
    return f


@pytest.fixture
def plan():
    cfg = micro_config()
    cfg["resources"] = {"finetune": {"runtime": 20, "mem_mb": 3000}}
    return micro_plan(cfg)


def watcher(plan, jobs: dict, running=None):
    infos = [SimpleNamespace(external_jobid=k, job=v) for k, v in jobs.items()]
    executor = SimpleNamespace(lock=threading.Lock(), active_jobs=infos)
    scheduler = SimpleNamespace(running=set(running or ()))
    return sw.Watcher(RUN, executor, scheduler, plan, CONFIG, poll_s=3600)


def test_pending_reasons_sorted_into_what_they_mean():
    assert sw.wait_kind(DRAINED) == "nodes"
    assert sw.wait_kind("ReqNodeNotAvail, UnavailableNodes:oodnode") == "nodes"
    assert sw.wait_kind("PartitionDown") == sw.wait_kind("PartitionInactive") == "partition"
    assert sw.wait_kind("QOSMaxJobsPerUserLimit") == sw.wait_kind("AssocMaxJobsLimit") == "limit"
    assert sw.wait_kind("JobHeldUser") == sw.wait_kind("launch failed requeued held") == "held"
    # slurmctld killed while it launched a job: SLURM requeues it held, and the run waited, unsaid (issue 47)
    held = sw.pending_sentence("held", "oodcpu", "launch failed requeued held", ["1"], None)
    assert "`scontrol release 1`" in held and "launch on a node failed" in held and "this run waits" in held
    for normal in ("Resources", "Priority", "None", "Dependency", "BeginTime"):
        assert sw.wait_kind(normal) == "normal" and sw.pending_sentence("normal", "p", normal, ["1"], None) is None
    limit = sw.pending_sentence("limit", "oodtest", "QOSMaxJobsPerUserLimit", ["3", "4"], None)
    assert "PACKING" in limit and "--jobs" in limit and "3, 4" in limit


def test_a_drained_node_is_said_once_while_jobs_wait(fake, plan, capsys):
    fake.answer("squeue", qline(9, "PENDING", DRAINED))
    fake.answer("sinfo", "oodtest|up|oodtest*|oodnode|drained|maintenance test\n")
    w = watcher(plan, {"9": sm_job()})
    w.poll()
    w.poll()  # unchanged: not said again
    err = capsys.readouterr().err
    assert err.count("oodcorr: 1 SLURM job(s) of this run (9) wait because no node of partition 'oodtest'") == 1, err
    assert "oodnode is drained ('maintenance test')" in err
    # a second job waiting for the same reason: said again, with both
    fake.answer("squeue", qline(9, "PENDING", DRAINED) + qline(10, "PENDING", DRAINED))
    w.poll()
    assert "2 SLURM job(s) of this run (9, 10) wait" in capsys.readouterr().err


def test_a_job_held_after_a_failed_launch_is_released_once_then_named_with_the_command(fake, plan, capsys):
    """slurmctld away while it launched a job: SLURM requeues it held, and the run waited for it until its user
    released it (issue 53). The watcher releases it, once: held again, it is named with `scontrol release`."""
    held = "launch failed requeued held"
    fake.answer("scontrol", "", sub="release")
    fake.answer("squeue", qline(9, "PENDING", held))
    w = watcher(plan, {"9": sm_job()})
    w.poll()
    assert fake.calls("scontrol").count("release 9") == 1
    err = capsys.readouterr().err
    assert "released SLURM job(s) 9 of this run, held after a failed launch" in err and "`scontrol release" not in err
    w.poll()  # held again: not released a second time, but said with the command
    assert fake.calls("scontrol").count("release 9") == 1
    assert "`scontrol release 9`" in capsys.readouterr().err


def test_a_held_job_slurm_will_not_release_is_named_with_the_command(fake, plan, capsys):
    fake.answer("scontrol", "", sub="release", rc=1, stderr="Access/permission denied\n")
    fake.answer("squeue", qline(9, "PENDING", "launch failed requeued held"))
    watcher(plan, {"9": sm_job()}).poll()
    err = capsys.readouterr().err
    assert "released SLURM job" not in err and "`scontrol release 9`" in err


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            "TIMEOUT",
            ["at its time limit, 20:00 (TIMEOUT)", "`runtime`", "`resources.finetune.runtime: 20` in the config"],
        ),
        (
            "OUT_OF_MEMORY",
            ["its memory, 3000M (OUT_OF_MEMORY)", "`mem_mb`", "`resources.finetune.mem_mb: 3000` in the config"],
        ),
        ("NODE_FAIL", ["its node oodnode failed (NODE_FAIL)", "slurm-requeue"]),
        ("PREEMPTED", ["(PREEMPTED)", "slurm-requeue", "`slurm_partition`"]),
        ("CANCELLED", ["(CANCELLED", "scancel"]),
    ],
)
def test_a_job_slurm_ended_is_named_with_its_rule_and_limit_at_the_end(fake, plan, capsys, state, expected):
    fake.answer("squeue", qline(12, state))
    w = watcher(plan, {"12": sm_job()})
    w.poll()
    said = capsys.readouterr().err
    lines = w.end_lines(failed=True)
    assert len(lines) == 1 and lines[0].startswith("oodcorr: SLURM ended job 12 (rule finetune, micro-opt synth 64 0)")
    for part in expected:
        assert part in lines[0], (part, lines[0])
    # said when seen (but a job SLURM may requeue, only at the end), and again at the end
    assert (lines[0].removeprefix("oodcorr: ") in said) == (state not in sw.REQUEUED_AFTER)
    assert w.end_lines(failed=False)[0].startswith("oodcorr: WARNING: SLURM ended job 12")


def test_the_key_is_where_the_limit_was_set(fake, capsys):
    """A size class's runtime is named as that size class's key; the default as resources.<rule>; each with
    its value in the config (issue 53: the key was named, not what it held)."""
    cfg = micro_config()
    cfg["size_classes"] = {"small": {"evaluate": {"runtime": 3}}}
    cfg["models"][0]["size_class"] = "small"
    fake.answer("squeue", qline(5, "TIMEOUT", comment="rule_evaluate_wildcards_x"))
    w = watcher(micro_plan(cfg), {"5": sm_job("evaluate", model="micro-opt", step="4", testset="synth-test")})
    line = w.end_lines(failed=True)[0]
    assert "`size_classes.small.evaluate.runtime: 3` in the config" in line and "per checkpoint" in line
    fake.answer("squeue", qline(6, "OUT_OF_MEMORY", comment="rule_evaluate_wildcards_x"))
    w = watcher(micro_plan(), {"6": sm_job("evaluate", model="micro-opt", step="4", testset="synth-test")})
    assert "`resources.evaluate.mem_mb: 2000` in the config" in w.end_lines(failed=True)[0]


def test_a_job_of_no_known_model_names_the_key_without_a_value(fake, plan):
    """A job the run no longer knows (not in the executor's list, its comment shared): the rule's key, no
    value guessed from another model's."""
    fake.answer("squeue", qline(7, "OUT_OF_MEMORY", comment="rule_evaluate_wildcards_x"))
    line = watcher(plan, {}).end_lines(failed=True)[0]
    assert "its memory, 3000M (OUT_OF_MEMORY)" in line and "set by `resources.evaluate.mem_mb` in the config" in line


def test_a_preempted_job_slurm_requeued_is_not_named(fake, plan, capsys):
    """slurm-requeue: a preempted job goes back into the queue under its id; it did not end."""
    fake.answer("squeue", qline(4, "PREEMPTED"), qline(4, "PENDING", "BeginTime"), qline(4, "COMPLETED"))
    w = watcher(plan, {"4": sm_job()})
    w.poll()
    w.poll()
    assert w.end_lines(failed=False) == [] and "PREEMPTED" not in capsys.readouterr().err
    # not requeued: named at the end
    fake.answer("squeue", qline(4, "PREEMPTED"))
    w = watcher(plan, {"4": sm_job()})
    w.poll()
    assert "(PREEMPTED)" in w.end_lines(failed=True)[0]


def test_a_job_known_by_its_comment_when_the_executor_held_it_no_more(fake, plan):
    """The executor empties its list of active jobs while it checks them, and drops a job once it ended:
    the job is found by the comment the executor gave it."""
    fake.answer("squeue", qline(8, "CANCELLED"))
    job = sm_job()
    w = watcher(plan, {})
    w.by_comment = {"rule_finetune_wildcards_micro-opt_synth_64_0": job}
    assert w.end_lines(failed=True)[0].startswith("oodcorr: SLURM ended job 8 (rule finetune, micro-opt synth 64 0)")


def test_comments_as_the_executor_writes_them():
    class Job(SmJob):
        def __init__(self, rule, wildcards):
            super().__init__(rule, wildcards)
            self.name, self.wildcards = rule, list(wildcards.values())

    a, b = Job("finetune", {"model": "m", "seed": "0"}), Job("aggregate", {})
    twin = [Job("evaluate", {"a": "x_y"}), Job("evaluate", {"a": "x", "b": "y"})]
    assert sw.comments([a, b, *twin]) == {"rule_finetune_wildcards_m_0": a, "rule_aggregate": b}


def test_only_failures_slurm_caused_are_named(fake, plan):
    """A job's own error (FAILED) has its own sentence (the job's refusal); a completed one none."""
    fake.answer("squeue", qline(1, "COMPLETED") + qline(2, "FAILED") + qline(3, "RUNNING"))
    w = watcher(plan, {"1": sm_job(), "2": sm_job(), "3": sm_job()})
    w.poll()
    assert w.end_lines(failed=True) == []


def test_the_controller_away_and_back_is_said(fake, plan, capsys):
    fake.answer("scontrol", "DOWN\n", "DOWN\n", "UP\n", sub="ping", rcs=(1, 1, 0))
    fake.answer("squeue", qline(3, "RUNNING"))
    w = watcher(plan, {"3": sm_job()})
    for _ in range(3):
        w.poll()
    err = capsys.readouterr().err
    assert err.count("does not answer (`scontrol ping`)") == 1 and "answers again, after" in err
    assert fake.calls("squeue") == [f"-h -r -o {sc.SQUEUE_FORMAT} --states=all --name={RUN}"]  # not asked while away


def test_a_job_the_executor_stopped_watching_is_said(fake, plan, capsys, monkeypatch):
    """SLURM ended the job long ago; Snakemake still counts it running: the executor lost it."""
    monkeypatch.setattr(sw, "LOST_AFTER_S", 0)
    job = sm_job()
    fake.answer("squeue", qline(7, "COMPLETED"))
    w = watcher(plan, {"7": job}, running=[job])
    w.executor.active_jobs.clear()  # dropped by the executor after failed queries
    w.jobs["7"] = job
    w.poll()
    w.poll()
    err = capsys.readouterr().err
    assert err.count("SLURM job 7 (rule finetune, micro-opt synth 64 0) ended COMPLETED") == 1, err
    assert "would wait for it forever" in err and "run the same command again" in err
    # a finished job Snakemake has seen end: nothing
    w2 = watcher(plan, {"7": job}, running=[])
    w2.poll()
    assert "ended COMPLETED" not in capsys.readouterr().err


def test_job_array_tasks_are_watched_one_by_one(fake, plan, capsys, monkeypatch):
    """A job array's tasks (the executor's ids <array>_<task>; squeue -r gives one a line, pending ones too):
    a task that runs or waits is not lost (the array's parent id, which squeue never lists, was watched too,
    and said lost once the array outlived LOST_AFTER_S); a task cancelled while it waited, which SLURM then
    forgets at once (seen on the real cluster) and the executor awaits forever, is said."""
    monkeypatch.setattr(sw, "LOST_AFTER_S", 0)
    jobs = {f"1_{i}": sm_job("evaluate", model="micro-opt", step=str(i)) for i in (1, 2, 3)}
    fake.answer("squeue", qline("1_1", "RUNNING") + qline("1_2", "PENDING"))
    w = watcher(plan, jobs, running=jobs.values())
    w.poll()
    w.poll()
    err = capsys.readouterr().err
    assert "SLURM job 1_3 (rule evaluate, micro-opt 3) ended and SLURM forgot it" in err, err
    assert "a job array's task cancelled while it waited leaves SLURM no record of it" in err
    assert "SLURM job 1_1 " not in err and "SLURM job 1_2 " not in err and "SLURM job 1 " not in err
    assert fake.calls("squeue")[0].startswith("-h -r -o ")


def test_a_full_queue_is_said_with_packing_and_jobs(fake, plan, capsys):
    full = CONFIG.__class__(False, "accounting_storage/none", 600, 4)
    fake.answer("squeue", "".join(qline(i, "COMPLETED") for i in range(4)))
    w = watcher(plan, {})
    w.config = full
    w.poll()
    w.poll()
    err = capsys.readouterr().err
    assert err.count("SLURM's queue is full: it holds 4 jobs") == 1 and "PACKING" in err and "--jobs" in err
