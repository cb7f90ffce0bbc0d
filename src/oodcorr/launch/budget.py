"""What an experiment will cost, before it is submitted (``oodcorr budget``), as markdown and JSON.

GPU-hours are GPUs x time limits (what a compute-time request must cover), and expected where finished
jobs of the same model measured their cost; with ``--throughput``, from the work too (:func:`work`)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.atomic_write import write_json_atomic, write_text_atomic
from ..core.errors import ConfigError
from ..core.filesystems import human_bytes
from ..core.io import json_or_none
from ..core.records import job_seconds, read_result
from ..core.yaml_files import load_yaml
from ..modeling.hub import cache_warnings
from ..planning.plan import MODEL_RULES
from .sizing import checkpoint_bytes, model_size
from .slurm_cluster import array_rules

ARRAY_LIMIT = 1000  # the executor's default slurm-array-limit (2.8.0); SLURM's MaxArraySize may lower it


@dataclass
class RuleCost:
    rule: str
    jobs: int
    submitted: int  # SLURM submissions (0: runs on the submitting node)
    gpus_per_job: list[int] = field(default_factory=list)
    gpu_hours: float = 0.0  # GPUs x time limits
    gpu_hours_expected: float = 0.0  # measured where known, else the limits
    measured_jobs: int = 0  # jobs whose expected cost is a measurement
    cpu_core_hours: float = 0.0  # threads x time limits, jobs without a GPU
    partitions: list[str] = field(default_factory=list)


@dataclass
class Budget:
    experiment: str
    config: str
    unit: str
    profile: dict
    rules: list[RuleCost]
    checkpoint_bytes: int | None
    checkpoint_notes: list[str]
    optimizer_state_bytes: int | None
    download_bytes: int | None
    download_note: str
    longest_path_min: float
    longest_path_run: str
    gpus: int | None
    wall_hours_at_least: float | None
    notes: list[str]
    work: dict | None = None  # GPU-hours from the work (:func:`work`), when a throughput is given

    @property
    def totals(self) -> dict:
        return {
            "jobs": sum(r.jobs for r in self.rules),
            "submitted": sum(r.submitted for r in self.rules),
            "gpu_hours": round(sum(r.gpu_hours for r in self.rules), 6),
            "gpu_hours_expected": round(sum(r.gpu_hours_expected for r in self.rules), 6),
            "cpu_core_hours": round(sum(r.cpu_core_hours for r in self.rules), 6),
        }

    def to_json(self) -> dict:
        out = asdict(self)
        out["totals"] = self.totals
        for r in out["rules"]:
            for k in ("gpu_hours", "gpu_hours_expected", "cpu_core_hours"):
                r[k] = round(r[k], 6)
        return out


def read_profile(folder: str | Path | None) -> dict:
    """What of a Snakemake profile shapes the budget."""
    if folder is None:
        return {}
    path = Path(folder) / "config.yaml"
    prof = load_yaml(path) or {}  # its size and depth checked before it is built (oodcorr.core.limits)
    if not isinstance(prof, dict):
        raise ConfigError(f"--profile {folder}: {path} must map Snakemake options to values")
    defaults = prof.get("default-resources") or {}
    return {
        "path": str(folder),
        "executor": prof.get("executor", "local"),
        "jobs": prof.get("jobs"),
        "group_components": dict(prof.get("group-components") or {}),
        "groups": dict(prof.get("groups") or {}),
        "default_partition": defaults.get("slurm_partition"),
        "default_account": defaults.get("slurm_account"),
        "array_jobs": prof.get("slurm-array-jobs"),
        "array_limit": prof.get("slurm-array-limit"),
    }


def measured_costs(plan) -> dict:
    """Seconds finished jobs of this experiment took, by (rule, model, testset or None, device kind)."""
    out: dict[tuple, list[float]] = {}
    for run in plan.runs:
        info = json_or_none(plan.paths.manifest.format(**run.wildcards)) or {}
        if info.get("trained") and info.get("seconds") and info.get("device"):
            kind = "gpu" if str(info["device"]).startswith("cuda") else "cpu"
            out.setdefault(("finetune", run.model, None, kind), []).append(float(info["seconds"]))
    for job in plan.eval_jobs:
        for step in job.steps:
            path = Path(plan.predictions_path(job.run, step, job.testset))
            if not path.exists():
                continue
            try:
                rec = read_result(path)
            except (OSError, ValueError):
                continue
            kind = "gpu" if str(rec.get("device", "")).startswith("cuda") else "cpu"
            out.setdefault(("evaluate", job.run.model, job.testset, kind), []).append(job_seconds(rec))
    return {k: statistics.median(v) for k, v in out.items()}


def _testsets_of(plan, model: str) -> set[str]:
    """The testsets a model's runs are evaluated on (each tokenised once per model)."""
    return {t for d in {r.in_domain for r in plan.runs if r.model == model} for t, _ in plan.testsets[d]}


