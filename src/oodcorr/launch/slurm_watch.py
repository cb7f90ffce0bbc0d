"""A run on SLURM, from the submitting process: its settings checked before it submits (:func:`at_start`),
its jobs watched (:class:`Watcher`: said on the console, once per change, what no waiting ends by itself),
and each job SLURM ended for a limit named at the end, with the config key to raise (:func:`end_lines`)."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ..core.defaults import RESOURCES
from ..planning.plan import Plan
from . import slurm_cluster as slurm
from . import slurm_rerun, slurm_wrap

# the states in which SLURM ended a job for a limit or a failure outside it (FAILED: the job's own sentence)
ENDED_BY_SLURM = ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED", "DEADLINE", "BOOT_FAIL")
# of those, the ones SLURM may requeue (slurm-requeue): said only if the job is still ended when the run ends
REQUEUED_AFTER = ("NODE_FAIL", "PREEMPTED")
NORMAL_WAIT = ("None", "Resources", "Priority", "Dependency", "BeginTime", "Prolog", "Reservation")
LOST_AFTER_S = slurm.EXECUTOR_MAX_PAUSE_S + 120  # a job ended this long ago and still awaited: the executor lost it
SHOWN = 5  # failures repeated at the end at most
_WATCHER: Watcher | None = None


def print_now(line: str) -> None:
    print(f"oodcorr: {line}", file=sys.stderr, flush=True)


def wait_kind(reason: str) -> str:
    """A pending job's reason as ``normal`` (it starts by itself) or what it waits for."""
    r = reason.replace(" ", "").lower()
    if any(r.startswith(n.lower()) for n in NORMAL_WAIT):
        return "normal"
    if "partitiondown" in r or "partitioninactive" in r:
        return "partition"
    if "reqnodenotavail" in r or "nodedown" in r or "drained" in r or "down,drained" in r:
        return "nodes"
    if any(k in r for k in ("maxjobs", "maxsubmit", "jobslimit", "maxjobcount")):
        return "limit"
    if "held" in r:
        return "held"
    return "other"


def pending_sentence(kind: str, partition: str, reason: str, ids: list[str], parts: dict | None) -> str | None:
    """The sentence for ``ids``, pending in ``partition`` for ``reason`` (None when they start by themselves)."""
    shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
    n = f"{len(ids)} SLURM job(s) of this run ({shown})"
    if kind == "partition":
        return (
            f"{n} wait because partition {partition!r} is not up ({reason}; `sinfo -p {partition}`); or stop this run "
            f"(Ctrl-C), set `slurm_partition` ({slurm.PROFILE} or the config's resources) to another and run again"
        )
    if kind == "nodes":
        part = (parts or {}).get(partition)
        nodes = ", ".join(part.unusable()) if part else ""
        return (
            f"{n} wait because no node of partition {partition!r} can start them"
            + (f": {nodes}" if nodes else "")
            + f" (`sinfo -p {partition}`; SLURM: {reason}). They start when a node is back; this run waits for them"
        )
    if kind == "limit":
        return (
            f"{n} wait for a limit on your jobs ({reason}): SLURM starts them as your earlier jobs end; or pack "
            f"evaluations into fewer SLURM jobs (PACKING in {slurm.PROFILE}) and lower `jobs:` there (or --jobs)"
        )
    if kind == "held" and "launch failed" in reason.lower():
        return (
            f"{n} are held by SLURM ({reason}): their launch on a node failed. Check the node (`sinfo -p {partition}`)"
            f", then `scontrol release {' '.join(ids)}` (or ask an administrator); this run waits for them"
        )
    if kind == "held":
        return f"{n} are held ({reason}): `scontrol release {' '.join(ids)}` lets them start; this run waits for them"
    if kind == "other":
        return f"{n} wait in partition {partition!r}: SLURM says {reason!r} (`squeue -j {','.join(ids)} -o %r`)"
    return None


