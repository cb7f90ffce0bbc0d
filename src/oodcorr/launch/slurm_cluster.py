"""What the workflow asks a SLURM cluster that its SLURM executor does not (stdlib queries, each bounded by
a timeout, None when a command is missing), and the checks of a run's SLURM settings before it submits
(each refusal names the profile key)."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT_S = 30  # the most a query of the cluster may take
# the executor's longest pause between two status checks (snakemake_executor_plugin_slurm: max_sleep_time)
EXECUTOR_MAX_PAUSE_S = 180
# the job states in which SLURM still holds or runs a job (squeue's own names)
ACTIVE_STATES = frozenset(
    "PENDING RUNNING CONFIGURING COMPLETING SUSPENDED REQUEUED REQUEUE_FED REQUEUE_HOLD RESIZING SIGNALING "
    "STAGE_OUT STOPPED".split()
)
PROFILE = "profiles/slurm/config.yaml"
DIR_ENV = "OODCORR_SLURM_WRAP_DIR"  # the folder of oodcorr.launch.slurm_wrap's wrappers, once installed


def unwrapped_path() -> str:
    folder = os.environ.get(DIR_ENV)
    bin_dir = (Path(folder) / "bin").resolve() if folder else None
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != bin_dir]
    return os.pathsep.join(keep)


def run(argv: Sequence[str], timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess | None:
    """``argv``'s result, or None when not installed or not done in time; never through :mod:`.slurm_wrap`'s
    wrappers (the watcher must see an outage, not wait it out)."""
    env = dict(os.environ, PATH=unwrapped_path())
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def first_line(res: subprocess.CompletedProcess | None) -> str:
    if res is None:
        return "not installed, or no answer"
    text = (res.stderr or res.stdout or "").strip()
    return text.splitlines()[0] if text else f"exit status {res.returncode}"


def controller_answers() -> bool:
    res = run(["scontrol", "ping"], timeout=15)
    return res is not None and res.returncode == 0


@dataclass(frozen=True)
class ClusterConfig:
    """What ``scontrol show config`` says that matters to a run."""

    accounting: bool  # a slurmdbd keeps job records: sacct and sacctmgr can answer
    storage: str  # AccountingStorageType, as given
    min_job_age_s: int | None  # how long a finished job stays visible to squeue
    max_job_count: int | None  # the most jobs slurmctld holds at once, finished ones included


def parse_config(text: str) -> ClusterConfig:
    values = {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in text.splitlines()) if sep}
    storage = values.get("AccountingStorageType", "")
    count = values.get("MaxJobCount", "").split()[:1]
    age = re.match(r"\s*(\d+)\s*([a-z]*)", values.get("MinJobAge", "").lower())  # 300 sec, 1h, 600
    unit = 3600 if age and age[2].startswith("h") else 60 if age and age[2].startswith("min") else 1
    return ClusterConfig(
        accounting=bool(storage) and not storage.endswith("/none"),
        storage=storage,
        min_job_age_s=int(age[1]) * unit if age else None,
        max_job_count=int(count[0]) if count and count[0].isdigit() else None,
    )


SINFO_FORMAT = "%R|%a|%P|%N|%T|%E"  # partition, its availability, (default marked *), node, state, reason


@dataclass
class Partition:
    name: str
    available: str  # up, down, drain, inact
    default: bool = False
    nodes: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (state, reason)

    def unusable(self) -> list[str]:
        bad = ("drain", "down", "fail", "maint", "power", "reserved", "unknown", "no_respond", "inval")
        return [
            f"{n} is {state}" + (f" ({reason!r})" if reason and reason.lower() != "none" else "")
            for n, (state, reason) in sorted(self.nodes.items())
            if any(b in state.lower() for b in bad)
        ]


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``sinfo -h -N -o`` :data:`SINFO_FORMAT` -> partitions by name."""
    parts: dict[str, Partition] = {}
    for line in text.splitlines():
        f = line.split("|", 5)
        if len(f) < 6 or not f[0]:
            continue
        p = parts.setdefault(f[0], Partition(f[0], f[1].strip().lower()))
        p.default = p.default or f[2].endswith("*")
        if f[3]:
            p.nodes[f[3]] = (f[4].strip(), f[5].strip())
    return parts


