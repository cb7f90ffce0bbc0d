"""Model folders on disk: where a packaged model is, whether a folder loads under the safety
defaults, and which of its files loading reads (no torch).
"""

from __future__ import annotations

import importlib.util
import math
import re
import struct
from pathlib import Path

from .errors import ConfigError
from .io import DuplicateKey, loads_json
from .model_entry import ModelEntry


def _package_path(model_entry: ModelEntry) -> Path:
    """The folder or file ``<package>/<sub/path>`` inside an installed Python package (nothing imported)."""
    pkg, _, sub = model_entry.package.partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(
            f"{model_entry.where}.package: Python package {pkg!r} is not installed "
            f"(e.g. pip install {pkg.replace('_', '-')})"
        )
    d = Path(list(found.submodule_search_locations)[0]) / sub
    if not d.exists():
        raise ConfigError(f"{model_entry.where}.package: {d} does not exist")
    return d


def package_dir(model_entry: ModelEntry) -> Path:
    d = _package_path(model_entry)
    if not d.is_dir():
        raise ConfigError(f"{model_entry.where}.package: {d} is not a folder (a model folder, or a .gguf file)")
    return d


def gguf_file(model_entry: ModelEntry) -> Path:
    if model_entry.package:
        p = _package_path(model_entry)
        key = "package"
    else:
        p = Path(model_entry.path)
        key = "path"
    if not p.is_file():
        raise ConfigError(f"{model_entry.where}.{key}: {p} is not a file (a .gguf entry names the file itself)")
    return p


MAX_SAFETENSORS_HEADER = 100 * 2**20  # safetensors' own limit on the JSON header
# bits per value of each safetensors dtype (the format's own list)
SAFETENSORS_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


def safetensors_header(path: str | Path) -> dict:
    """The JSON header of a safetensors file, without the tensors, checked as the safetensors loaders check it
    (stdlib: the analysis env has no safetensors); a ValueError saying what is wrong otherwise."""
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
            header = loads_json(fh.read(n).decode("utf-8"))
        except DuplicateKey as e:
            raise ValueError(f"{path}: its header is ambiguous: {e}") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ValueError(f"{path}: its header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: its header is not a JSON mapping of tensor names")
    data = size - 8 - n
    spans = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise ValueError(f"{path}: tensor {str(name)[:80]!r} has no data offsets in the header")
        if not 0 <= offsets[0] <= offsets[1] <= data:
            raise ValueError(f"{path}: tensor {str(name)[:80]!r} lies past the end of the file (cut short?)")
        bits = SAFETENSORS_BITS.get(meta.get("dtype")) if isinstance(meta.get("dtype"), str) else None
        shape = meta.get("shape")
        if (
            bits is None
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and d >= 0 for d in shape)
            or math.prod(shape) * bits % 8
        ):
            raise ValueError(
                f"{path}: tensor {str(name)[:80]!r} has dtype {str(meta.get('dtype'))[:20]!r} or shape "
                f"{str(meta.get('shape'))[:60]} that safetensors does not define"
            )
        need = math.prod(shape) * bits // 8
        if need != offsets[1] - offsets[0]:
            raise ValueError(
                f"{path}: tensor {str(name)[:80]!r} ({meta['dtype']}, shape {meta['shape']}) needs {need:,} bytes "
                f"but its offsets give {offsets[1] - offsets[0]:,}"
            )
        spans.append((offsets[0], offsets[1], str(name)))
    end = 0
    for start, stop, name in sorted(spans):
        if start != end:
            what = (
                "overlaps the tensor before it" if start < end else f"starts {start - end:,} bytes after the one before"
            )
            raise ValueError(f"{path}: tensor {name[:80]!r} {what}: the tensors do not lie one after another")
        end = stop
    if end != data:
        raise ValueError(
            f"{path}: its tensors fill {end:,} of the {data:,} bytes after the header: {data - end:,} bytes at its end "
            "belong to no tensor (padded, or another file appended)"
        )
    return header


