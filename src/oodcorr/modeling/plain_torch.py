"""Scoring models without transformers' import graph: OPT and OLMo2 causal LMs in plain torch.

The forward pass is transformers' (default ``sdpa`` attention) op for op, so the logits are the same
bit for bit; modules are named as transformers names them. :func:`lean_model` returns ``None`` (and
says why) for anything it does not know, and the caller loads with ``from_pretrained`` instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..core.errors import DataError
from ..core.model_entry import ModelEntry
from .plain_torch_olmo2 import LeanOlmo2
from .plain_torch_opt import LeanOPT
from .plain_torch_parts import DTYPES, LeanCausalLM, Unsupported

ARCHITECTURES: dict[str, tuple[str, type[LeanCausalLM]]] = {
    "opt": ("OPTForCausalLM", LeanOPT),
    "olmo2": ("Olmo2ForCausalLM", LeanOlmo2),
}


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder's safetensors files (one file, or the shards an index names)."""
    from safetensors.torch import load_file  # torch stack: planning and the CLI never import it

    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = [folder / s for s in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    elif (folder / "model.safetensors").exists():
        files = [folder / "model.safetensors"]
    else:
        raise Unsupported(f"{folder}: no model.safetensors or model.safetensors.index.json")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(str(f), device="cpu"))
        except Exception as err:  # noqa: BLE001 -- safetensors' errors do not name the file
            raise DataError(f"{f}: not a readable safetensors file ({type(err).__name__}: {err})") from None
    return state


def build(folder: str | Path, dtype: str = "float32", device="cpu") -> LeanCausalLM:
    """The lean model of ``folder`` (config.json + safetensors) in ``dtype`` on ``device``, in eval
    mode; raises :class:`Unsupported` (with why) where it does not apply."""
    folder = Path(folder)
    where = str(folder)
    if torch.device(device).type not in ("cpu", "cuda"):
        raise Unsupported(f"device {device}: the lean loader runs on cpu and cuda")
    if dtype not in DTYPES:
        raise Unsupported(f"dtype {dtype!r}: the lean loader takes {', '.join(DTYPES)}")
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise Unsupported(f"{where}/config.json: {err}") from None
    kind = ARCHITECTURES.get(cfg.get("model_type"))
    if kind is None:
        raise Unsupported(f"{where}: model_type {cfg.get('model_type')!r} has no lean architecture")
    arch, cls = kind
    if cfg.get("architectures") not in (None, [arch]):
        raise Unsupported(f"{where}: architectures {cfg.get('architectures')} (the lean loader reads {arch})")
    c = cls.settings(cfg, where)
    c.model_type, c._attn_implementation, c.name_or_path = cfg["model_type"], "sdpa", where
    with torch.device("meta"):
        model = cls(c)
    state = _read_weights(folder)
    want = model.expected_keys()
    if set(state) - want - {"lm_head.weight"} or want - set(state):
        extra, missing = sorted(set(state) - want), sorted(want - set(state))
        raise Unsupported(f"{where}: weights differ from {arch}'s (unexpected {extra[:3]}, missing {missing[:3]})")
    own = model.state_dict(keep_vars=True)
    tied_head = "lm_head.weight" not in want
    if tied_head and "lm_head.weight" in state:
        if not torch.equal(state.pop("lm_head.weight"), state[f"{model.embeddings}.weight"]):
            raise Unsupported(f"{where}: lm_head.weight differs from the embeddings it is tied to")
    wrong = [k for k, t in state.items() if tuple(t.shape) != tuple(own[k].shape)]
    if wrong:
        raise Unsupported(f"{where}: weight shapes differ from {arch}'s ({wrong[:3]})")
    target = DTYPES[dtype]
    state = {k: t.to(device=device, dtype=target) for k, t in state.items()}
    model.load_state_dict(state, strict=not tied_head, assign=True)
    model.tie()
    if hasattr(model, "init_buffers"):
        model.init_buffers(device)
    return model.eval()


def lean_model(
    folder: str | Path, model_entry: ModelEntry, method: str, device="cpu"
) -> tuple[LeanCausalLM | None, str]:
    """(the lean model, "") for a model entry's local folder, or (None, why not): the caller then
    loads the model with ``from_pretrained``. The entry's safety opt-ins and method decide first:
    a model that may run its own code or read pickle weights, or a head model, is never lean."""
    if method != "pattern":
        return None, f"method {method!r} (a head model) loads with from_pretrained"
    if model_entry.trust_remote_code:
        return None, "trust_remote_code: the model's own code runs through from_pretrained"
    if model_entry.allow_pickle_weights:
        return None, "allow_pickle_weights: pickle weights load through from_pretrained"
    if not Path(folder).is_dir():
        return None, f"{folder} is not a local folder"
    try:
        return build(folder, model_entry.dtype, device), ""
    except Unsupported as why:
        return None, str(why)
