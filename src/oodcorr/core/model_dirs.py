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
import struct
from pathlib import Path

from .errors import ConfigError


def package_path(spec: dict) -> Path:
    """The folder or file ``<package>/<sub/path>`` inside an installed Python package (nothing is imported)."""
    pkg, _, sub = spec["package"].partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(
            f"models[{spec['name']}].package: Python package {pkg!r} is not installed "
            f"(e.g. pip install {pkg.replace('_', '-')})"
        )
    d = Path(list(found.submodule_search_locations)[0]) / sub
    if not d.exists():
        raise ConfigError(f"models[{spec['name']}].package: {d} does not exist")
    return d


def package_dir(spec: dict) -> Path:
    """The model folder ``<package>/<sub/folder>`` inside an installed Python package."""
    d = package_path(spec)
    if not d.is_dir():
        raise ConfigError(f"models[{spec['name']}].package: {d} is not a folder (a model folder, or a .gguf file)")
    return d


GGUF_SUFFIX = ".gguf"


def names_gguf(spec: dict) -> bool:
    """Whether a model entry names a GGUF file (``package:`` or ``path:`` ending in ``.gguf``),
    read without touching the disk (planning decides on it)."""
    where = spec.get("package") or spec.get("path")
    return bool(where) and str(where).lower().endswith(GGUF_SUFFIX)


def gguf_file(spec: dict) -> Path:
    """The GGUF file a model entry names; a ConfigError naming the key when it is not a file."""
    if spec.get("package"):
        p = package_path(spec)
        key = "package"
    else:
        p = Path(spec["path"])
        key = "path"
    if not p.is_file():
        raise ConfigError(f"models[{spec['name']}].{key}: {p} is not a file (a .gguf entry names the file itself)")
    return p


MAX_SAFETENSORS_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header


def safetensors_header(path: str | Path) -> dict:
    """The JSON header of a safetensors file (tensor name -> {dtype, shape, data_offsets}), read
    without the tensors; a file that is not one (cut short, junk, another format) is a ValueError
    saying what is wrong with it. Checks what the loader would trip on: the header's length, that
    it is a JSON mapping, and that every tensor's bytes lie inside the file."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
            raise ValueError(f"{path}: its first 8 bytes give a header of {n} bytes, in a file of {size}")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: its header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: its header is not a JSON mapping of tensor names")
    data = size - 8 - n
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise ValueError(f"{path}: tensor {str(name)[:80]!r} has no data offsets in the header")
        if not 0 <= offsets[0] <= offsets[1] <= data:
            raise ValueError(f"{path}: tensor {str(name)[:80]!r} lies past the end of the file (cut short?)")
    return header


def check_local_weights(src: str, spec: dict) -> None:
    """A local model folder loads under the safety defaults: config.json, safetensors unless
    ``allow_pickle_weights``, no remote code unless ``trust_remote_code``; a hub id passes. Every
    safetensors file must be one (its header read, :func:`safetensors_header`) and config.json JSON:
    the job would otherwise stop with the loader's traceback."""
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
    missing_shards(p, spec)
    for f in sorted(p.glob("*.safetensors")):
        try:
            safetensors_header(f)
        except (OSError, ValueError) as e:
            pickles = [
                g.name for g in sorted(p.iterdir()) if g.suffix in PICKLE_SUFFIXES and not TRAINING_STATE.match(g.name)
            ]
            beside = (
                f" A pickle file is beside it ({', '.join(pickles)}): to load that instead, move the .safetensors "
                "file away and set allow_pickle_weights: true on this model (only for a model you trust)."
                if pickles
                else ""
            )
            raise ConfigError(
                f"models[{spec['name']}]: {f} is not a readable safetensors file ({e}); it is damaged or not "
                f"weights at all: copy or download the model again.{beside}"
            ) from None
    try:
        cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"models[{spec['name']}]: {p / 'config.json'} is not readable JSON ({type(e).__name__}: {str(e)[:120]}); "
            "copy or download the model again"
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"models[{spec['name']}]: {p / 'config.json'} is not a JSON mapping")
    if cfg.get("auto_map") and not spec.get("trust_remote_code", False):
        raise ConfigError(
            f"models[{spec['name']}]: {p} needs remote code (config.json has auto_map); "
            "set trust_remote_code: true on this model to opt in"
        )


def missing_shards(folder: Path, spec: dict) -> None:
    """A sharded model's index (``model.safetensors.index.json``, or ``pytorch_model.bin.index.json``
    when pickles are allowed) names every shard: each must be in the folder, else a
    :class:`ConfigError` naming the missing ones (a copy or prefetch cut short); checked before any
    job loads the model, which would stop with the loader's traceback (or, for some loaders, go on
    with the weights of the missing shards left at their random initial values)."""
    names = ["model.safetensors.index.json"]
    if spec.get("allow_pickle_weights"):
        names.append("pytorch_model.bin.index.json")
    for name in names:
        index = folder / name
        if not index.exists():
            continue
        try:
            doc = json.loads(index.read_text(encoding="utf-8"))
            shards = sorted(set(doc["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(
                f"models[{spec['name']}]: {index} is not a readable shard index ({type(e).__name__}); copy or "
                "download the model again"
            ) from None
        gone = [s for s in shards if not (folder / s).is_file()]
        if gone:
            raise ConfigError(
                f"models[{spec['name']}]: {folder} lacks {len(gone)} of the {len(shards)} weight shards its {name} "
                f"names ({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}): a copy or download cut short. "
                "Copy or download the model again (a hub model: run `oodcorr prefetch` again), then run again"
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
