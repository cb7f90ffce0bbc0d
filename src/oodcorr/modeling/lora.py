"""LoRA checkpoints scored at full speed: the adapter folded into the base model's weights."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from .plain_torch import read_safetensors

PREFIX = "base_model.model."
# adapter_config.json keys a fold reads
READ = {"peft_type", "r", "lora_alpha", "use_rslora", "modules_to_save", "target_modules"}
# keys that change nothing in a trained adapter's forward pass (where it came from, how it was
# initialised or trained, which modules it was put on: the saved tensors say that)
BOOKKEEPING = {
    "base_model_name_or_path",
    "revision",
    "task_type",
    "peft_version",
    "inference_mode",
    "init_lora_weights",
    "lora_dropout",
    "exclude_modules",
    "layers_to_transform",
    "layers_pattern",
    "auto_mapping",
    "megatron_core",
    "qalora_group_size",
    "loftq_config",
    "corda_config",
    "eva_config",
    "lora_ga_config",
    "kasa_config",
}
# keys whose neutral value is the only one a fold knows (any other value: scored with peft)
NEUTRAL = {
    "bias": "none",
    "fan_in_fan_out": False,
    "use_dora": False,
    "lora_bias": False,
    "rank_pattern": {},
    "alpha_pattern": {},
}


@dataclass
class Adapter:
    """A LoRA checkpoint's tensors, read for folding: per adapted module its ``A``, ``B`` and
    scale; per ``modules_to_save`` parameter its trained value."""

    path: str
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor, float]]
    replace: dict[str, torch.Tensor]


@dataclass
class Folded:
    """Which weights a fold changed and what they held before, to put them back."""

    originals: dict[str, torch.Tensor] = field(default_factory=dict)

    def restore(self, model: nn.Module) -> None:
        params = dict(model.named_parameters(remove_duplicate=False))
        with torch.no_grad():
            for name, value in self.originals.items():
                params[name].copy_(value)


def _neutral(value) -> bool:
    return value in (None, False, 0, "", [], {})


def read_adapter(ckpt: str | Path, device="cpu") -> tuple[Adapter | None, str]:
    """(the adapter, "") of a peft LoRA checkpoint folder, or (None, why it is not folded)."""
    ckpt = Path(ckpt)
    try:
        cfg = json.loads((ckpt / "adapter_config.json").read_text())
    except (OSError, ValueError) as err:
        return None, f"{ckpt}/adapter_config.json: {err}"
    if cfg.get("peft_type") != "LORA":
        return None, f"peft_type {cfg.get('peft_type')!r} is not LORA"
    for key, want in NEUTRAL.items():
        if key in cfg and cfg[key] != want and not (_neutral(cfg[key]) and _neutral(want)):
            return None, f"adapter_config.json {key}: {cfg[key]!r} (a fold knows {want!r} only)"
    other = sorted(k for k in cfg if k not in READ | BOOKKEEPING | set(NEUTRAL) and not _neutral(cfg[k]))
    if other:
        return None, f"adapter_config.json key(s) {other} not known to the fold"
    weights = ckpt / "adapter_model.safetensors"
    if not weights.exists():
        return None, f"{ckpt}: no adapter_model.safetensors"
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    keep = list(cfg.get("modules_to_save") or [])
    tensors = read_safetensors([weights], device)
    a_b: dict[str, dict[str, torch.Tensor]] = {}
    replace = {}
    for key, value in tensors.items():
        if not key.startswith(PREFIX):
            return None, f"{weights.name}: tensor {key!r} is not under {PREFIX!r}"
        name = key[len(PREFIX) :]
        for part in ("A", "B"):
            if name.endswith(f".lora_{part}.weight"):
                a_b.setdefault(name[: -len(f".lora_{part}.weight")], {})[part] = value
                break
        else:
            module = name.rsplit(".", 1)[0]
            if not any(module == m or module.endswith("." + m) for m in keep):
                return None, f"{weights.name}: tensor {key!r} is neither a LoRA A/B pair nor in modules_to_save"
            replace[name] = value
    pairs = {}
    for module, ab in a_b.items():
        if set(ab) != {"A", "B"}:
            return None, f"{weights.name}: {module} has lora_{next(iter(ab))} only"
        a, b = ab["A"], ab["B"]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            return None, f"{weights.name}: {module}'s A {tuple(a.shape)} / B {tuple(b.shape)} are not rank {r}"
        pairs[module] = (a, b, scale)
    return Adapter(str(ckpt), pairs, replace), ""


def fold(model: nn.Module, adapter: Adapter) -> tuple[Folded | None, str]:
    """Fold ``adapter`` into ``model``'s weights in place: (what to restore, "") or (None, why not),
    in which case nothing was changed."""
    params = dict(model.named_parameters(remove_duplicate=False))
    plan: list[tuple[str, torch.Tensor]] = []
    for module, (a, b, scale) in adapter.pairs.items():
        try:
            layer = model.get_submodule(module)
        except AttributeError:
            return None, f"{adapter.path}: the model has no module {module}"
        if not isinstance(layer, nn.Linear):
            return None, f"{adapter.path}: {module} is a {type(layer).__name__}, not a linear layer"
        w = params[f"{module}.weight"]
        if tuple(w.shape) != (b.shape[0], a.shape[1]):
            return None, f"{adapter.path}: {module}.weight is {tuple(w.shape)}, the adapter {b.shape[0]}x{a.shape[1]}"
        delta = (b.to(w.device, torch.float32) @ a.to(w.device, torch.float32)) * scale
        plan.append((f"{module}.weight", delta))
    for name, value in adapter.replace.items():
        if name not in params or tuple(params[name].shape) != tuple(value.shape):
            return None, f"{adapter.path}: {name} is not a parameter of that shape in the model"
        plan.append((name, value))
    for name, _ in plan:
        tied = [t for t, p in params.items() if p.data_ptr() == params[name].data_ptr()]
        if len(tied) > 1:
            return None, f"{adapter.path}: {name} is tied to {[t for t in tied if t != name]}"
    if len({name for name, _ in plan}) != len(plan):
        return None, f"{adapter.path}: a weight is both adapted and replaced"
    done = Folded()
    with torch.no_grad():
        for name, value in plan:
            p = params[name]
            done.originals[name] = p.detach().clone()
            if name in adapter.replace:
                p.copy_(value.to(p.device, p.dtype))
            else:  # the sum in float32, rounded once to the weight's dtype
                p.copy_((p.to(torch.float32) + value).to(p.dtype))
    return done, ""