def _ended_sentence(job: slurm.QueuedJob, what: str, rule: str, key: Callable[[str], str]) -> str:
    """The sentence for a job SLURM ended, with the config key and value of its limit (``key(name)``)."""
    head = f"SLURM ended job {job.id} ({what})"
    again = "run the same command again (a finetune resumes from its last checkpoint)"
    raise_it = f"in the config: raise it there and {again}; `retries` in the profile retries with a multiple of it"
    per = ", per checkpoint" if rule == "evaluate" else ""
    if job.state == "TIMEOUT":
        return (
            f"{head} at its time limit, {job.time_limit} (TIMEOUT). The limit is the {rule} jobs' `runtime` (minutes"
            f"{per}), set by `{key('runtime')}` {raise_it}"
        )
    if job.state == "OUT_OF_MEMORY":
        return (
            f"{head}: it ran out of its memory, {job.memory} (OUT_OF_MEMORY). The limit is the {rule} jobs' `mem_mb`, "
            f"set by `{key('mem_mb')}` {raise_it}"
        )
    if job.state == "NODE_FAIL":
        return (
            f"{head}: its node {job.nodes or '?'} failed (NODE_FAIL). Check it (`sinfo -n {job.nodes}`), then {again}; "
            "with `slurm-requeue: true` in the profile SLURM requeues such a job itself"
        )
    if job.state == "PREEMPTED":
        return (
            f"{head}: it was preempted (PREEMPTED) and not requeued. To run it, {again}; `slurm-requeue: true` in the "
            f"profile lets SLURM requeue it, or send the {rule} jobs where none preempts (`slurm_partition`, `qos`)"
        )
    if job.state == "CANCELLED":
        return f"{head}: it was cancelled (CANCELLED: `scancel` or an administrator). To run it, {again}"
    return f"{head} ({job.state}): see `scontrol show job {job.id}` while SLURM still knows it; {again}"


def _describe_job(job) -> tuple[str, str, str | None]:
    """(what, rule, model) of a Snakemake job or job group the executor submitted."""
    members = sorted(job.jobs, key=lambda j: str(j.wildcards_dict)) if job.is_group() else [job]
    rules = sorted({j.rule.name for j in members})
    models = sorted({str(j.wildcards_dict.get("model")) for j in members if j.wildcards_dict.get("model")})
    wc = " ".join(str(v) for v in members[0].wildcards_dict.values())
    what = f"rule {', '.join(rules)}" + (f", {wc}" if wc else "")
    if len(members) > 1:
        what += f", and {len(members) - 1} more job(s) packed with it"
    return what, rules[0], models[0] if len(models) == 1 else None


