"""Loading models and tokenizers safely: safetensors only, no remote code unless opted in."""
from __future__ import annotations

import json
from pathlib import Path

from .config import ConfigError

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "auto": "auto"}


def model_source(spec: dict, tiny_dir: str | Path | None = None) -> tuple[str, dict]:
    """(name_or_path, extra from_pretrained kwargs) for a model entry."""
    if spec.get("tiny"):
        if tiny_dir is None:
            raise ConfigError(f"models[{spec['name']}]: tiny model needs its built directory")
        return str(tiny_dir), {}
    if spec.get("path"):
        return str(spec["path"]), {}
    kwargs = {}
    if spec.get("revision"):
        kwargs["revision"] = spec["revision"]
    return str(spec["hub"]), kwargs


def load_tokenizer(spec: dict, tiny_dir=None):
    from transformers import AutoTokenizer

    src, kw = model_source(spec, tiny_dir)
    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=bool(spec.get("trust_remote_code", False)), **kw)
    if tok.pad_token_id is None:
        # decoder-only models often lack a pad token; any id works, pad positions are masked
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


def _check_local_weights(src: str, spec: dict) -> None:
    p = Path(src)
    if not p.exists():
        return  # a hub id: from_pretrained's use_safetensors enforces the format
    if not p.is_dir() or not (p / "config.json").exists():
        raise ConfigError(f"models[{spec['name']}]: {p} is not a model directory (no config.json)")
    has_st = any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").exists()
    has_pickle = any(p.glob("*.bin")) or any(p.glob("*.pt")) or any(p.glob("*.pth"))
    if not has_st and has_pickle and not spec.get("allow_pickle_weights", False):
        raise ConfigError(f"models[{spec['name']}]: {p} holds weights only in a pickle format (.bin/.pt); "
                          "refusing to load them (set allow_pickle_weights: true on this model to opt in)")
    cfg = json.loads((p / "config.json").read_text())
    if cfg.get("auto_map") and not spec.get("trust_remote_code", False):
        raise ConfigError(f"models[{spec['name']}]: {p} needs remote code (config.json has auto_map); "
                          "set trust_remote_code: true on this model to opt in")


def load_causal_lm(spec: dict, tiny_dir=None, device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM

    src, kw = model_source(spec, tiny_dir)
    _check_local_weights(src, spec)
    dtype = spec.get("dtype", "float32")
    model = AutoModelForCausalLM.from_pretrained(
        src, trust_remote_code=bool(spec.get("trust_remote_code", False)),
        use_safetensors=None if spec.get("allow_pickle_weights") else True,
        dtype=getattr(torch, dtype) if dtype != "auto" else "auto", **kw)
    return model.to(device)


def load_checkpoint(spec: dict, ckpt_dir: str | Path, tiny_dir=None, device: str = "cpu"):
    """The model as saved at one checkpoint: full weights, or base model + LoRA adapter."""
    ckpt_dir = Path(ckpt_dir)
    if (ckpt_dir / "adapter_config.json").exists():
        from peft import PeftModel

        base = load_causal_lm(spec, tiny_dir, device)
        model = PeftModel.from_pretrained(base, str(ckpt_dir))
    else:
        model = load_causal_lm(dict(spec, tiny=None, hub=None, path=str(ckpt_dir), revision=None), None, device)
    model.eval()
    return model
