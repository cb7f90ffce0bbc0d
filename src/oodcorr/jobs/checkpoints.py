"""Checkpoints on disk: manifests, verification (hashes cached per stat), resume points, run identity, safe saves."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import time
from pathlib import Path

from ..core.atomic_write import follow_umask, write_json_atomic
from ..core.digests import sha256_file, sha256_json, stat_key
from ..core.errors import DiskFull, WriteFailed
from ..core.filesystems import DISK_FULL_ERRNOS, disk_full, probe_write, write_errno, write_failed
from ..core.io import json_or_none
from ..core.provenance import library_versions

log = logging.getLogger(__name__)

MANIFEST = "oodcorr_manifest.json"
VERIFIED = ".oodcorr_verified.json"  # hashes already checked, keyed by each file's stat (any write changes the ctime)
RESUME_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "scaler.pt",
    "trainer_state.json",
    "training_args.bin",
    "optimizer.bin",
    "pytorch_model_fsdp.bin",
)  # the last two: FSDP


def _write_verified(ckpt: Path, cache: dict) -> None:
    with contextlib.suppress(OSError):  # a read-only copy of a run: verification still works, without the cache
        write_json_atomic(ckpt / VERIFIED, cache)


def write_ckpt_manifest(ckpt: Path, step: int, resumable: bool) -> None:
    # the weights follow the umask (safetensors leaves them 0600), before their stat is recorded
    follow_umask(ckpt)
    files, verified = {}, {}
    for f in sorted(ckpt.rglob("*")):
        if f.is_file() and f.name != MANIFEST and not f.name.startswith("."):
            rel = str(f.relative_to(ckpt))
            files[rel] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
            verified[rel] = {"sha256": files[rel]["sha256"], "stat": stat_key(f)}
    man = {"step": step, "resumable": resumable, "files": files, "libraries": library_versions()}
    _write_verified(ckpt, verified)  # the hashes just computed are the files' verification
    write_json_atomic(ckpt / MANIFEST, man)


def read_ckpt_manifest(ckpt: Path) -> dict | None:
    """A checkpoint's own manifest (its ``step``, ``files``, ``libraries``), or None without a readable one."""
    man = json_or_none(ckpt / MANIFEST)
    return man if isinstance(man, dict) and isinstance(man.get("files"), dict) else None


def _check_files(ckpt: Path, man: dict, rels: list[str], full: bool) -> tuple[bool, str]:
    """Whether the files ``rels`` match ``man``: present, same size, and (``full``) same sha256."""
    for rel in rels:
        f, meta = ckpt / rel, man["files"][rel]
        if not f.exists():
            return False, f"{f}: missing"
        if f.stat().st_size != meta["size"]:
            return False, f"{f}: size {f.stat().st_size} != {meta['size']} in the manifest (truncated?)"
    if not full:
        return True, "ok"
    cache = json_or_none(ckpt / VERIFIED)
    cache = cache if isinstance(cache, dict) else {}
    changed = False
    for rel in rels:
        f, want = ckpt / rel, man["files"][rel]["sha256"]
        seen = cache.get(rel)
        key = stat_key(f)
        if isinstance(seen, dict) and seen.get("sha256") == want and seen.get("stat") == key:
            continue
        if sha256_file(f) != want:
            return False, f"{f}: sha256 differs from the manifest (the file changed after it was saved)"
        cache[rel] = {"sha256": want, "stat": key}
        changed = True
    if changed:
        _write_verified(ckpt, cache)
    return True, "ok"


def verify_checkpoint(ckpt: Path, full: bool = True) -> tuple[bool, str]:
    """Whether ``ckpt``'s weights are complete: manifest present, every weight file matches it."""
    man = read_ckpt_manifest(ckpt)
    if man is None:
        return False, f"{ckpt}: no readable {MANIFEST} (save did not finish)"
    own = folder_step(ckpt)
    if own is not None and man.get("step") != own:
        return False, f"{ckpt}: its {MANIFEST} is that of step {man.get('step')}, not {own} (copied over it?)"
    return _check_files(ckpt, man, [rel for rel in man["files"] if Path(rel).name not in RESUME_FILES], full)


def folder_step(ckpt: Path) -> int | None:
    """The step a ``checkpoint-<step>`` folder's name gives, or None for another name."""
    m = re.fullmatch(r"checkpoint-(\d+)", Path(ckpt).name)
    return int(m.group(1)) if m else None


def weights_digest(ckpt: Path) -> str:
    """A hash of a checkpoint's weight files' names and sha256s (optimizer state left out): its model's identity."""
    man = read_ckpt_manifest(ckpt) or {}
    files = {
        rel: meta["sha256"] for rel, meta in (man.get("files") or {}).items() if Path(rel).name not in RESUME_FILES
    }
    return sha256_json(files)


def is_resumable(ckpt: Path) -> bool:
    """The manifest says so and every listed optimizer/RNG file is intact (sha256, cached)."""
    man = read_ckpt_manifest(ckpt)
    if not man or not man.get("resumable"):
        return False
    listed = [rel for rel in man["files"] if Path(rel).name in RESUME_FILES]
    return bool(listed) and _check_files(ckpt, man, listed, full=True)[0]


def checkpoint_dirs(ckpt_root: Path) -> list[tuple[int, Path]]:
    """The ``checkpoint-<step>`` folders under ``ckpt_root`` as (step, folder), by step."""
    return sorted((folder_step(d), d) for d in ckpt_root.glob("checkpoint-*") if folder_step(d) is not None)