def job_counts(plan) -> dict[str, int]:
    """Jobs per rule, as Snakemake schedules them for the whole experiment."""
    tiny = [m for m, s in plan.models.items() if s.model_entry.is_tiny]
    n_models = len(plan.models)
    counts = {
        "prepare_dataset": len(plan.datasets),
        "pretraining_corpus": 1 if tiny else 0,
        "build_tiny_model": len(tiny),
        "convert_gguf": len([m for m, s in plan.models.items() if s.model_entry.is_gguf]),
        "tokenize_testset": sum(len(_testsets_of(plan, m)) for m in plan.models),
        "finetune": len([r for r in plan.runs if not r.series]),
        # one manifest per given checkpoint of a series model, whatever its in-domain sets
        "series_checkpoint": len({(r.model, s) for r in plan.runs if r.series for s in r.steps}),
        "evaluate": len(plan.eval_jobs),
        "aggregate_scores": 1,
        "accuracy_table": 1,
        "partial_correlations": 1,
        "consensus_heatmap": len(plan.consensus_sets()),
        "explorer": 1,
        # one job draws every pair's forest plot (none without a consensus)
        "forest_plots": 1 if plan.forest_figures() else 0,
        "heatmap": n_models,
        "heatmap_grid": 1,
        "learning_curves": n_models,
        "scatter": n_models,
        "training_loss": sum(not s.model_entry.is_series for s in plan.models.values()),  # a series has no loss
        "publish_results": 1,
        "all": 1,
    }
    return {k: v for k, v in counts.items() if v}


def _model_jobs(plan, rule: str) -> list[tuple[str, int, str | None]]:
    """(model, time limits, testset) for every job of a per-model rule (an evaluation's is per checkpoint)."""
    if rule == "evaluate":
        return [(j.run.model, len(j.steps), j.testset) for j in plan.eval_jobs]
    if rule == "finetune":
        return [(r.model, 1, None) for r in plan.runs]
    if rule in ("build_tiny_model", "convert_gguf"):
        built = "is_tiny" if rule == "build_tiny_model" else "is_gguf"
        return [(m, 1, None) for m, s in plan.models.items() if getattr(s.model_entry, built)]
    return [(m, 1, t) for m in plan.models for t in sorted(_testsets_of(plan, m))]


def array_submissions(plan, limit: int) -> dict:
    """The evaluation jobs' SLURM submissions as job arrays of at most ``limit`` tasks. An array holds the
    evaluations that became ready together, so the count depends on the order jobs end in: ``at_most`` one
    per run x testset (a series run's checkpoints come one at a time), ``one_per_run`` where every testset
    is tokenised before its run's finetune ends, ``at_least`` each model's evaluations at once.
    ``resource_sets``: the models' different evaluate resources (an array gives every task the first's)."""
    pair = Counter((j.run.id, j.testset, *(tuple(j.steps) if j.run.series else ())) for j in plan.eval_jobs)
    run = Counter(j.run.id for j in plan.eval_jobs)
    model = Counter(j.run.model for j in plan.eval_jobs)

    def chunks(counts: dict) -> int:
        return sum(math.ceil(n / limit) for n in counts.values())

    return {
        "limit": limit,
        "jobs": len(plan.eval_jobs),
        "at_most": chunks(pair),
        "one_per_run": chunks(run),
        "at_least": chunks(model),
        "resource_sets": len({plan.models[m].resources["evaluate"] for m in model}),
    }


