"""Checkpoint series that already exist, evaluated as they are; nothing here imports torch (planning lists
a local checkpoint's files, so that Snakemake rewrites its manifest when one changes)."""

from __future__ import annotations

from pathlib import Path

from ..core.atomic_write import write_json_atomic
from ..core.digests import sha256_file, sha256_json, stat_key
from ..core.errors import ConfigError
from ..core.io import read_json
from ..core.model_dirs import check_local_weights, model_files
from ..core.model_entry import ModelEntry

KIND = "series-checkpoint"


def write_manifest(out: str | Path, *, model: str, x: int, x_unit: str, checkpoint: dict, entry: dict) -> dict:
    """The manifest of one series checkpoint (``checkpoint``: ``{"path"}`` or ``{"hub", "revision"}``)."""
    doc = {"kind": KIND, "model": model, "step": int(x), "x_unit": x_unit}
    if checkpoint.get("path"):
        d = Path(checkpoint["path"])
        where = f"models[{model}].series.checkpoints ({x_unit} {x})"
        if not d.is_dir():
            raise ConfigError(f"{where}: {d} is not a directory")
        if (d / "adapter_config.json").exists():
            raise ConfigError(f"{where}: {d} holds a LoRA adapter: merge it into its base model and save that")
        model_entry = ModelEntry.from_params(dict(entry, name=model))
        check_local_weights(str(d), model_entry)
        files = {}
        for f in model_files(d, model_entry.allow_pickle_weights):
            files[f.name] = {"size": f.stat().st_size, "sha256": sha256_file(f), "stat": stat_key(f)}
        doc.update(source={"path": str(d)}, files=files, digest=sha256_json({k: v["sha256"] for k, v in files.items()}))
    else:
        doc.update(
            source={"hub": checkpoint["hub"], "revision": checkpoint["revision"]},
            files={},
            digest=f"hub:{checkpoint['hub']}@{checkpoint['revision']}",
        )
    write_json_atomic(out, doc)
    return doc


MANIFEST_FIX = (
    "delete it and run again: its job writes it again (a finetune whose checkpoints are all there "
    "does not train again, it checks them)"
)


def read_manifest(path: str | Path) -> dict | None:
    """A series checkpoint's manifest, or None if the file is another kind (a finetune's manifest)."""
    doc = read_json(path, "a checkpoint manifest", MANIFEST_FIX)
    return doc if isinstance(doc, dict) and doc.get("kind") == KIND else None


def verify(doc: dict) -> tuple[bool, str]:
    """Whether a local series checkpoint still holds its manifest's files (size; sha256 where the stat changed)."""
    path = doc["source"].get("path")
    if not path:
        return True, "hub revision"
    for name, meta in doc["files"].items():
        f = Path(path) / name
        if not f.is_file():
            return False, f"{f}: missing"
        if f.stat().st_size != meta["size"]:
            return False, f"{f}: size {f.stat().st_size} != {meta['size']} in the manifest"
        if stat_key(f) != meta["stat"] and sha256_file(f) != meta["sha256"]:
            return False, f"{f}: sha256 differs from the manifest (the file changed after it was listed)"
    return True, "ok"
