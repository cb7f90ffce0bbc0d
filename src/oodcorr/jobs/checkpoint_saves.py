"""A checkpoint's save, sized (:func:`checkpoint_bytes`) and made safe: a save the file system stops
becomes its sentence, the half-written checkpoint deleted (:func:`writing`, :func:`saves_that_fit`)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from ..core.errors import DiskFull, WriteFailed
from ..core.filesystems import DISK_FULL_ERRNOS, disk_full, probe_write, write_errno, write_failed
from .checkpoints import checkpoint_dirs, verify_checkpoint


def checkpoint_bytes(model, lora: dict | None) -> tuple[int, int]:
    """(bytes of one checkpoint's weights, bytes of its optimizer state), estimated from the model:
    every tensor of the state dict once (tied weights shared), or with LoRA the trained ones (the
    adapter, a head); AdamW keeps two float32 moments per trained parameter."""
    seen, weights = set(), 0
    tensors = [p for p in model.parameters() if p.requires_grad] if lora else model.state_dict().values()
    for t in tensors:
        key = (t.data_ptr(), t.numel())
        if key in seen:
            continue
        seen.add(key)
        weights += t.numel() * t.element_size()
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return weights, 2 * 4 * trained


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
    """A checkpoint save that the file system stops becomes a :class:`~oodcorr.core.errors.DiskFull`
    (no room) or :class:`~oodcorr.core.errors.WriteFailed` (any other failure inside :func:`writing`),
    the half-written checkpoint (no manifest) deleted."""
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