def compute(
    plan,
    *,
    configfile: str = "",
    lock=None,
    profile: dict | None = None,
    gpus: int | None = None,
    measured: dict | None = None,
) -> Budget:
    profile = profile or {}
    measured = measured or {}
    counts = job_counts(plan)
    slurm = profile.get("executor") == "slurm"
    default_partition = profile.get("default_partition") or "(SLURM's default)" if profile else "(the profile's)"
    notes: list[str] = []
    rules = []
    for rule, n in counts.items():
        cost = RuleCost(rule, n, n if rule in MODEL_RULES else 0)  # every other rule is a `localrules` one
        if rule in MODEL_RULES:
            gpus_seen, parts = set(), set()
            gpu_min = cpu_min = 0  # whole minutes: sums without rounding error
            expected_s = 0.0
            for model, steps, testset in _model_jobs(plan, rule):
                res = plan.models[model].resources[rule]
                minutes = res.runtime * steps
                gpus_seen.add(res.gpu)
                parts.add(res.slurm_partition or default_partition)
                if res.gpu:
                    gpu_min += res.gpu * minutes
                    # only a measurement of the same model (and testset: their sizes differ a hundredfold) on a GPU
                    secs = measured.get((rule, model, testset if rule == "evaluate" else None, "gpu"))
                    if secs is not None:
                        expected_s += res.gpu * secs * steps
                        cost.measured_jobs += 1
                    else:
                        expected_s += res.gpu * minutes * 60
                else:
                    cpu_min += res.threads * minutes
            cost.gpu_hours, cost.cpu_core_hours = gpu_min / 60, cpu_min / 60
            cost.gpu_hours_expected = expected_s / 3600
            cost.gpus_per_job = sorted(gpus_seen)
            cost.partitions = sorted(parts)
        if rule == "evaluate" and cost.submitted:
            k = int((profile.get("group_components") or {}).get("evaluate", 1) or 1)
            packed = k > 1 and "evaluate" in (profile.get("groups") or {})
            if packed:
                cost.submitted = math.ceil(n / k)
                notes.append(
                    f"evaluations are packed {k} per SLURM job (the profile's PACKING block): "
                    f"{cost.submitted} submissions"
                )
            if slurm:
                arrays = array_submissions(plan, int(profile.get("array_limit") or ARRAY_LIMIT))
                on = bool({"evaluate", "all"} & array_rules(profile.get("array_jobs"))) and not packed
                if on:
                    cost.submitted = arrays["at_most"]
                notes.append(_arrays_note(arrays, on, packed, n))
        rules.append(cost)

    # checkpoints: every run's saved steps, plus one checkpoint's optimizer state while it trains
    total: int | None = 0
    opt: int | None = 0
    ck_notes = []
    for m, spec in plan.models.items():
        runs = [r for r in plan.runs if r.model == m]
        per, how = checkpoint_bytes(spec, model_size(spec, lock))
        n_ckpt = sum(len(r.steps) for r in runs)
        if per is None:
            total = opt = None  # one unknown model makes the sum unknown: never a partial total
            ck_notes.append(f"{m}: {n_ckpt} checkpoints, {how}")
            continue
        if total is not None:
            total += per * n_ckpt
            # Adam's two states of what trains (LoRA: the fp32 adapter; full: the weights, same dtype)
            opt += 2 * per * len(runs)
        ck_notes.append(f"{m}: {n_ckpt} checkpoints x {human_bytes(per)} ({how})")
    if lock is not None:
        download, dnote = lock.download_bytes, f"from the lock file {lock.path}"
    elif any(s.model_entry.source == "hub" for s in plan.models.values()) or any(
        plan.exp.dataset(d).get("source") == "hub" for d in plan.datasets
    ):
        download, dnote = None, "run oodcorr prefetch: the lock lists every file and its size"
    else:
        download, dnote = 0, "nothing to download (no hub models or datasets)"

    # the longest chain of submitted jobs, at their limits
    longest, which = 0.0, ""
    for run in plan.runs:
        res = plan.models[run.model].resources
        model_entry = plan.models[run.model].model_entry
        built_by = "build_tiny_model" if model_entry.is_tiny else "convert_gguf" if model_entry.is_gguf else None
        build = res[built_by].runtime if built_by else 0
        ev = res["evaluate"].runtime * (len(run.steps) if plan.unit == "run" else 1)
        t = build + max(res["finetune"].runtime, res["tokenize_testset"].runtime) + ev
        if t > longest:
            longest, which = t, run.id
    gpu_hours = sum(r.gpu_hours for r in rules)
    wall = max(longest / 60, gpu_hours / gpus) if gpus else None
    if slurm:
        notes += cache_warnings()
        gpu_parts = {p for r in rules if r.rule in MODEL_RULES and any(r.gpus_per_job) for p in r.partitions}
        for r in rules:
            if r.rule in MODEL_RULES and r.gpus_per_job == [0] and set(r.partitions) & gpu_parts:
                notes.append(
                    f"the {r.jobs:,} {r.rule} jobs ask for no GPU but go to partition "
                    f"{', '.join(sorted(set(r.partitions) & gpu_parts))}, like the GPU jobs: set "
                    "resources.cpu.slurm_partition in the config to send them to a CPU partition"
                )
    notes.append(
        "not counted: data preparation, aggregation and analysis on the submitting node; tokenised "
        "testsets and predictions files on disk (small next to checkpoints)"
    )
    return Budget(
        experiment=plan.experiment,
        config=str(configfile),
        unit=plan.unit,
        profile=profile,
        rules=rules,
        checkpoint_bytes=total,
        checkpoint_notes=ck_notes,
        optimizer_state_bytes=opt,
        download_bytes=download,
        download_note=dnote,
        longest_path_min=longest,
        longest_path_run=which,
        gpus=gpus,
        wall_hours_at_least=wall,
        notes=notes,
    )