def partitions() -> dict[str, Partition] | None:
    res = run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
    return parse_sinfo(res.stdout) if res is not None and res.returncode == 0 else None


SQUEUE_FORMAT = "%i|%T|%j|%P|%l|%m|%N|%k|%r"  # id, state, name, partition, limit, memory, nodes, comment, reason


@dataclass(frozen=True)
class QueuedJob:
    id: str
    state: str
    name: str  # the executor names every job of a run after the run's id
    partition: str
    time_limit: str  # as squeue gives it: 20:00, 1-00:00:00, UNLIMITED
    memory: str  # as squeue gives it: 2000M
    nodes: str
    comment: str  # the executor's: rule_<rule>[_wildcards_<values>]
    reason: str

    def rule(self, rules: Iterable[str] = ()) -> str:
        """The rule in the executor's comment: the longest known rule name it starts with, else the comment."""
        body = self.comment.removeprefix("rule_")
        known = sorted((r for r in rules if body == r or body.startswith(r + "_")), key=len, reverse=True)
        return known[0] if known else body.split("_wildcards_", 1)[0]


def queue(names: Iterable[str] | None = None, every_state: bool = False) -> list[QueuedJob] | None:
    """The jobs named ``names`` (all when None; ``every_state``: finished ones too), or None when squeue does
    not answer. With ``names``, an array's tasks one a line (``<array>_<task>``)."""
    argv = ["squeue", "-h", *(["-r"] if names is not None else []), "-o", SQUEUE_FORMAT]
    if every_state:
        argv.append("--states=all")
    if names is not None:
        names = sorted(set(names))
        if not names:
            return []
        argv.append("--name=" + ",".join(names))
    res = run(argv)
    if res is None or res.returncode != 0:
        return None
    rows = (line.split("|", 8) for line in res.stdout.splitlines())
    return [QueuedJob(*(x.strip() for x in f)) for f in rows if len(f) == 9 and f[0].strip()]


def release_failed_launches(jobs: Iterable[QueuedJob], released: set[str]) -> list[str]:
    """Release each of ``jobs`` held after a failed launch, once per id (``released``); the ids released."""
    out = []
    for j in jobs:
        if j.state != "PENDING" or j.id in released or "launch failed" not in j.reason.lower():
            continue
        released.add(j.id)
        res = run(["scontrol", "release", j.id])
        if res is not None and res.returncode == 0:
            out.append(j.id)
    return out


def user_accounts() -> set[str] | None:
    """The accounts this user may submit under (``sacctmgr``; None where it cannot answer)."""
    res = run(["sacctmgr", "-n", "-P", "list", "associations", f"user={getpass.getuser()}", "format=account"])
    if res is None or res.returncode != 0:
        return None
    return {a.strip().lower() for a in res.stdout.splitlines() if a.strip()}


def status_problems(status_command: str | None, init_s: int, config: ClusterConfig) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for how the executor would learn that jobs ended: without accounting sacct knows
    no job and the run waits forever."""
    refusals, warnings = [], []
    age = config.min_job_age_s
    if not config.accounting:
        why = (
            f"this cluster keeps no accounting (AccountingStorageType={config.storage or 'none'}), so sacct knows no "
            "job: the run would never learn that its jobs ended and would wait forever"
        )
        if status_command in (None, "sacct"):
            refusals.append(
                f"the SLURM executor would ask sacct whether jobs ended (`slurm-status-command: sacct`), but {why}. "
                f"Set `slurm-status-command: squeue` in the profile ({PROFILE}) and run again"
            )
        elif age is not None and age < 3 * init_s:
            refusals.append(
                f"the SLURM executor would ask sacct whether jobs ended, as this cluster keeps a finished job seen by "
                f"squeue for {age} s (MinJobAge), under 3 x its first pause of {init_s} s, but {why}. In the profile "
                f"({PROFILE}) set `slurm-init-seconds-before-status-checks: {max(1, age // 3)}` (or less) and run again"
            )
        if age is not None and age < EXECUTOR_MAX_PAUSE_S + 30 and not refusals:
            warnings.append(
                f"this cluster keeps a finished job visible to squeue for {age} s (MinJobAge) and has no accounting; "
                f"the SLURM executor pauses up to {EXECUTOR_MAX_PAUSE_S} s between status checks and can miss a job "
                f"(waited for forever). Ask the administrators for MinJobAge {EXECUTOR_MAX_PAUSE_S + 120} s or more"
            )
    return refusals, warnings


@dataclass(frozen=True)
class Placement:
    """Where one rule's submitted jobs go, and the keys that set it (for sentences)."""

    rule: str
    partition: str | None
    account: str | None
    partition_key: str  # e.g. "slurm_partition in the profile's default-resources"
    account_key: str


