"""A model's weights: which files of a repository a job loads, and what the weights hold."""

from __future__ import annotations

import fnmatch
import math
from collections import Counter
from pathlib import Path

from ..core import model_dirs
from ..core.errors import ConfigError
from ..core.model_entry import ModelEntry
from . import adaptation

# files a job reads from a model repository (its root folder only): config, tokenizer, weights
MODEL_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")
SAFE_WEIGHTS = ("*.safetensors",)
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth")
REMOTE_CODE = ("*.py",)


def model_patterns(model_entry: ModelEntry, repo_files: list[str]) -> list[str]:
    """The files of a model repository that a job loads: root-level config/tokenizer files and the
    weights -- safetensors when there are any; pickle files only with ``allow_pickle_weights``;
    a model's own code only with ``trust_remote_code``."""
    root = [f for f in repo_files if "/" not in f]

    def match(patterns):
        return [f for f in root if any(fnmatch.fnmatch(f, p) for p in patterns)]

    weights = match(SAFE_WEIGHTS)
    if not weights:
        if not model_entry.allow_pickle_weights:
            raise ConfigError(
                f"{model_entry.where}: {model_entry.hub} has no safetensors weights at this revision, only pickle "
                "files; set allow_pickle_weights: true on the entry to opt in, or pick a revision with safetensors"
            )
        weights = match(PICKLE_WEIGHTS)
    code = match(REMOTE_CODE) if model_entry.trust_remote_code else []
    return sorted(set(match(MODEL_FILES) + weights + code))


def _by_module(linear: list[tuple[str, int, int]]) -> dict[str, list[list[int]]]:
    """{module name: [[out, in, count], ...]} of the linear layers' (module name, out, in)."""
    out: dict[str, list[list[int]]] = {}
    for (module, o, i), count in sorted(Counter(linear).items()):
        out.setdefault(module, []).append([o, i, count])
    return out


def weight_shapes(folder: str | Path) -> tuple[int, dict[str, list[list[int]]]]:
    """(parameters, linear layers) of the safetensors weights in ``folder``, from the headers alone."""
    total = 0
    linear = []
    for f in sorted(Path(folder).glob("*.safetensors")):
        for name, meta in model_dirs.safetensors_header(f).items():
            if name == "__metadata__":
                continue
            shape = [int(x) for x in meta["shape"]]
            total += math.prod(shape)
            parts = name.split(".")
            if len(shape) == 2 and len(parts) >= 2 and parts[-1] == "weight":
                linear.append((parts[-2], shape[0], shape[1]))
    return total, _by_module(linear)


def meta_shapes(folder: str | Path, model_entry: ModelEntry) -> tuple[int, dict[str, list[list[int]]]]:
    """The same from the model's config alone (pickle-only weights are never unpickled here): the
    architecture built on PyTorch's meta device, which allocates nothing."""
    import torch  # torch stack: planning and the CLI never import it
    import transformers  # torch stack: planning and the CLI never import it

    cfg = transformers.AutoConfig.from_pretrained(str(folder), trust_remote_code=model_entry.trust_remote_code)
    auto = getattr(transformers, adaptation.get(model_entry.method).auto_class)
    with torch.device("meta"):
        model = auto.from_config(cfg, trust_remote_code=model_entry.trust_remote_code)
    total = sum(p.numel() for p in model.parameters())
    linear = []
    for name, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if isinstance(w, torch.nn.Parameter) and w.dim() == 2 and name:
            linear.append((name.rsplit(".", 1)[-1], int(w.shape[0]), int(w.shape[1])))
    return total, _by_module(linear)
