"""The errors a user sees, in one place; errors that belong to one job stay beside it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config problem; the message names the offending key."""


class DataError(ValueError):
    """Bad input data; the message names the file and, where there is one, the line."""


class ResultError(ValueError):
    """An evaluation result the aggregation cannot use; the message names the file and the way out."""


class StaleResult(RuntimeError):
    """A result on disk that no longer matches what it was made from, which Snakemake would not rebuild."""


class WriteFailed(RuntimeError):
    """A write the file system stopped; nothing half-written is kept (:func:`oodcorr.core.filesystems.write_failed`)."""


class DiskFull(WriteFailed):
    """A write stopped, or refused before it started, by a full file system or a used-up quota."""


def did_you_mean(name: str, candidates, n: int = 3, lead: str = "; ") -> str:
    """``lead`` and ``"did you mean 'x'?"`` (up to ``n`` close names among ``candidates``), or ``""``."""
    import difflib

    near = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=n)
    return f"{lead}did you mean {', '.join(map(repr, near))}?" if near else ""
