"""The files of a folder of lm-evaluation-harness results, found and opened with care
(:mod:`oodcorr.analysis.readers.lmeval` reads what they say)."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

from ...core.errors import DataError
from ...core.io import DuplicateKey, loads_json
from .lmeval_samples import not_regular

MAX_FILES = 50_000  # .json and .jsonl files under the folder (--max-files)
MAX_RESULTS_BYTES = 64 * 2**20  # one results file (--max-file-mb)


def list_files(folder: Path, max_files: int = MAX_FILES, follow_links: bool = False) -> tuple[list[Path], list[str]]:
    """Every ``.json``/``.jsonl`` file under ``folder`` (sorted) and the notes of what was not
    followed."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file, not a folder"
        raise DataError(
            f"{folder}: {what}; --format lm-eval reads a folder of lm-evaluation-harness results files "
            "(searched recursively)"
        )
    root = folder.resolve()
    files: list[Path] = []
    notes: list[str] = []
    count = 0
    seen: dict[tuple[int, int], Path] = {}
    stack = [folder]
    while stack:
        d = stack.pop()
        try:
            st = d.stat()
        except PermissionError as e:  # the folder above lists its names, but may not be searched
            raise _not_searchable(d.parent, folder, e) from None
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
                        is_dir = e.is_dir()  # follows links; False for a link that dangles
                    except PermissionError as err:
                        raise _not_searchable(d, folder, err) from None
                    except OSError:
                        is_dir = False  # a link that loops
                    if e.is_symlink() and not follow_links:
                        target = Path(os.path.realpath(e.path))
                        if target != root and root not in target.parents:
                            notes.append(
                                f"{e.path}: a link that leads out of {folder} (to {target}): not followed; pass "
                                "--follow-links to read what it leads to"
                            )
                            continue
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


def _not_searchable(d: Path, folder: Path, e: OSError) -> DataError:
    return DataError(
        f"{d}: cannot look into this folder ({e.strerror}: its names can be listed, but not what they are); make "
        f"it searchable (`chmod a+x {d}`) or move it out of {folder}"
    )


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
