"""The errors a user sees, in one place (the lowest layer: every module may raise them).

Each message names the key, file or line and what to do. Errors that belong to one job
(``EvaluationRefused``, ``NonFiniteLoss``, ``FolderInUse``, ``LockMismatch``...) stay beside it.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config problem; the message names the offending key."""


class DataError(ValueError):
    """Bad input data; the message names the file and, where there is one, the line."""


class ResultError(ValueError):
    """An evaluation result the aggregation cannot use; the message names the file and the way out."""


class StaleResult(RuntimeError):
    """A result on disk that no longer matches what it lists or was made from, which Snakemake
    would not rebuild by itself; the message names it and the command that rebuilds it."""


class WriteFailed(RuntimeError):
    """A write the file system stopped (an I/O error, a read-only file system, a folder this user
    cannot write, or no room: :class:`DiskFull`); nothing half-written is kept. The message names the
    file, the folder, its file system and what to do (:func:`oodcorr.core.filesystems.write_failed`)."""


class DiskFull(WriteFailed):
    """A write stopped, or refused before it started, by a full file system or a used-up quota
    (ENOSPC, EDQUOT, EFBIG); nothing half-written is kept. The message names the folder, the bytes
    the write needed, what is free there and what can be deleted (:func:`oodcorr.core.filesystems.disk_full`)."""


def did_you_mean(name: str, candidates, n: int = 3, lead: str = "; ") -> str:
    """``lead`` and ``"did you mean 'x'?"`` (up to ``n`` close names among ``candidates``, as a typo's
    likely intent), or ``""`` when none is close: the tail of a message that names an unknown name."""
    import difflib

    near = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=n)
    return f"{lead}did you mean {', '.join(map(repr, near))}?" if near else ""
