"""What the workflow asks a SLURM cluster, and the checks of a run's SLURM settings before it submits
(oodcorr.launch.slurm_cluster), against SLURM's commands faked on PATH (tests/helpers.py FakeSlurm).
The answers are those of Debian's slurm-wlm 22.05 on the test cluster (tests/slurm/cluster.py)."""

import pytest

from oodcorr.launch import slurm_cluster as sc

from helpers import FakeSlurm

NO_ACCOUNTING = """Configuration data as of 2026-12-03T16:54:00
AccountingStorageType   = accounting_storage/none
MaxJobCount             = 10000
MinJobAge               = 300 sec
"""
ACCOUNTING = NO_ACCOUNTING.replace("accounting_storage/none", "accounting_storage/slurmdbd")
# sinfo -h -N -o "%R|%a|%P|%N|%T|%E" of the test cluster with its node drained and a partition down
SINFO = """oodtest|up|oodtest*|oodnode|drained|maintenance test
oodcpu|down|oodcpu|oodnode|drained|maintenance test
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return FakeSlurm(tmp_path / "fake", monkeypatch)


def test_the_cluster_config_read():
    c = sc.parse_config(NO_ACCOUNTING)
    assert (c.accounting, c.min_job_age_s, c.max_job_count) == (False, 300, 10000)
    assert sc.parse_config(ACCOUNTING).accounting
    assert sc.parse_config("MinJobAge = 1h\n").min_job_age_s == 3600
    assert sc.parse_config("").min_job_age_s is None


def test_sacct_without_accounting_is_refused_naming_the_profile_key():
    """The executor's default status command (sacct) on a cluster without accounting: every status query
    fails and the run waits forever (issue 47); refused before anything is submitted."""
    config = sc.parse_config(NO_ACCOUNTING)
    for given in (None, "sacct"):
        refusals, _ = sc.status_problems(given, 40, config)
        assert len(refusals) == 1 and "Set `slurm-status-command: squeue` in the profile" in refusals[0], refusals
        assert "accounting_storage/none" in refusals[0] and sc.PROFILE in refusals[0]
    assert sc.status_problems("squeue", 40, config) == ([], [])
    # with accounting, sacct is what it should be
    assert sc.status_problems(None, 40, sc.parse_config(ACCOUNTING)) == ([], [])


def test_squeue_that_the_executor_would_swap_for_sacct_is_refused():
    """The executor asks sacct instead of squeue when MinJobAge < 3 x its first pause."""
    config = sc.parse_config(NO_ACCOUNTING.replace("300 sec", "100 sec"))
    refusals, _ = sc.status_problems("squeue", 40, config)
    assert len(refusals) == 1 and "`slurm-init-seconds-before-status-checks: 33`" in refusals[0], refusals
    assert sc.status_problems("squeue", 30, config)[0] == []
    # a MinJobAge shorter than the executor's longest pause: said, not refused
    warnings = sc.status_problems("squeue", 30, config)[1]
    assert len(warnings) == 1 and "MinJobAge" in warnings[0] and "180 s" in warnings[0]


def placement(rule="evaluate", partition="gpu", account=None):
    return sc.Placement(
        rule,
        partition,
        account,
        "`slurm_partition` in the profile's default-resources",
        "`slurm_account` in the profile's default-resources",
    )


def test_partitions_checked_against_sinfo(fake):
    fake.answer("sinfo", SINFO)
    parts = sc.partitions()
    assert sorted(parts) == ["oodcpu", "oodtest"] and parts["oodtest"].default and not parts["oodcpu"].default
    config = sc.parse_config(NO_ACCOUNTING)
    # profiles/slurm as shipped: partition gpu, which this cluster lacks
    refusals, _ = sc.placement_problems([placement()], parts, config, None, True)
    assert len(refusals) == 1
    assert "partition 'gpu'" in refusals[0] and "`slurm_partition`" in refusals[0] and "oodcpu, oodtest" in refusals[0]
    # a partition that is down: queued but never started, said; drained nodes: said with the node's reason
    refusals, warnings = sc.placement_problems(
        [placement(partition="oodcpu"), placement("finetune", "oodtest")], parts, config, None, True
    )
    assert refusals == [] and len(warnings) == 2, warnings
    assert any("'oodcpu'" in w and "is down" in w for w in warnings)
    assert any("'oodtest'" in w and "oodnode is drained ('maintenance test')" in w for w in warnings)
    # an inactive partition takes no job: refused
    fake.answer("sinfo", SINFO.replace("oodcpu|down", "oodcpu|inact"))
    refusals, _ = sc.placement_problems([placement(partition="oodcpu")], sc.partitions(), config, None, True)
    assert len(refusals) == 1 and "is inact" in refusals[0] and "`slurm_partition`" in refusals[0]


def test_accounts_checked_with_sacctmgr_where_there_is_accounting(fake):
    parts = sc.parse_sinfo(SINFO.replace("drained", "idle"))
    fake.answer("sacctmgr", "lab_a\nlab_b\n")
    accounts = sc.user_accounts()
    assert accounts == {"lab_a", "lab_b"} and "list associations" in fake.calls("sacctmgr")[0]
    refusals, _ = sc.placement_problems(
        [placement(partition="oodtest", account="my_account")], parts, sc.parse_config(ACCOUNTING), accounts, False
    )
    assert len(refusals) == 1 and "account 'my_account'" in refusals[0] and "`slurm_account`" in refusals[0]
    assert "lab_a, lab_b" in refusals[0]
    assert sc.placement_problems(
        [placement(partition="oodtest", account="lab_b")], parts, sc.parse_config(ACCOUNTING), accounts, False
    ) == ([], [])
    # no accounting: an account cannot be checked; said, with the way to drop it
    _, warnings = sc.placement_problems(
        [placement(partition="oodtest", account="my_account")], parts, sc.parse_config(NO_ACCOUNTING), None, False
    )
    assert len(warnings) == 1 and "slurm-no-account: true" in warnings[0]


def test_a_queue_limit_the_run_would_hit_is_said_with_packing_and_jobs():
    """MaxJobCount 4, 6 jobs to submit, `jobs: 200`: said before submitting, naming the PACKING block
    and --jobs."""
    config = sc.parse_config(NO_ACCOUNTING.replace("10000", "4"))
    line = sc.queue_room(6, 200, config, held_now=0)
    assert line and "MaxJobCount" in line and "PACKING" in line and "--jobs" in line and "4 or fewer" in line
    assert sc.queue_room(6, 4, config, held_now=0) is None  # at most 4 at once: fits
    assert sc.queue_room(3, 200, config, held_now=0) is None
    assert "1 or fewer" in sc.queue_room(6, 4, config, held_now=3)


def test_queue_read_by_run_name(fake):
    fake.answer(
        "squeue",
        "9|PENDING|4a59fc3d|oodtest|30:00|2000M||rule_build_tiny_model_wildcards_micro-opt|"
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions\n"
        "10|COMPLETED|4a59fc3d|oodcpu|30:00|2000M|oodnode|rule_tokenize_testset_wildcards_micro-opt_synth-test|None\n",
    )
    jobs = sc.queue(["4a59fc3d"], every_state=True)
    assert [j.id for j in jobs] == ["9", "10"] and [j.state in sc.ACTIVE_STATES for j in jobs] == [True, False]
    assert jobs[0].rule(["build_tiny_model", "tokenize_testset"]) == "build_tiny_model"
    assert jobs[1].rule(["tokenize_testset"]) == "tokenize_testset"
    assert fake.calls("squeue") == ["-h -r -o %i|%T|%j|%P|%l|%m|%N|%k|%r --states=all --name=4a59fc3d"]
    assert sc.queue([]) == []
    fake.answer("squeue", "", rc=1, stderr="slurm_load_jobs error: Unable to contact slurm controller")
    assert sc.queue(["x"]) is None


EVAL = {"mem_mb": 24000, "runtime": 6, "gpu": 1, "slurm_partition": "gpu", "threads": 2}


def test_array_rules_as_the_executor_reads_them():
    assert sc.array_rules(None) == sc.array_rules("") == set()
    assert sc.array_rules("evaluate; finetune,") == {"evaluate", "finetune"}


def test_job_arrays_of_one_model_with_room_for_every_job_pass():
    jobs = [("evaluate", dict(EVAL))] * 5 + [("finetune", {"mem_mb": 9000})]
    assert sc.array_problems("evaluate", jobs, at_once=6, per_timespan=100, status_command="squeue") == []
    assert (
        sc.array_problems(None, jobs, at_once=1, per_timespan=1, status_command=None) == []
    )  # no arrays: nothing to check
    assert sc.array_problems("tokenize_testset", jobs, 1, 1, None) == []  # no such job here


def test_job_arrays_over_evaluations_that_ask_for_different_resources_are_refused():
    """Two models' evaluations (paper grid: 24,000 and 48,000 MB, 6 and 8 minutes): an array gives every task
    the first job's limits."""
    jobs = [("evaluate", dict(EVAL))] * 3 + [("evaluate", {**EVAL, "mem_mb": 48000, "runtime": 8})]
    (refusal,) = sc.array_problems("evaluate", jobs, at_once=10, per_timespan=10, status_command="squeue")
    assert "the 4 evaluate jobs of this run ask for different resources (mem_mb: 24000, 48000; runtime: 6, 8)" in (
        refusal
    )
    assert "comment out `slurm-array-jobs`" in refusal
    assert sc.array_problems("all", jobs, 10, 10, "squeue") == [refusal]