class Watcher(threading.Thread):
    def __init__(
        self,
        run_id: str,
        executor,
        scheduler,
        plan: Plan,
        config: slurm.ClusterConfig,
        poll_s: float,
        by_comment: dict | None = None,
    ):
        super().__init__(name="oodcorr-slurm-watch", daemon=True)
        # the executor's --comment of each job -> the job (its SLURM id is known only while the executor lists it)
        self.by_comment = dict(by_comment or {})
        self.run_id, self.executor, self.scheduler, self.plan, self.config = run_id, executor, scheduler, plan, config
        self.poll_s = poll_s
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.jobs: dict[str, object] = {}  # SLURM id -> the Snakemake job (or group) it runs
        self.ended: dict[str, slurm.QueuedJob] = {}  # SLURM id -> its record, when SLURM ended it (ENDED_BY_SLURM)
        self.said: dict[tuple, tuple[frozenset, float]] = {}
        self.released: set[str] = set()  # jobs held after a failed launch that this run released
        self.silent_since: float | None = None
        self.full = False
        self.gone: dict[str, float] = {}  # SLURM id -> when first seen ended
        self.lost: set[str] = set()

    def run(self) -> None:
        while not self.stopped.wait(self.poll_s):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 -- watching must never stop the run; said once
                print_now(f"stopped watching the SLURM jobs ({type(e).__name__}: {e}); the run goes on")
                return

    def _snapshot(self) -> None:
        with self.executor.lock:
            infos = list(self.executor.active_jobs)
        for info in infos:
            if info.external_jobid:
                # an array task's id is <array>_<task>, as squeue lists it (slurm_cluster.queue: one line a task)
                self.jobs.setdefault(str(info.external_jobid), info.job)

    def describe(self, job: slurm.QueuedJob) -> tuple[str, str, Callable[[str], str]]:
        sm = self.jobs.get(job.id) or self.by_comment.get(job.comment)
        if sm is not None:
            what, rule, model = _describe_job(sm)
        else:
            rule, model = job.rule(RESOURCES), None
            what = f"rule {rule}"
        spec = self.plan.models.get(model) if model else None

        def key(name: str) -> str:  # the key and, where the job's model is known, its value in the config
            res = spec.resources.get(rule) if spec else None
            if res is None:
                return f"resources.{rule}.{name}"
            return f"{res.where(name).replace('<rule>', rule)}: {getattr(res, name)}"

        return what, rule, key

    def poll(self) -> None:
        self._snapshot()
        if not slurm.controller_answers():
            if self.silent_since is None:
                self.silent_since = time.monotonic()
                print_now("SLURM's controller (slurmctld) does not answer (`scontrol ping`); this run waits for it")
            return
        if self.silent_since is not None:
            print_now(f"SLURM's controller answers again, after {time.monotonic() - self.silent_since:.0f} s")
            self.silent_since = None
        found = slurm.queue([self.run_id], every_state=True)
        if found is None:
            return
        with self.lock:
            self._pending([j for j in found if j.state == "PENDING"])
            self._ended(found, say_now=True)
            self._lost(found)
        limit = self.config.max_job_count
        everything = slurm.queue(None, every_state=True) if limit is not None else None
        if everything is None:
            return
        full = len(everything) >= limit
        if full and not self.full:
            print_now(slurm.queue_full(limit, len(everything), self.config.min_job_age_s))
        self.full = full

    def _ended(self, found: list[slurm.QueuedJob], say_now: bool) -> None:
        """Record the jobs SLURM ended; forget one that runs again (requeued)."""
        for j in found:
            if j.state not in ENDED_BY_SLURM:
                if j.id in self.ended and j.state != self.ended[j.id].state:
                    del self.ended[j.id]
                continue
            if j.id not in self.ended:
                self.ended[j.id] = j
                if say_now and j.state not in REQUEUED_AFTER:
                    print_now(_ended_sentence(j, *self.describe(j)))

    def _pending(self, pending: list[slurm.QueuedJob]) -> None:
        released = slurm.release_failed_launches(pending, self.released)
        if released:
            print_now(
                f"released SLURM job(s) {', '.join(released)} of this run, held after a failed launch (once: held "
                "again, a job is named with the command to run)"
            )
        groups: dict[tuple, list[str]] = {}
        for j in pending:
            if j.id in released:
                continue
            kind = wait_kind(j.reason)
            if kind != "normal":
                groups.setdefault((kind, j.partition, j.reason), []).append(j.id)
        parts = slurm.partitions() if any(k[0] == "nodes" for k in groups) else None
        now = time.monotonic()
        for k, ids in groups.items():
            before = self.said.get(k)
            if before is None or not set(ids) <= before[0] or now - before[1] >= slurm_rerun.SAY_AGAIN_S:
                print_now(pending_sentence(*k, sorted(ids, key=lambda i: (len(i), i)), parts))
                self.said[k] = (frozenset(ids) | (before[0] if before else frozenset()), now)

    def _lost(self, found: list[slurm.QueuedJob]) -> None:
        state = {j.id: j.state for j in found}
        now = time.monotonic()
        running = getattr(self.scheduler, "running", set())
        for sid, job in list(self.jobs.items()):
            if state.get(sid) in slurm.ACTIVE_STATES:
                self.gone.pop(sid, None)
                continue
            since = self.gone.setdefault(sid, now)
            if sid not in self.lost and now - since >= LOST_AFTER_S and job in running:
                self.lost.add(sid)
                what, _, _ = _describe_job(job)
                why = (
                    "a job array's task cancelled while it waited leaves SLURM no record of it, and the executor "
                    "waits for one"
                    if "_" in sid and sid not in state
                    else "it stops watching jobs whose status it could not query"
                )
                print_now(
                    f"SLURM job {sid} ({what}) ended {state.get(sid, 'and SLURM forgot it')} "
                    f"{(now - since) / 60:.0f} minutes ago, but Snakemake's SLURM executor has not noticed ({why}) "
                    "and would wait for it forever: stop this run (Ctrl-C) and run the same command again"
                )

    def end_lines(self, failed: bool) -> list[str]:
        self.stopped.set()
        self._snapshot()
        if slurm.controller_answers():
            found = slurm.queue([self.run_id], every_state=True) or []
            with self.lock:
                self._ended(found, say_now=False)
        with self.lock:
            ended = list(self.ended.values())
        lines = []
        for j in ended[:SHOWN]:
            text = _ended_sentence(j, *self.describe(j))
            lines.append(f"oodcorr: {text}" if failed else f"oodcorr: WARNING: {text} (it was retried)")
        if len(ended) > SHOWN:
            lines.append(
                f"oodcorr: and {len(ended) - SHOWN} more SLURM job(s) that SLURM ended (`squeue --states=all`)"
            )
        return lines


