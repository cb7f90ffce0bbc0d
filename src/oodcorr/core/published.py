"""Results published as a set, switched by one rename, and checked against what was published.

Snakemake deletes a job's declared outputs before the job starts, so the files people read cannot be
rule ``publish_results``' outputs (a kill in between would lose them)::

    results/<experiment>/
        .published/v7/...              one published set, with publish_record.json (each file's sha256)
        .published/current -> v7       what readers see; replacing this link is the switch
        scores.csv -> .published/current/scores.csv     the paths people read: links, made once
        published.json                 rule publish_results' declared output: a copy of the record

The version before the current one is kept until the next publish; older ones are deleted unless they
differ from their record (kept as ``.published/kept-*`` and named), as is anything found where a link goes.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .atomic_write import current_umask, write_json_atomic
from .digests import sha256_file, stat_key
from .errors import ResultError, WriteFailed
from .filesystems import check_room, write_errno, write_failed
from .io import json_or_none
from .locks import PUBLISH, hold
from .seals import check_seal

PUBLISHED = ".published"
CURRENT = "current"
MARKER = "published.json"  # rule publish_results' declared output, in the experiment folder
_VERSION = re.compile(r"^v(\d+)$")


class PublishRefused(RuntimeError):
    """A staged file is not what its job wrote (cut short, edited): nothing is published."""


def _top_names(rels) -> list[str]:
    return list(dict.fromkeys(Path(r).parts[0] for r in rels))


def _link_target(name: str) -> str:
    return f"{PUBLISHED}/{CURRENT}/{name}"


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


# ---- publishing ----------------------------------------------------------------------------
def publish_set(root: str | os.PathLike, staged: dict, experiment: str) -> dict:
    """Publish each staged file (``{rel: staged path}``) as ``root/<rel>``, as one set, under the
    publish lock; return the record. A staged file that does not match its seal is :class:`PublishRefused`."""
    root = Path(root)
    staged = {str(rel): Path(path) for rel, path in staged.items()}
    rels = list(staged)
    pub = root / PUBLISHED
    pub.mkdir(parents=True, exist_ok=True)
    with hold(pub, PUBLISH):
        notes = []
        for p in [*pub.iterdir(), *pub.parent.iterdir()]:  # what killed publishes left
            if p.parent == pub and p.name.startswith(".new-") and p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                notes.append(f"removed {p}, left by a publish that did not finish")
            elif ".link-" in p.name and p.is_symlink():
                p.unlink(missing_ok=True)
        previous = _current_version(pub)
        record = _build(pub, staged, experiment)
        _replace_with_link(pub / CURRENT, record["version"], pub)
        for name in _top_names(rels):
            link = root / name
            if link.is_symlink() and os.readlink(link) == _link_target(name):
                continue
            kept = _replace_with_link(link, _link_target(name), pub)
            if kept:
                notes.append(f"{root / name} was not the link into the published set; it is kept as {kept}")
        # versions other than this one and the previous: deleted, or kept (and named) when they differ from
        # their record
        for _, d in _versions(pub):
            if d.name == record["version"]:
                continue
            kept = pub / f"kept-{_stamp()}-{d.name}"
            problems = _version_problems(d, kept)[1]
            if problems:
                os.rename(d, kept)
                notes.append(
                    f"{kept} keeps a set whose files differ from what was published ({problems[0]}); delete it when "
                    "done"
                )
            elif d.name != previous:
                shutil.rmtree(d, ignore_errors=True)
    return dict(record, notes=notes)


def _build(pub: Path, staged: dict[str, Path], experiment: str) -> dict:
    mask = current_umask()
    block = 4096
    with contextlib.suppress(OSError):
        block = os.statvfs(pub).f_frsize or 4096
    needed = 0  # what the copies take on disk: each file in whole blocks
    for src in staged.values():
        with contextlib.suppress(OSError):
            needed += -(-src.stat().st_size // block) * block
    what = f"publishing the {len(staged)} file(s) of experiment {experiment!r} (the published set is as it was)"
    check_room(pub, needed, what)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=pub))
        files, problems, bad = {}, [], []
        for rel, src in staged.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                sha = _copy_hashing(src, dst)
            except FileNotFoundError:
                problems.append(f"{src} is missing")
                bad.append(src)
                continue
            why = check_seal(src, sha)
            if why:
                problems.append(why.replace(str(dst), str(src)))
                bad.append(src)
                continue
            os.chmod(dst, 0o666 & ~mask)
            files[rel] = {"sha256": sha, "size": dst.stat().st_size}
        if problems:
            files = " ".join(sorted({str(b) for b in bad}))
            raise PublishRefused(
                f"not published, the published set is as it was: {'; '.join(problems)}. Delete {files} and run "
                "again: the jobs that make them run again"
            )
        for d in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
            os.chmod(d, 0o777 & ~mask)  # mkdtemp's folder is private; results get the usual mode
        for rel in files:  # after the chmod (which changes the ctime)
            files[rel]["stat"] = stat_key(tmp / rel)
        version = f"v{max([n for n, _ in _versions(pub)], default=0) + 1}"
        record = {
            "format": RECORD_FORMAT,
            "experiment": experiment,
            "version": version,
            "published": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "files": files,
        }
        write_json_atomic(tmp / PUBLISH_RECORD, record)
        os.rename(tmp, pub / version)
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, Exception) and not isinstance(e, WriteFailed) and write_errno(e) is not None:
            raise write_failed(pub, what, needed=needed, cause=e) from e
        raise
    return record


def _copy_hashing(src: Path, dst: Path) -> str:
    shutil.copyfile(src, dst)
    with open(dst, "rb+") as fh:
        os.fsync(fh.fileno())
    return sha256_file(dst)


def _versions(pub: Path) -> list[tuple[int, Path]]:
    return sorted((int(m.group(1)), p) for p in pub.iterdir() if (m := _VERSION.match(p.name)) and p.is_dir())


def _current_version(pub: Path) -> str | None:
    link = pub / CURRENT
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    return target if _VERSION.match(target) and (pub / target).is_dir() else None


def _replace_with_link(path: Path, target: str, pub: Path) -> Path | None:
    """Make ``path`` a link to ``target`` by one rename; anything else there is moved into ``pub`` (returned)."""
    tmp = path.with_name(f".{path.name}.link-{os.getpid()}-{time.monotonic_ns()}")
    os.symlink(target, tmp)
    kept = None
    try:
        if path.exists() and not path.is_symlink():  # (a folder cannot be replaced by a link in one rename)
            kept = pub / f"kept-{_stamp()}-{path.name}"
            os.rename(path, kept)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return kept


# ---- checking what is published ------------------------------------------------------------
def _version_problems(folder: Path, shown: Path) -> tuple[dict | None, list[str]]:
    """A version folder's record, and its files changed, missing or added (those whose stat is the recorded
    one are not hashed again). ``shown``: the folder the sentences name."""
    try:
        record = read_publish_record(folder / PUBLISH_RECORD)
    except ResultError as e:  # another version's record: the set is published again
        return None, [str(e)]
    if record is None:
        return None, [f"{folder / PUBLISH_RECORD} is missing or unreadable"]
    out = []
    for rel, want in sorted(record["files"].items()):
        f = folder / rel
        if not f.is_file():
            out.append(f"{shown / rel} is missing")
            continue
        if want.get("stat") == stat_key(f):
            continue
        size = f.stat().st_size
        if size != want.get("size") or sha256_file(f) != want["sha256"]:
            out.append(
                f"{shown / rel} differs from what was published (now {size} bytes, sha256 "
                f"{sha256_file(f)[:12]}...; published {want.get('size')} bytes, {want['sha256'][:12]}...)"
            )
    listed = set(record["files"]) | {PUBLISH_RECORD}
    extra = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and str(p.relative_to(folder)) not in listed
    )
    if extra:
        out.append(
            f"{shown / extra[0]} was never published (written there by hand or by `oodcorr analyse --force`?)"
            + (f", and {len(extra) - 1} more such file(s)" if len(extra) > 1 else "")
        )
    return record, out


@dataclass
class State:
    layout: str  # "none" (nothing published yet), "versioned"
    version: str | None = None
    record: dict | None = None
    damaged: list[str] = field(default_factory=list)  # published files changed, missing, or links replaced
    incomplete: list[str] = field(default_factory=list)  # the marker missing or stale, files not yet published
    leftovers: list[str] = field(default_factory=list)  # what killed publishes left

    @property
    def whole(self) -> bool:
        return self.layout == "versioned" and not self.damaged and not self.incomplete


def inspect(root: str | os.PathLike, rels: list[str]) -> State:
    """Compare what ``root`` publishes now with its publish record (reads only)."""
    root = Path(root)
    pub = root / PUBLISHED
    if not pub.is_dir():
        return State("none")
    state = State("versioned")
    state.leftovers = sorted(str(p) for p in pub.iterdir() if p.name.startswith(".new-"))
    version = _current_version(pub)
    if version is None:
        state.damaged.append(f"{pub / CURRENT} does not point at a published set")
        return state
    state.version = version
    state.record, problems = _version_problems(pub / version, root)
    state.damaged += problems
    if state.record is None:  # damaged, so this run publishes the set again
        return state
    for name in _top_names(rels):
        path = root / name
        if not (path.is_symlink() and os.readlink(path) == _link_target(name)):
            what = "is missing" if not path.exists() and not path.is_symlink() else "was replaced"
            state.damaged.append(f"{path} {what} (it is a link into {pub / CURRENT})")
    missing = [r for r in rels if r not in state.record["files"]]
    if missing:
        state.incomplete.append(
            f"{len(missing)} file(s) of this config were never published here (e.g. {root / missing[0]})"
        )
    try:
        marker = read_publish_record(root / MARKER)
    except ResultError as e:
        state.incomplete.append(str(e))
        return state
    if marker is None:
        state.incomplete.append(
            f"{root / MARKER} is missing: the last publish did not finish (killed?) or the file was deleted"
        )
    elif marker.get("version") != version:
        state.incomplete.append(f"{root / MARKER} names version {marker.get('version')}, but {version} is published")
    return state


def write_marker(root: str | os.PathLike, record: dict) -> None:
    write_json_atomic(Path(root) / MARKER, {k: v for k, v in record.items() if k != "notes"})


def describe(record: dict) -> str:
    return f"version {record.get('version')}, published {record.get('published')}, {len(record['files'])} files"


# ---- what was published --------------------------------------------------------------------
PUBLISH_RECORD = "publish_record.json"  # in each published version folder
RECORD_FORMAT = 1
# what remakes a publish record (and a copy of it, published.json): the set published again from staging
REPUBLISH = "snakemake --forcerun publish_results"


def read_publish_record(path: str | Path) -> dict | None:
    """A publish record, or None when missing or not one; another format is a
    :class:`~oodcorr.core.errors.ResultError` naming the file and :data:`REPUBLISH`."""
    doc = json_or_none(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None
    if doc.get("format") != RECORD_FORMAT:
        raise ResultError(
            f"{path}: a publish record of format {doc.get('format')!r}, not {RECORD_FORMAT} (another version of "
            f"oodcorr); `{REPUBLISH}` publishes the set again (nothing is trained, evaluated or analysed again)"
        )
    if not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in doc["files"].values()):
        return None
    return doc