def placement_problems(
    placements: Iterable[Placement],
    parts: dict[str, Partition],
    config: ClusterConfig,
    accounts: set[str] | None,
    no_account: bool,
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for the partitions and accounts the jobs would be submitted to."""
    refusals, warnings = [], []
    by_partition: dict[str | None, list[Placement]] = {}
    by_account: dict[str, list[Placement]] = {}
    for p in placements:
        by_partition.setdefault(p.partition, []).append(p)
        if p.account:
            by_account.setdefault(str(p.account), []).append(p)
    names = ", ".join(sorted(parts)) or "none"
    for name, group in sorted(by_partition.items(), key=lambda kv: str(kv[0])):
        rules = ", ".join(sorted({g.rule for g in group}))
        keys = "; ".join(sorted({g.partition_key for g in group}))
        if name is None:
            if not any(p.default for p in parts.values()):
                refusals.append(
                    f"the {rules} jobs name no partition and this cluster has no default one: set `slurm_partition` in "
                    f"the profile's default-resources ({PROFILE}) to one of its partitions ({names}) and run again"
                )
            continue
        part = parts.get(str(name))
        if part is None:
            refusals.append(
                f"partition {name!r} ({keys}; for the {rules} jobs) is not a partition of this cluster, whose "
                f"partitions are {names} (`sinfo`): set `slurm_partition` there to one of them and run again"
            )
        elif part.available in ("inact", "inactive", "drain"):
            refusals.append(
                f"partition {name!r} ({keys}; for the {rules} jobs) is {part.available} (`sinfo -p {name}`): set "
                "`slurm_partition` there to a partition that is up, or ask the cluster's administrators, and run again"
            )
        elif part.available == "down":
            warnings.append(
                f"partition {name!r} ({keys}; for the {rules} jobs) is down (`sinfo -p {name}`): SLURM queues the jobs "
                "but starts none until it is up; or stop this run, set `slurm_partition` there to another and run again"
            )
        elif len(part.unusable()) == len(part.nodes):
            warnings.append(
                f"no node of partition {name!r} ({keys}; for the {rules} jobs) can start a job now: "
                f"{', '.join(part.unusable()) or 'it has no nodes'} (`sinfo -p {name}`). SLURM starts them when a "
                "node returns"
            )
    for account, group in sorted(by_account.items()):
        rules = ", ".join(sorted({g.rule for g in group}))
        keys = "; ".join(sorted({g.account_key for g in group}))
        if not config.accounting:
            warnings.append(
                f"account {account!r} ({keys}; for the {rules} jobs) is passed to sbatch, but this cluster keeps no "
                f"accounting. Delete `slurm_account` there and set `slurm-no-account: true` in the profile ({PROFILE})"
            )
        elif accounts is not None and account.lower() not in accounts:
            refusals.append(
                f"account {account!r} ({keys}; for the {rules} jobs) is not one you may use on this cluster, per "
                f"`sacctmgr list associations user={getpass.getuser()}`: yours are "
                f"{', '.join(sorted(accounts)) or 'none'}. Set `slurm_account` there to one of them and run again"
            )
    if config.accounting and not no_account and not by_account and placements:
        warnings.append(
            "no job names a SLURM account (`slurm_account`), so the executor guesses one: set it in the profile's "
            f"default-resources ({PROFILE}), or `slurm-no-account: true` where jobs need none"
        )
    return refusals, warnings


def queue_room(submissions: int, at_once: int, config: ClusterConfig, held_now: int) -> str | None:
    """The sentence for a run that would fill SLURM's queue (``MaxJobCount``) before it submits, or None."""
    limit = config.max_job_count
    if limit is None or submissions <= 0:
        return None
    room = max(limit - held_now, 0)
    if min(submissions, at_once) <= room:
        return None
    return (
        f"SLURM holds at most {limit} jobs at once (MaxJobCount{_age(config.min_job_age_s)}) and holds {held_now} now, "
        f"so {room} more fit; this run has {submissions} SLURM job(s) to submit, up to {at_once} at once (`jobs:` in "
        f"the profile, or --jobs). {_queue_advice(room)}"
    )


def array_rules(setting: str | None) -> set[str]:
    """The rules ``slurm-array-jobs`` names (``,`` or ``;`` between them, or ``all``), as the executor reads it."""
    return {r.strip() for r in (setting or "").replace(";", ",").split(",") if r.strip()}


def array_problems(
    setting: str | None,
    jobs: Sequence[tuple[str, dict]],
    at_once: int,
    per_timespan: int | None,
    status_command: str | None,
) -> list[str]:
    """The refusals for job arrays (``slurm-array-jobs``: ``setting``) where the executor (2.8.0) gets them
    wrong. ``jobs``: each job's rule and resources; ``at_once``: ``jobs:``; ``per_timespan``: what
    ``max-jobs-per-timespan`` lets start."""
    rules = array_rules(setting)
    chosen: dict[str, list[dict]] = {}
    for rule, asked in jobs:
        if rule in rules or "all" in rules:
            chosen.setdefault(rule, []).append(asked)
    if not chosen:
        return []
    out = []
    off = f"or comment out `slurm-array-jobs` in the profile ({PROFILE}: its ARRAYS block)"
    for rule, asks in sorted(chosen.items()):
        differ = sorted({k for a in asks for k in a if any(b.get(k) != a.get(k) for b in asks)})
        if differ:
            shown = "; ".join(f"{k}: {', '.join(sorted({str(a.get(k)) for a in asks}))}" for k in differ[:4])
            out.append(
                f"the {len(asks)} {rule} jobs of this run ask for different resources ({shown}), but a SLURM job "
                "array gives every task the first job's: tasks would run out of memory or time, or on the wrong "
                f"partition. Run the models one at a time (a config per model, or per-model targets), {off}"
            )
    if status_command != "squeue":
        out.append(
            f"job arrays with status command {status_command or 'sacct (its default)'}: the executor's sacct query "
            "reads every task's state from one task's record. Set `slurm-status-command: squeue` in the profile, " + off
        )
    n = len(jobs)
    held_back = (
        f"the executor never submits the {', '.join(sorted(chosen))} jobs picked while more of them wait to be "
        "picked (snakemake-executor-plugin-slurm 2.8.0, issue #473): the run would wait forever"
    )
    if at_once < n:
        out.append(
            f"`jobs: {at_once}`, fewer than this run's {n} SLURM jobs: {held_back}. Set `jobs:` in the profile (or "
            f"--jobs) to {n} or more, {off}"
        )
    if per_timespan is not None and per_timespan < n:
        out.append(
            f"`max-jobs-per-timespan` lets {per_timespan} jobs start per timespan, fewer than this run's {n} SLURM "
            f"jobs: {held_back}. Set `max-jobs-per-timespan: {n}/1s` in the profile (or on the command line), {off}"
        )
    return out


def queue_full(limit: int, held: int, min_job_age_s: int | None) -> str:
    return (
        f"SLURM's queue is full: it holds {held} jobs, its limit (MaxJobCount{_age(min_job_age_s)}). "
        f"{_queue_advice(max(limit // 2, 1))}"
    )


def _age(min_job_age_s: int | None) -> str:
    return f"; a finished job counts for MinJobAge, {min_job_age_s} s" if min_job_age_s else ""


def _queue_advice(fit: int) -> str:
    return (
        "a submission that finds no room fails: pack the evaluations into fewer SLURM jobs (uncomment the PACKING "
        f"block of {PROFILE}) and set `jobs:` there (or --jobs) to {fit} or fewer"
    )