def _set_by(plan: Plan, job, name: str) -> str:
    spec = plan.models.get(job.wildcards_dict.get("model")) if job.wildcards_dict.get("model") else None
    res = spec.resources.get(job.rule.name) if spec else None
    origin = res.origin.get(name) if res else None
    return f"`{origin}` in the config" if origin else f"`{name}` in the profile's default-resources"


def _asked(job) -> dict:
    """The resources and threads a submitted job asks for (what a SLURM job array must share)."""
    return {k: v for k, v in job.resources.items() if not k.startswith("_") and k != "tmpdir"} | {
        "threads": job.threads
    }


def comments(jobs) -> dict:
    """The executor's ``--comment`` of each job -> the job, where that comment names one job only."""
    # the executor's own function, so that the comment is the one it writes (keeps the plugin out of planning)
    from snakemake_executor_plugin_slurm.utils import get_job_wildcards

    named = [(f"rule_{j.name}_wildcards_{wc}" if (wc := get_job_wildcards(j)) else f"rule_{j.name}", j) for j in jobs]
    count = Counter(c for c, _ in named)
    return {c: j for c, j in named if count[c] == 1}


def executor_name(workflow) -> str:
    return str(getattr(workflow.executor_plugin, "name", "") or "local")


def at_start(workflow, plan: Plan) -> str | None:
    """In ``onstart``: record the run; on SLURM, check where it would submit and start watching; the refusal."""
    global _WATCHER
    name = executor_name(workflow)
    jobs = [j for j in workflow.dag.needrun_jobs() if not j.is_local]
    if name != "slurm" or not jobs:
        slurm_rerun.record_run(plan, name, None)
        return None
    settings = workflow.executor_settings
    no_account = bool(getattr(settings, "no_account", False))
    res = slurm.run(["scontrol", "show", "config"])
    if res is None or res.returncode != 0:
        return (
            f"SLURM does not answer (`scontrol show config`: {slurm.first_line(res)}): nothing was submitted. Run "
            "again when it does"
        )
    config = slurm.parse_config(res.stdout)
    init_s = int(getattr(settings, "init_seconds_before_status_checks", None) or 40)
    refusals, warnings = slurm.status_problems(getattr(settings, "status_command", None), init_s, config)
    accounts = slurm.user_accounts() if config.accounting else None
    placed = [
        slurm.Placement(
            j.rule.name,
            j.resources.get("slurm_partition") or None,
            j.resources.get("slurm_account") or None,
            _set_by(plan, j, "slurm_partition"),
            _set_by(plan, j, "slurm_account"),
        )
        for j in jobs
    ]
    more = slurm.placement_problems(placed, slurm.partitions() or {}, config, accounts, no_account)
    refusals, warnings = refusals + more[0], warnings + more[1]
    rate = getattr(getattr(workflow, "scheduling_settings", None), "max_jobs_per_timespan", None)
    refusals += slurm.array_problems(
        getattr(settings, "array_jobs", None),
        [(j.rule.name, _asked(j)) for j in jobs],
        int(workflow.nodes or 1),
        getattr(rate, "max_jobs", None),
        getattr(settings, "status_command", None),
    )
    held = slurm.queue(None, every_state=True)
    submissions = len({id(workflow.dag.get_job_group(j) or j) for j in jobs})
    room = slurm.queue_room(submissions, int(workflow.nodes or 1), config, len(held or []))
    for w in warnings + ([room] if room else []):
        print(f"oodcorr warning: {w}", file=sys.stderr, flush=True)
    if refusals:
        return "nothing was submitted: " + "\noodcorr: ".join(refusals)
    executor = workflow.scheduler.get_executor(jobs[0])
    slurm_wrap.install(Path(".snakemake", "oodcorr-slurm"), res.stdout, no_account)
    run_id = getattr(executor, "run_uuid", None)
    slurm_rerun.record_run(plan, name, run_id)
    if run_id and hasattr(executor, "active_jobs"):
        _WATCHER = Watcher(
            run_id, executor, workflow.scheduler, plan, config, slurm_rerun.poll_seconds(), comments(jobs)
        )
        _WATCHER.start()
    return None


def end_lines(failed: bool) -> list[str]:
    """In ``onerror``/``onsuccess``: the jobs SLURM ended for a limit or a failure (never raises)."""
    if _WATCHER is None:
        return []
    try:
        return _WATCHER.end_lines(failed)
    except Exception as e:  # noqa: BLE001 -- the handler must finish
        return [f"oodcorr: the SLURM jobs' states could not be gathered ({type(e).__name__}: {e})"]