def _arrays_note(a: dict, on: bool, packed: bool, n: int) -> str:
    how = (
        "as SLURM job arrays (the profile's ARRAYS block)"
        if on
        else "with the profile's ARRAYS block (`slurm-array-jobs: evaluate`; "
        + ("grouped jobs are never arrays: not with PACKING)" if packed else "commented out here)")
    )
    line = (
        f"evaluations {how}, arrays of up to {a['limit']:,}: the {a['jobs']:,} evaluation jobs go in at most "
        f"{a['at_most']:,} SLURM submissions (one per run x testset), {a['one_per_run']:,} where every testset is "
        f"tokenised before its run's finetune ends (one per run), at least {a['at_least']:,}; {n:,} without arrays"
    )
    if a["resource_sets"] > 1:
        line += (
            f". This config's evaluations ask for {a['resource_sets']} different resources (per model): an array "
            "gives every task the first job's, so run the models one at a time (oodcorr refuses a run that mixes them)"
        )
    return line


def parse_throughput(values) -> dict[str, float]:
    """``["400", "opt-30b=350", "13b=380"]`` -> ``{"": 400.0, "opt-30b": 350.0, "13b": 380.0}``: TFLOP/s
    one GPU reaches, by model name or size class (the empty key: every other job)."""
    out = {}
    for v in values or ():
        key, _, num = str(v).rpartition("=")
        try:
            t = float(num)
        except ValueError:
            raise ValueError(
                f"--throughput {v!r}: give TFLOP/s per GPU as a number, or MODEL=number / SIZE_CLASS=number"
            ) from None
        if not t > 0:
            raise ValueError(f"--throughput {v!r}: the throughput must be positive")
        out[key.strip()] = t
    return out


FLOP_PER_TOKEN = {
    "full": 6,
    "lora": 4,
    "score": 2,
}  # per parameter: forward 2, activation gradients 2, weight gradients 2