def find_resume_point(ckpt_root: Path, steps: list[int]) -> Path | None:
    """Newest checkpoint to resume from, or None to start from scratch."""
    good = {}
    for step, d in checkpoint_dirs(ckpt_root):
        ok, why = verify_checkpoint(d, full=True)
        if ok:
            good[step] = d
        else:
            bad = d.with_name(f".incomplete-{d.name}-{int(time.time())}")
            log.warning("checkpoint %s is damaged (%s); moved to %s, not used", d, why, bad)
            d.rename(bad)
    for step in sorted(good, reverse=True):
        d = good[step]
        if step == 0 or not is_resumable(d):
            continue
        missing = [s for s in steps if s < step and s not in good]
        if missing:
            log.warning("checkpoints for steps %s are gone; training again from scratch", missing)
            return None
        return d
    return None


def prune_resume_state(ckpt_root: Path, keep: Path | None) -> None:
    """Drop optimizer/RNG state from every checkpoint but the resume point; weights stay."""
    if keep is not None:
        dirs = reversed(checkpoint_dirs(ckpt_root))
        point = next((d for step, d in dirs if step <= folder_step(keep) and is_resumable(d)), None)
        if point is None:
            log.warning("no checkpoint in %s has intact optimizer state; nothing pruned", ckpt_root)
            return
        if point != keep:
            log.warning("%s has no intact optimizer state; keeping that of %s, the resume point", keep, point)
        keep = point
    for _step, d in checkpoint_dirs(ckpt_root):
        man = read_ckpt_manifest(d)
        if d == keep or man is None or not man.get("resumable"):
            continue
        files = {rel: meta for rel, meta in man["files"].items() if Path(rel).name not in RESUME_FILES}
        write_json_atomic(d / MANIFEST, dict(man, resumable=False, files=files))
        for name in RESUME_FILES:
            (d / name).unlink(missing_ok=True)


def guard_run_identity(run_dir: Path, identity: dict) -> None:
    """Never resume from checkpoints made with other settings or data."""
    path = run_dir / "run_identity.json"
    digest = sha256_json(identity)
    ckpt_root = run_dir / "checkpoints"
    why = None
    if path.exists():
        try:
            old = json.loads(path.read_text()).get("sha256")
        except json.JSONDecodeError:
            old = None
        if old != digest and ckpt_root.exists():
            why = "settings changed since the checkpoints in %s were made"
    elif ckpt_root.exists() and any(ckpt_root.iterdir()):
        why = "checkpoints in %s have no run_identity.json"
    if why:
        stale = run_dir / f"checkpoints.stale-{int(time.time())}"
        log.warning(why + "; moved them to %s", ckpt_root, stale)
        ckpt_root.rename(stale)
    write_json_atomic(path, {"sha256": digest, "identity": identity})


def checkpoint_bytes(model, lora: dict | None) -> tuple[int, int]:
    """(bytes of one checkpoint's weights, of its optimizer state) from the model: each tensor once (tied
    weights shared), with LoRA the trained ones; AdamW keeps two float32 moments per trained parameter."""
    seen, weights = set(), 0
    tensors = [p for p in model.parameters() if p.requires_grad] if lora else model.state_dict().values()
    for t in tensors:
        key = (t.data_ptr(), t.numel())
        if key in seen:
            continue
        seen.add(key)
        weights += t.numel() * t.element_size()
    return weights, 2 * 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)


class _SaveFailed(Exception):
    """What a checkpoint's save raised (:func:`writing`), with the folder it was writing."""

    def __init__(self, folder: Path, cause: Exception):
        super().__init__(f"{folder}: {type(cause).__name__}: {cause}")
        self.folder, self.cause = folder, cause


@contextlib.contextmanager
def writing(folder: Path):
    """Mark an error of the library writing checkpoint ``folder`` as a failure to write that folder:
    safetensors reports an I/O error in words, without its errno, so the error is known by where it happened."""
    try:
        yield
    except WriteFailed:
        raise
    except Exception as e:
        if isinstance(e, (OSError, RuntimeError)) or type(e).__name__ == "SafetensorError":
            raise _SaveFailed(folder, e) from e
        raise


@contextlib.contextmanager
def saves_that_fit(ckpt_root: Path, per_checkpoint: int):
    """A save the file system stops becomes DiskFull or WriteFailed, the half-written checkpoint deleted."""
    try:
        yield
    except WriteFailed:
        raise
    except Exception as e:
        save = e if isinstance(e, _SaveFailed) else None
        cause = save.cause if save is not None else e
        full = write_errno(cause, ckpt_root) in DISK_FULL_ERRNOS
        if not full and save is None:
            raise
        partial = [d for _, d in checkpoint_dirs(ckpt_root) if not verify_checkpoint(d, full=False)[0]]
        for d in partial:
            shutil.rmtree(d, ignore_errors=True)
        folder = partial[-1] if partial else (save.folder if save is not None else None)
        what = f"the checkpoint {folder}" if folder else f"a checkpoint in {ckpt_root}"
        if full:
            msg = disk_full(ckpt_root, what, needed=per_checkpoint, cause=cause)
        else:
            code = write_errno(cause, ckpt_root) or probe_write(save.folder)
            msg = str(write_failed(ckpt_root, what, cause=cause, code=code))
        if partial:
            names = ", ".join(d.name for d in partial)
            msg += f" (the half-written {names} was deleted; the checkpoints before it are whole)"
        raise (DiskFull(msg) if full else WriteFailed(msg)) from cause