def check_local_weights(src: str, model_entry: ModelEntry) -> None:
    """A :class:`ConfigError` unless a local model folder is whole and loads under the safety defaults
    (no pickle, no remote code, unless the entry opts in); a hub id passes."""
    p = Path(src)
    if not p.exists():
        return  # a hub id: from_pretrained's use_safetensors enforces the format
    if not p.is_dir() or not (p / "config.json").exists():
        raise ConfigError(f"{model_entry.where}: {p} is not a model directory (no config.json)")
    has_st = any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").exists()
    has_pickle = any(p.glob("*.bin")) or any(p.glob("*.pt")) or any(p.glob("*.pth"))
    if not has_st and has_pickle and not model_entry.allow_pickle_weights:
        raise ConfigError(
            f"{model_entry.where}: {p} holds weights only in a pickle format (.bin/.pt); "
            "refusing to load them (set allow_pickle_weights: true on this model to opt in)"
        )
    for name in [INDEX, "pytorch_model.bin.index.json"] if model_entry.allow_pickle_weights else [INDEX]:
        if not (p / name).exists():
            continue
        shards = sorted(set(_read_weight_map(p / name, model_entry).values()))
        gone = [s for s in shards if not (p / s).is_file()]
        if gone:
            raise ConfigError(
                f"{model_entry.where}: {p} lacks {len(gone)} of the {len(shards)} weight shards its {name} "
                f"names ({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}): copy or download the model again "
                "(a hub model: `oodcorr prefetch`), then run again"
            )
    headers = {}
    for f in sorted(p.glob("*.safetensors")):
        try:
            headers[f.name] = safetensors_header(f)
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
                f"{model_entry.where}: {f} is not a readable safetensors file ({e}); it is damaged or not "
                f"weights at all: copy or download the model again.{beside}"
            ) from None
    if (p / INDEX).exists() and not (p / "model.safetensors").exists():  # with both, the one file is loaded
        _check_shard_index(p, model_entry, headers)
    try:
        cfg = loads_json((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError(
            f"{model_entry.where}: {p / 'config.json'} is not readable JSON ({type(e).__name__}: {str(e)[:120]}); "
            "copy or download the model again"
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{model_entry.where}: {p / 'config.json'} is not a JSON mapping")
    if cfg.get("auto_map") and not model_entry.trust_remote_code:
        raise ConfigError(
            f"{model_entry.where}: {p} needs remote code (config.json has auto_map); "
            "set trust_remote_code: true on this model to opt in"
        )


INDEX = "model.safetensors.index.json"
SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<i>\d+)-of-(?P<n>\d+)\.safetensors$")


def _read_weight_map(index: Path, model_entry: ModelEntry) -> dict[str, str]:
    """A shard index's ``weight_map`` (tensor -> shard file); a :class:`ConfigError` naming the file otherwise."""
    try:
        doc = loads_json(index.read_text(encoding="utf-8"))
        wm = doc["weight_map"]
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise TypeError("weight_map is not a mapping of tensor names to file names")
    except DuplicateKey as e:
        raise ConfigError(
            f"{model_entry.where}: {index}: {e}; a hand-edited or merged index: copy or download the model again"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ConfigError(
            f"{model_entry.where}: {index} is not a readable shard index ({type(e).__name__}); copy or "
            "download the model again"
        ) from None
    return wm


def _check_shard_index(folder: Path, model_entry: ModelEntry, headers: dict[str, dict]) -> None:
    """A :class:`ConfigError` unless the index names what the shards hold, every shard, and its totals add up
    (else weights would load from random values, said in a log only)."""
    index = folder / INDEX
    wm = _read_weight_map(index, model_entry)
    where = f"{model_entry.where}: {index}"
    again = "the model is incomplete: copy or download it again (a hub model: `oodcorr prefetch`)"
    groups: dict[tuple[str, int], tuple[set[int], int]] = {}  # (stem, n) -> (the i named, the digits written)
    for shard in set(wm.values()):
        m = SHARD_NAME.match(shard)
        if m:
            seen, _ = groups.setdefault((m["stem"], int(m["n"])), (set(), len(m["i"])))
            seen.add(int(m["i"]))
    for (stem, n), (seen, width) in sorted(groups.items()):
        absent = sorted(set(range(1, n + 1)) - seen)
        if absent:
            names = [f"{stem}-{i:0{width}d}-of-{n:0{width}d}.safetensors" for i in absent]
            there = [x for x in names if (folder / x).is_file()]
            raise ConfigError(
                f"{where} names {len(seen)} of the {n} shards {stem}-*-of-{n:0{width}d}.safetensors: it leaves out "
                f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
                + (
                    f" ({', '.join(there[:3])} is in the folder, its tensors unnamed)"
                    if there
                    else " (not in the folder either)"
                )
                + f"; {again}"
            )
    for tensor, shard in wm.items():
        held = headers.get(shard)
        if held is not None and tensor not in held:
            raise ConfigError(f"{where} maps tensor {tensor[:80]!r} to {shard}, which does not hold it; {again}")
    for shard in sorted(set(wm.values())):
        unnamed = sorted(t for t in headers.get(shard, {}) if t != "__metadata__" and wm.get(t) != shard)
        if unnamed:
            raise ConfigError(
                f"{where} does not name {len(unnamed)} tensor(s) of {shard} ({', '.join(unnamed[:3])}"
                f"{', ...' if len(unnamed) > 3 else ''}): they would not be loaded; {again}"
            )
    meta = loads_json(index.read_text(encoding="utf-8")).get("metadata") or {}
    entries = [headers[s][t] for t, s in wm.items() if s in headers and t in headers[s]]
    sums = {
        "total_size": sum(int(e["data_offsets"][1]) - int(e["data_offsets"][0]) for e in entries),
        "total_parameters": sum(math.prod(e["shape"]) for e in entries),
    }
    for key, got in sums.items():
        want = meta.get(key) if isinstance(meta, dict) else None
        if isinstance(want, int) and not isinstance(want, bool) and want != got:
            unit = "bytes" if key == "total_size" else "parameters"
            raise ConfigError(
                f"{where}: its metadata gives {key} {want:,} but the tensors it names hold {got:,} {unit}"
                f"{' (some are left out)' if got < want else ''}; {again}"
            )


def tokenizer_max_id(path: str | Path) -> int | None:
    """The largest token id a ``tokenizer.json`` can give (its vocabulary and added tokens); None when none."""
    doc = loads_json(Path(path).read_text(encoding="utf-8"))
    ids = []
    model = doc.get("model") if isinstance(doc, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int) and not isinstance(v, bool)]
    elif isinstance(vocab, list) and vocab:
        ids.append(len(vocab) - 1)  # unigram: a token's id is its place in the list
    for t in doc.get("added_tokens") or [] if isinstance(doc, dict) else []:
        if isinstance(t, dict) and isinstance(t.get("id"), int) and not isinstance(t.get("id"), bool):
            ids.append(t["id"])
    return max(ids) if ids else None


def vocab_problem(name: str, folder: str | Path, max_id: int | None) -> str | None:
    """The refusal of a tokenizer whose ids reach past the embeddings of the model in ``folder``, or None."""
    try:
        cfg = loads_json((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    for c in (cfg, cfg.get("text_config") if isinstance(cfg, dict) else None):
        rows = c.get("vocab_size") if isinstance(c, dict) else None
        if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
            break
    else:
        return None
    if max_id is None or max_id < rows:
        return None
    return (
        f"models[{name}]: the tokenizer of {folder} gives token ids up to {max_id}, but the model's input embeddings "
        f"have {rows} rows (config.json vocab_size): a token id of {rows} or more would stop the job with an index "
        "error. Use the model's own tokenizer, or resize its embeddings to the tokens added"
    )


# training state a Trainer saves beside the weights: never read when loading a model
TRAINING_STATE = re.compile(
    r"^(optimizer\.(pt|bin)|scheduler\.pt|scaler\.pt|rng_state.*\.pth|trainer_state\.json|"
    r"training_args\.bin|pytorch_model_fsdp\.bin)$"
)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def model_files(directory: str | Path, allow_pickle_weights: bool = False) -> list[Path]:
    """The files of a checkpoint directory that loading the model and its tokenizer reads."""
    d = Path(directory)
    out = []
    for f in sorted(d.iterdir()):
        if not f.is_file() or f.name.startswith(".") or TRAINING_STATE.match(f.name):
            continue
        if f.suffix in PICKLE_SUFFIXES and not allow_pickle_weights:
            continue
        out.append(f)
    return out