def work(
    plan,
    throughput: dict[str, float],
    *,
    lock=None,
    examples: dict | None = None,
    tokens_per_example: float | None = None,
    measured: dict | None = None,
) -> dict:
    """GPU-hours from the work, per rule: each job's FLOP (upper bounds: every example at ``max_length``)
    over one GPU's throughput (a finished job's measured one, else ``throughput``)."""
    examples = examples or {}
    tokens = float(tokens_per_example or (plan.exp.config.get("evaluation") or {}).get("max_length") or 0)
    measured = measured or {}
    # (rule, model[, testset]) -> [FLOP per job, jobs, limit GPU-seconds per job], None where a count is unknown
    per_job = {}
    for m, spec in plan.models.items():
        n = model_size(spec, lock).parameters
        runs = [r for r in plan.runs if r.model == m]
        if not spec.model_entry.is_series:
            ft = spec.finetune
            per_step = ft.get("batch_size", 1) * ft.get("gradient_accumulation_steps", 1) * ft.get("max_length", 0)
            trained = per_step * sum(r.max_steps for r in runs)
            per = FLOP_PER_TOKEN["lora" if spec.lora else "full"]
            res = spec.resources["finetune"]
            per_job[("finetune", m)] = [
                per * n * trained / len(runs) if n and trained and runs else None,
                len(runs),
                res.gpu * res.runtime * 60,
            ]
        res = spec.resources["evaluate"]
        for r in runs:
            for t, _ in plan.testsets[r.in_domain]:
                e = examples.get(t)
                flop = FLOP_PER_TOKEN["score"] * n * e * tokens if n and e else None
                per_job.setdefault(("evaluate", m, t), [flop, 0, res.gpu * res.runtime * 60])[1] += len(r.steps)
    classes = {m: (plan.exp.models.get(m) or {}).get("size_class") for m in plan.models}
    rules: dict[str, dict] = {}
    used: dict[str, float] = {}
    notes = []
    for key, (flop, jobs, limit_s) in per_job.items():
        rule, m = key[0], key[1]
        r = rules.setdefault(
            rule, {"flop": 0.0, "gpu_hours": 0.0, "jobs": 0, "jobs_unknown": 0, "limit_gpu_hours_known": 0.0}
        )
        r["jobs"] += jobs
        if flop is None:
            r["jobs_unknown"] += jobs
            continue
        secs = measured.get((rule, m, key[2] if rule == "evaluate" else None, "gpu"))
        if secs:
            gpus = plan.models[m].resources[rule].gpu or 1
            t = flop / (secs * gpus) / 1e12
            used[f"{rule} {m}" + (f" {key[2]}" if rule == "evaluate" else "")] = t
        else:
            t = throughput.get(m) or throughput.get(classes.get(m) or "\0") or throughput.get("")
        if not t:
            r["jobs_unknown"] += jobs
            continue
        r["flop"] += flop * jobs
        r["gpu_hours"] += flop * jobs / (t * 1e12) / 3600
        r["limit_gpu_hours_known"] += limit_s * jobs / 3600
    for rule, r in rules.items():
        r["implied_tflops"] = (
            r["flop"] / (r["limit_gpu_hours_known"] * 3600) / 1e12 if r["limit_gpu_hours_known"] else None
        )
        if r["jobs_unknown"]:
            notes.append(
                f"{r['jobs_unknown']:,} of the {r['jobs']:,} {rule} jobs have no work estimate: "
                + (
                    "a model's parameter count is unknown (params_b, or oodcorr prefetch) or no throughput applies"
                    if rule == "finetune"
                    else "a testset's size is unknown before its data is prepared (give --examples N) or a "
                    "model's parameter count, or no throughput applies"
                )
            )
    known = all(r["jobs_unknown"] == 0 for r in rules.values())
    return {
        "throughput_tflops": throughput,
        "measured_tflops": used,
        "tokens_per_example": tokens,
        "examples": examples,
        "rules": rules,
        "gpu_hours": sum(r["gpu_hours"] for r in rules.values()) if known else None,
        "gpu_hours_known_part": sum(r["gpu_hours"] for r in rules.values()),
        "notes": notes,
    }


