"""GPU-hours from the work, beside the budget's limits: ``oodcorr budget --throughput`` (:func:`work`).
Each job's operations (parameters x tokens: about 6 to finetune every weight, 4 for LoRA, 2 to score)
at a GPU's throughput, given per model or size class or measured by finished jobs.
"""

from __future__ import annotations

from .sizing import model_size


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


def _job_work(plan, lock, examples: dict, tokens_per_example: float) -> dict:
    """(rule, model) -> [FLOP per job, jobs, limit GPU-seconds per job], None where a count is unknown."""
    out = {}
    for m, spec in plan.models.items():
        n = model_size(spec, lock).parameters
        runs = [r for r in plan.runs if r.model == m]
        if not spec.model_entry.is_series:
            ft = spec.finetune
            tokens = sum(
                r.max_steps
                * ft.get("batch_size", 1)
                * ft.get("gradient_accumulation_steps", 1)
                * ft.get("max_length", 0)
                for r in runs
            )
            per = FLOP_PER_TOKEN["lora" if spec.lora else "full"]
            res = spec.resources["finetune"]
            out[("finetune", m)] = [
                per * n * tokens / len(runs) if n and tokens and runs else None,
                len(runs),
                res.gpu * res.runtime * 60,
            ]
        res = spec.resources["evaluate"]
        for r in runs:
            for t, _ in plan.testsets[r.in_domain]:
                e = examples.get(t)
                flop = FLOP_PER_TOKEN["score"] * n * e * tokens_per_example if n and e else None
                key = ("evaluate", m, t)
                if key not in out:
                    out[key] = [flop, 0, res.gpu * res.runtime * 60]
                out[key][1] += len(r.steps)
    return out


def work(
    plan,
    throughput: dict[str, float],
    *,
    lock=None,
    examples: dict | None = None,
    tokens_per_example: float | None = None,
    measured: dict | None = None,
) -> dict:
    """GPU-hours from the work, per rule: each finetune's and evaluation's FLOP (upper bounds: every
    example at ``max_length``) over one GPU's throughput (a finished job's measured one, else
    ``throughput`` for the model or its size class), and the throughput the time limits assume.
    """
    examples = examples or {}
    tokens = float(tokens_per_example or (plan.exp.config.get("evaluation") or {}).get("max_length") or 0)
    measured = measured or {}
    per_job = _job_work(plan, lock, examples, tokens)
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