def test_job_arrays_with_fewer_jobs_at_once_than_the_run_has_are_refused():
    """The executor drops the array rule's jobs it is handed while more of them wait (seen on the real
    cluster: `jobs: 2`, 5 evaluations ready, the run waited forever)."""
    jobs = [("evaluate", dict(EVAL))] * 5
    (few,) = sc.array_problems("evaluate", jobs, at_once=2, per_timespan=100, status_command="squeue")
    assert few.startswith("`jobs: 2`, fewer than this run's 5 SLURM jobs") and "#473" in few
    assert "Set `jobs:` in the profile (or --jobs) to 5 or more" in few
    (rate,) = sc.array_problems("evaluate", jobs, at_once=5, per_timespan=4, status_command="squeue")
    assert "Set `max-jobs-per-timespan: 5/1s` in the profile" in rate
    assert len(sc.array_problems("evaluate", jobs, 2, 4, "squeue")) == 2


def test_job_arrays_with_status_by_sacct_are_refused():
    """The executor's sacct query (-X, JobIdRaw) gives an array task by its own job id; the executor looks for
    <array>_<task> and falls back to the array's id, one task's record, for every task."""
    jobs = [("evaluate", dict(EVAL))] * 5
    for command in (None, "sacct"):
        (refusal,) = sc.array_problems("evaluate", jobs, 5, 5, command)
        assert "Set `slurm-status-command: squeue` in the profile" in refusal, refusal
    assert "sacct (its default)" in sc.array_problems("evaluate", jobs, 5, 5, None)[0]
