"""The files of a folder of lm-evaluation-harness results (:mod:`.lmeval` reads them): the path
pattern that names model, run and step from a file's path (:func:`compile_pattern`), the walk of
the folder within its bounds (:func:`list_files`: links followed, each real folder once, the files
counted first), and one JSON file read within its size bound (:func:`load_json`), each refusal a
:class:`~oodcorr.core.errors.DataError` naming the file."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from ..core.errors import DataError
from ..core.io import DuplicateKey, loads_json
from .lmeval_samples import not_regular

MAX_FILES = 50_000  # .json and .jsonl files under the folder (--max-files)
MAX_RESULTS_BYTES = 64 * 2**20  # one results file (--max-file-mb)
PLACEHOLDERS = ("model", "run", "step")


# ---- the path pattern ----
def compile_pattern(pattern: str) -> re.Pattern:
    """A path pattern -> a regular expression matched against a file's path below the folder
    (``/``-separated, whole path). ``{model}``, ``{run}`` name one folder or part of a file name
    (no ``/``), ``{step}`` a whole number; ``*`` is any text within one name, ``**/`` any number of
    folders; everything else is literal. E.g. ``{model}/zero-shot/*_step{step}.json`` or
    ``{model}-seed{run}/step{step}/results_*.json``."""
    if not pattern or pattern.startswith("/"):
        raise DataError(
            f"--path-pattern {pattern!r}: give a path relative to the folder, e.g. '{{model}}/*_step{{step}}.json'"
        )
    out, seen, i = [], set(), 0
    while i < len(pattern):
        c = pattern[i]
        if c == "{":
            j = pattern.find("}", i)
            name = pattern[i + 1 : j] if j > 0 else pattern[i + 1 :]
            if j < 0 or name not in PLACEHOLDERS:
                raise DataError(
                    f"--path-pattern {pattern!r}: {{{name}}} is not a placeholder; the placeholders are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
            if name in seen:
                raise DataError(f"--path-pattern {pattern!r}: {{{name}}} occurs twice; name each once")
            seen.add(name)
            out.append(f"(?P<{name}>[0-9]+)" if name == "step" else f"(?P<{name}>[^/]+?)")
            i = j + 1
        elif pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif c == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


# ---- walking the folder ----
def list_files(folder: Path, max_files: int = MAX_FILES) -> tuple[list[Path], list[str]]:
    """Every ``.json``/``.jsonl`` file under ``folder`` (sorted) and the notes of what was not
    followed. Links are followed, each real folder read once; more files than ``max_files`` is an
    error giving the count (all counted first, only the first ``max_files`` kept)."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file, not a folder"
        raise DataError(
            f"{folder}: {what}; --format lm-eval reads a folder of lm-evaluation-harness results files "
            "(searched recursively)"
        )
    files: list[Path] = []
    notes: list[str] = []
    count = 0
    seen: dict[tuple[int, int], Path] = {}
    stack = [folder]
    while stack:
        d = stack.pop()
        try:
            st = d.stat()
        except OSError as e:
            notes.append(f"{d}: a link that leads to no folder ({e.strerror}): not followed")
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            notes.append(
                f"{d}: leads to the folder {seen[key]}, already read (a link loop or a second link): not read again"
            )
            continue
        seen[key] = d
        subdirs = []
        try:
            with os.scandir(d) as entries:  # streamed: a folder of millions of names is counted, not held
                for e in entries:
                    try:
                        is_dir = e.is_dir()  # follows links; False for a link that loops or dangles
                    except OSError:
                        is_dir = False
                    if is_dir:
                        subdirs.append(Path(e.path))
                        continue
                    if not e.name.endswith((".json", ".jsonl")):
                        if e.is_symlink() and not os.path.exists(e.path):
                            notes.append(f"{e.path}: a link that leads nowhere (a loop or a missing target): skipped")
                        continue
                    count += 1
                    if count <= max_files:
                        files.append(Path(e.path))
        except OSError as e:
            raise DataError(
                f"{d}: cannot list this folder ({e.strerror}); make it readable or move it out of {folder}"
            ) from None
        stack += sorted(subdirs, reverse=True)  # each folder's subfolders in name order: the same notes each time
    if count > max_files:
        raise DataError(
            f"{folder}: holds {count:,} .json/.jsonl files, more than the {max_files:,} read at most; give a folder "
            f"with only the results to analyse, or pass --max-files {count} to read them all"
        )
    return sorted(files), notes


# ---- one results file ----
def load_json(path: Path, max_bytes: int):
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise DataError(not_regular(path))
        size = st.st_size
        if size > max_bytes:
            raise DataError(_too_large(path, size, max_bytes))
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as e:
        raise DataError(
            f"{path}: cannot be read ({e.strerror}); make it readable or move it out of the folder"
        ) from None
    if len(raw) > max_bytes:
        raise DataError(_too_large(path, len(raw), max_bytes))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}): not an lm-evaluation-harness results file") from None
    if not text.strip():
        raise DataError(
            f"{path}: is empty (a run cut short?); rerun that evaluation or move the file out of the folder"
        )
    try:
        return loads_json(text)
    except DuplicateKey as e:
        raise DataError(
            f"{path}: {e} (a hand-edited or merged file); keep one of them, or rerun that evaluation"
        ) from None
    except json.JSONDecodeError as e:
        cut = " (it ends early: cut short while being written?)" if e.pos >= len(text.rstrip()) - 1 else ""
        raise DataError(
            f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno}){cut}; rerun that evaluation or move "
            "the file out of the folder"
        ) from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deep to read; not an lm-evaluation-harness results file") from None


def _too_large(path: Path, size: int, max_bytes: int) -> str:
    return (
        f"{path}: {size / 2**20:,.0f} MiB, more than the {max_bytes / 2**20:g} MiB a results file may have "
        "(an lm-evaluation-harness results file holds kilobytes to a few megabytes); if it really is one, pass "
        f"--max-file-mb {math.ceil(size / 2**20)}"
    )