def markdown(b: Budget) -> str:
    prof = b.profile
    where = "no profile"
    if prof:
        jobs = f", at most {prof['jobs']} jobs at once" if prof.get("jobs") else ""
        where = f"profile {prof['path']} (executor {prof['executor']}{jobs})"
    lines = [
        f"# Budget: experiment {b.experiment}",
        "",
        f"Config {b.config}, evaluation unit `{b.unit}`, {where}. Written by `oodcorr budget`; GPU-hours "
        "are GPUs x time limits (`runtime`), the most the jobs may use; *expected* replaces a job's limit "
        "by what finished jobs of the same model and testset took on a GPU, where there are any.",
        "",
        "| rule | jobs | submitted | GPUs/job | GPU-hours (limits) | GPU-hours (expected) | measured jobs "
        "| CPU core-hours | partition |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in b.rules:
        lines.append(
            f"| {r.rule} | {r.jobs:,} | {r.submitted:,} | {'/'.join(map(str, r.gpus_per_job)) or '-'} | "
            f"{r.gpu_hours:,.1f} | {r.gpu_hours_expected:,.1f} | {r.measured_jobs:,} | "
            f"{r.cpu_core_hours:,.1f} | {', '.join(r.partitions) or ('local' if not r.submitted else '-')} |"
        )
    t = b.totals
    lines += [
        f"| **total** | **{t['jobs']:,}** | **{t['submitted']:,}** | | **{t['gpu_hours']:,.1f}** | "
        f"**{t['gpu_hours_expected']:,.1f}** | | **{t['cpu_core_hours']:,.1f}** | |",
        "",
    ]
    lines.append(
        f"* **Checkpoint disk**: {human_bytes(b.checkpoint_bytes)}"
        + (
            f", plus up to {human_bytes(b.optimizer_state_bytes)} of optimizer state while runs train "
            "(one checkpoint per run keeps it)"
            if b.optimizer_state_bytes
            else ""
        )
    )
    lines += [f"  * {n}" for n in b.checkpoint_notes]
    lines.append(
        f"* **Download**: {human_bytes(b.download_bytes) if b.download_bytes is not None else 'unknown'} "
        f"({b.download_note})"
    )
    lines.append(
        f"* **Longest path**: {b.longest_path_min / 60:,.1f} h ({b.longest_path_min:,.0f} min, run "
        f"{b.longest_path_run}: its finetune, or tokenisation, then one evaluation job, at their time "
        "limits): the wall time with a free GPU for every job"
    )
    if b.gpus:
        lines.append(
            f"* **Wall time on {b.gpus} GPUs**: at least {b.wall_hours_at_least:,.1f} h "
            "(the larger of the longest path and GPU-hours / GPUs)"
        )
    lines += [f"* {n}" for n in b.notes]
    if b.work:
        w = b.work
        given = ", ".join(f"{k or 'every other job'} {v:g}" for k, v in w["throughput_tflops"].items()) or "none"
        lines += [
            "",
            "**GPU-hours from the work** (an estimate of what the jobs use, beside the limits above, which are "
            f"what they reserve): FLOP / (TFLOP/s per GPU), throughput given {given} TFLOP/s"
            + (f", measured for {len(w['measured_tflops'])} model x rule(s)" if w["measured_tflops"] else "")
            + f"; {w['tokens_per_example']:g} tokens per scored example. Start-up and model loading are not in it.",
            "",
            "| rule | jobs | TFLOP (work) | GPU-hours (work) | TFLOP/s the limits assume |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for rule, r in w["rules"].items():
            imp = r["implied_tflops"]
            unknown = f" ({r['jobs_unknown']:,} unknown)" if r["jobs_unknown"] else ""
            lines.append(
                f"| {rule} | {r['jobs']:,}{unknown} | {r['flop'] / 1e12:,.0f} | {r['gpu_hours']:,.1f} | "
                f"{'n/a' if imp is None else f'{imp:,.0f}'} |"
            )
        total = w["gpu_hours"]
        shown = f"{total:,.1f}" if total is not None else f"{w['gpu_hours_known_part']:,.1f} (known part)"
        lines.append(f"| **total** | | | **{shown}** | |")
        lines += [f"* {n}" for n in w["notes"]]
    return "\n".join(lines) + "\n"


def write(b: Budget, prefix: str | Path) -> tuple[Path, Path]:
    prefix = Path(prefix)
    md, js = prefix.with_name(prefix.name + ".md"), prefix.with_name(prefix.name + ".json")
    write_text_atomic(md, markdown(b))
    write_json_atomic(js, b.to_json())
    return md, js
