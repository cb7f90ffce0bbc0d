"""Model sizes: parameter counts, the GPU memory a job needs at least, checkpoint sizes (no torch)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.model_dirs import package_dir
from ..modeling.weights import weight_shapes

GiB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 4}
MARGIN_FACTOR = 1.2
MARGIN_GIB = 2.0
ADAPTER_TRAIN_BYTES = 16  # per trainable fp32 parameter: weight, gradient, Adam's two states
ADAPTER_SAVE_BYTES = 4


@dataclass(frozen=True)
class ModelSize:
    parameters: int | None
    source: str  # where the count comes from, or why it is unknown
    linear: dict | None = None  # module name -> [[out, in, count], ...]


def model_size(spec, lock=None) -> ModelSize:
    """The size of a plan's model: from the hub lock, else a local folder's safetensors headers, else ``params_b``."""
    if lock is not None and spec.name in lock.models and lock.models[spec.name].get("parameters"):
        e = lock.models[spec.name]
        return ModelSize(int(e["parameters"]), f"the lock file {lock.path}", e.get("linear"))
    entry = spec.model_entry
    folder = Path(entry.path) if entry.path else None
    if folder is None and entry.package:
        with contextlib.suppress(ConfigError):  # not installed: no headers to read
            folder = package_dir(entry)
    if folder is not None and folder.is_dir() and any(folder.glob("*.safetensors")):
        params, linear = weight_shapes(folder)
        return ModelSize(params, f"the safetensors headers in {folder}", linear)
    if spec.params_b:
        return ModelSize(int(round(spec.params_b * 1e9)), f"models[{spec.name}].params_b")
    if spec.model_entry.source == "tiny":
        return ModelSize(None, "a tiny model, built by the workflow (its size is known once built)")
    if spec.model_entry.source == "hub":
        return ModelSize(None, "no lock entry (run oodcorr prefetch) and no params_b on the entry")
    return ModelSize(None, "no safetensors weights to read and no params_b on the entry")


def lora_parameters(size: ModelSize, lora: dict) -> int | None:
    """Parameters of a LoRA adapter: r x (in + out) per targeted linear layer; None without the shapes
    or without explicit ``target_modules`` (peft's default targets depend on the architecture)."""
    targets = lora.get("target_modules")
    if not size.linear or not targets:
        return None
    r = int(lora["r"])
    return sum(r * (o + i) * count for t in targets for o, i, count in size.linear.get(t, []))


def _shards(spec) -> tuple[int, int]:
    """(GPUs the weights are split over, GPUs the gradients and optimizer state are split over)."""
    dist = spec.distributed
    if not dist:
        return 1, 1
    g = int(dist["gpus"])
    if dist["strategy"] == "fsdp":
        how = (dist.get("fsdp") or {}).get("sharding_strategy", "FULL_SHARD")
        return {"FULL_SHARD": (g, g), "HYBRID_SHARD": (g, g), "SHARD_GRAD_OP": (1, g)}.get(how, (1, 1))
    stage = int((dist.get("deepspeed") or {}).get("zero_stage", 3))
    return (g, g) if stage >= 3 else (1, g) if stage >= 1 else (1, 1)


def gpu_memory(spec, rule: str, size: ModelSize) -> tuple[float, str] | None:
    """(GiB one GPU of a ``finetune`` or ``evaluate`` job of ``spec`` needs at least, how that was worked out), None
    when the parameter count is unknown. Without activations: a job that cannot fit is caught, not every one that
    will not."""
    p = size.parameters
    if p is None:
        return None
    dtype = spec.model_entry.dtype
    b = DTYPE_BYTES.get(dtype, 4)
    what = f"{p / 1e9:.2f} B parameters (from {size.source}) x {b} bytes ({dtype})"
    w_shard, s_shard = (1, 1) if rule == "evaluate" else _shards(spec)
    if rule == "evaluate":
        weights, states, parts = p * b, 0.0, "weights"
    elif spec.lora:
        adapter = lora_parameters(size, spec.finetune["lora"]) or 0
        weights, states = p * b, adapter * ADAPTER_TRAIN_BYTES
        parts = (
            "frozen weights + the LoRA adapter's training state"
            if adapter
            else "frozen weights (the LoRA adapter's own state, under 1%, not counted)"
        )
    else:
        weights, states = 2 * p * b, 2 * p * b
        parts = "weights and gradients + two Adam states"
    raw = weights / w_shard + states / s_shard
    gib = raw / GiB * MARGIN_FACTOR + MARGIN_GIB
    shard = (
        f", split over {w_shard} GPUs"
        if w_shard > 1
        else (f", optimizer state split over {s_shard} GPUs" if s_shard > 1 else "")
    )
    return (
        gib,
        f"{what}: {raw / GiB:.1f} GiB of {parts}{shard}, x {MARGIN_FACTOR} + {MARGIN_GIB:g} GiB; "
        "activations not counted",
    )


def check_gpu_memory(plan, lock=None) -> list[str]:
    """Every GPU job's model fits the GPUs it asks for (``gpu_mem_gb``); warnings for checks not made."""
    errors, unknown, unset = [], [], {}
    for name, spec in plan.models.items():
        size = None
        for rule in ("finetune", "evaluate"):
            res = spec.resources[rule]
            if not res.gpu:
                continue
            if res.gpu_mem_gb is None:
                unset.setdefault(name, []).append(rule)
                continue
            size = size or model_size(spec, lock)
            need = gpu_memory(spec, rule, size)
            if need is None:
                unknown.append(f"models[{name}] ({size.source})")
                break
            gib, explain = need
            if gib > res.gpu_mem_gb:
                fixes = [
                    f"GPUs with more memory ({res.where('gpu_mem_gb')}, and gpu_model or constraint to get them)",
                    f"a smaller dtype (models[{name}].dtype)",
                ]
                if rule == "finetune":
                    more = "more" if spec.distributed else "several"
                    fixes.append(f"sharding over {more} GPUs (models[{name}].distributed: FSDP or DeepSpeed)")
                    if not spec.lora:
                        fixes.append(f"LoRA (models[{name}].finetune.lora)")
                errors.append(
                    f"models[{name}]: its {rule} jobs need at least {gib:.1f} GiB on each GPU "
                    f"({explain}) but asks for GPUs of {res.gpu_mem_gb:g} GiB "
                    f"({res.where('gpu_mem_gb')}). Use " + ", or ".join(fixes)
                )
    if errors:
        raise ConfigError("a model does not fit the GPUs its jobs ask for:\n  " + "\n  ".join(errors))
    warnings = []
    if unknown:
        warnings.append(
            f"GPU memory check skipped for {'; '.join(unknown)}: parameter count unknown (run oodcorr prefetch, or "
            "set params_b on the model entry)"
        )
    if unset:
        shown = ", ".join(f"{m} ({', '.join(r)})" for m, r in unset.items())
        warnings.append(
            f"GPU memory not checked for {shown}: set gpu_mem_gb (GiB per GPU) in their size class or resources"
        )
    return warnings


def checkpoint_bytes(spec, size: ModelSize) -> tuple[int | None, str]:
    """(bytes of one saved checkpoint of a run, how that was worked out); None when unknown."""
    if spec.lora:
        a = lora_parameters(size, spec.finetune["lora"])
        if a is None:
            why = (
                "no target_modules given"
                if not spec.finetune["lora"].get("target_modules")
                else "it needs the model's layer shapes, which oodcorr prefetch reads from the safetensors headers"
            )
            return None, f"LoRA adapter size unknown: {why}"
        return a * ADAPTER_SAVE_BYTES, f"LoRA adapter: {a:,} parameters x {ADAPTER_SAVE_BYTES} bytes"
    if size.parameters is None:
        return None, f"full weights, size unknown ({size.source})"
    b = DTYPE_BYTES.get(spec.model_entry.dtype, 4)
    return size.parameters * b, f"full weights: {size.parameters / 1e9:.3f} B parameters x {b} bytes"
