"""Folders that cannot be locked or written: a file system that refuses flock (a real LD_PRELOAD
shim on libc's flock), a folder of another user and a read-only mount (the writer a real other
uid, since root bypasses modes). The writer never goes on unlocked, and the sentence says what to do.
The lock folder (``OODCORR_LOCK_DIR``) read-only or a file, named as such; two runs of one experiment
that take its lock in two places, one or the other running, each step of the taking drawn out."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from oodcorr.core.locks import EXPERIMENT, LOCK_DIR_ENV, FolderInUse, hold, lock_path

from faults import PYTHON, as_nobody, flock_refusing_shim, python_env, read_only_mount, wait_for

# a child that takes a folder's lock (of the kind named) and says what happened, in one line
TAKE = textwrap.dedent(
    """
    import sys
    from oodcorr.core import locks
    try:
        with locks.hold(sys.argv[1], getattr(locks, sys.argv[2])):
            print("HELD")
    except locks.FolderInUse as e:
        print(type(e).__name__ + ": " + str(e))
    """
)


def _take(folder, kind="EXPERIMENT", prefix=(), **env):
    r = subprocess.run(
        [*prefix, PYTHON, "-c", TAKE, str(folder), kind],
        capture_output=True,
        text=True,
        env=python_env(**env),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@pytest.mark.parametrize("kind", ["EXPERIMENT", "FINETUNE", "PUBLISH"])
def test_a_file_system_that_refuses_flock_stops_the_writer_and_says_to_lock_elsewhere(tmp_path, kind):
    shim = flock_refusing_shim(tmp_path)
    nfs = tmp_path / "nfs" / "results" / "exp"
    nfs.mkdir(parents=True)
    out = _take(nfs, kind, LD_PRELOAD=str(shim), NOFLOCK_UNDER=str(tmp_path / "nfs"))
    assert out.startswith("LocksRefused: "), out  # not HELD: never unlocked
    assert str(nfs) in out and LOCK_DIR_ENV in out and "this host only" in out


def test_with_a_local_lock_folder_the_lock_is_taken_there_and_still_keeps_a_second_writer_out(tmp_path):
    shim = flock_refusing_shim(tmp_path)
    nfs = tmp_path / "nfs" / "exp"
    nfs.mkdir(parents=True)
    local = tmp_path / "local-locks"
    env = dict(LD_PRELOAD=str(shim), NOFLOCK_UNDER=str(tmp_path / "nfs"), **{LOCK_DIR_ENV: str(local)})
    assert _take(nfs, **env) == "HELD"
    # held by a live process (this one), the same folder is refused to a child using the same lock folder
    import os

    os.environ[LOCK_DIR_ENV] = str(local)
    try:
        where = lock_path(nfs, EXPERIMENT)
        assert where.parent == local.resolve() and nfs.name in where.name
        with hold(nfs, EXPERIMENT):
            out = _take(nfs, **env)
        assert out.startswith("FolderInUse: ") and str(where) in out, out
    finally:
        del os.environ[LOCK_DIR_ENV]


@pytest.fixture
def open_tmp():
    """A folder another user can reach (pytest's own is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="oodcorr-faults-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_another_users_results_folder_is_refused_naming_its_owner(open_tmp):
    prefix = as_nobody()
    tmp_path = open_tmp
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)  # root's, 0755: nobody may not write it
    out = _take(exp, prefix=prefix)
    assert out.startswith("FolderNotWritable: "), out
    assert "belongs to user root" in out and str(exp) in out
    assert not (exp / EXPERIMENT.file).exists()


def test_a_lock_folder_elsewhere_does_not_hide_a_results_folder_that_cannot_be_written(open_tmp):
    prefix = as_nobody()
    tmp_path = open_tmp
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o777)
    locks.chmod(0o777)
    out = _take(exp, prefix=prefix, **{LOCK_DIR_ENV: str(locks)})
    assert out.startswith("FolderNotWritable: "), out


def test_a_results_folder_on_a_read_only_mount_is_refused(tmp_path):
    exp = tmp_path / "ro" / "exp"
    exp.mkdir(parents=True)
    with read_only_mount(tmp_path / "ro"):
        with pytest.raises(FolderInUse) as e:
            with hold(exp, EXPERIMENT):
                pass
        assert type(e.value).__name__ == "FolderNotWritable" and "read-only file system" in str(e.value)


# ---- the lock folder (issue 47): its own problems named with OODCORR_LOCK_DIR; one place per experiment
def test_a_lock_folder_on_a_read_only_mount_is_named_as_the_lock_folder(tmp_path):
    """Before: 'experiment folder … cannot be written by this user', of a folder that can be written."""
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    ro = tmp_path / "ro"
    (ro / "locks").mkdir(parents=True)
    with read_only_mount(ro):
        out = _take(exp, **{LOCK_DIR_ENV: str(ro / "locks")})
    assert out.startswith("LockDirUnusable: "), out
    assert f"{LOCK_DIR_ENV}={ro / 'locks'}" in out and "read-only file system" in out and str(exp) in out, out
    assert "cannot be written by this user" not in out
    assert not list(exp.iterdir())  # nothing written in the experiment folder


def test_a_lock_folder_that_is_a_file_is_named_as_such(tmp_path):
    """Before: "cannot take the experiment's lock (File exists)"."""
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    not_a_folder = tmp_path / "locks"
    not_a_folder.write_text("a file\n")
    out = _take(exp, **{LOCK_DIR_ENV: str(not_a_folder)})
    assert out.startswith("LockDirUnusable: "), out
    assert f"{LOCK_DIR_ENV}={not_a_folder}" in out and "is a file, not a folder" in out, out
    assert not_a_folder.read_text() == "a file\n" and not list(exp.iterdir())


# two runs of one experiment, one taking its lock in OODCORR_LOCK_DIR, the other in the folder: each
# stops at a point (``before``: its place recorded, the places not yet listed; ``after``: listed, none
# taken) until the test says go, then writes what happened to a file and, holding, waits to be let go
RACE = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from oodcorr.core import locks
    folder, where, reached, go, outcome, done = sys.argv[1], sys.argv[2], *map(Path, sys.argv[3:7])
    listed = locks._recorded

    def say(text):  # whole when it appears: the test reads it as soon as it exists
        tmp = outcome.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, outcome)

    def paused(*a, **k):
        if where == "after":
            got = listed(*a, **k)
        reached.write_text("here")
        while not go.exists():
            time.sleep(0.01)
        return got if where == "after" else listed(*a, **k)

    if where != "none":
        locks._recorded = paused
    try:
        with locks.hold(folder, locks.EXPERIMENT):
            say("HELD")
            while not done.exists():
                time.sleep(0.01)
    except locks.FolderInUse as e:
        say(type(e).__name__ + ": " + str(e))
    """
)


def _racer(tmp_path, exp, name, where, lock_dir=None):
    d = tmp_path / name
    d.mkdir()
    files = [d / f for f in ("reached", "go", "outcome")] + [tmp_path / "done"]
    env = python_env(**({LOCK_DIR_ENV: str(lock_dir)} if lock_dir else {}))
    if not lock_dir:
        env.pop(LOCK_DIR_ENV, None)
    proc = subprocess.Popen(
        [PYTHON, "-c", RACE, str(exp), where, *map(str, files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    return proc, dict(zip(("reached", "go", "outcome"), files[:3], strict=True))


def _outcome(proc, files) -> str:
    wait_for(files["outcome"], proc, timeout=120)
    return files["outcome"].read_text()


@pytest.mark.parametrize("first", ["elsewhere", "in the folder"])
def test_two_shells_that_disagree_about_the_lock_folder_never_both_run(tmp_path, first):
    """Before: both ran, each holding the lock in its own place. Now the experiment records where its lock
    was taken, and a run that would take it elsewhere takes that place too: refused while it is held."""
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    lock_dir = tmp_path / "locks"
    first_dir, second_dir = (lock_dir, None) if first == "elsewhere" else (None, lock_dir)
    a, fa = _racer(tmp_path, exp, "a", "none", first_dir)
    b = None
    try:
        assert _outcome(a, fa) == "HELD"
        b, fb = _racer(tmp_path, exp, "b", "none", second_dir)
        out = _outcome(b, fb)
        assert out.startswith("FolderInUse: "), out
        assert f"PID {a.pid}" in out and LOCK_DIR_ENV in out and "one place" in out, out
    finally:
        (tmp_path / "done").write_text("")
        for p in (a, b):
            if p is not None:
                p.wait(timeout=60)


@pytest.mark.parametrize(("where", "places"), [("before", 2), ("after", 2), ("before", 1)])
def test_two_runs_taking_the_lock_at_once_exactly_one_runs(tmp_path, where, places):
    """The taking of the lock on a slow file system, every step drawn out: each run stops at the step named
    (``before``: both stopped there together, then let go together; ``after``: the run with the lock folder
    stopped having listed the places, while the other runs through), then goes on. Exactly one runs, whether
    the two take the lock in two places (one with OODCORR_LOCK_DIR) or in one."""
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    a, fa = _racer(tmp_path, exp, "a", where, tmp_path / "locks" if places == 2 else None)
    b, fb = _racer(tmp_path, exp, "b", where if where == "before" else "none")
    try:
        wait_for(fa["reached"], a, timeout=120)
        if where == "before":
            wait_for(fb["reached"], b, timeout=120)
            fa["go"].write_text("")
            fb["go"].write_text("")
            outcomes = [_outcome(a, fa), _outcome(b, fb)]
        else:
            out_b = _outcome(b, fb)  # the other runs through while this one is stopped
            fa["go"].write_text("")
            outcomes = [_outcome(a, fa), out_b]
        assert sorted(o == "HELD" for o in outcomes) == [False, True], outcomes
        assert all(o == "HELD" or o.startswith("FolderInUse: ") for o in outcomes), outcomes
    finally:
        (tmp_path / "done").write_text("")
        for p in (a, b):
            p.wait(timeout=60)


def test_a_lock_taken_in_another_place_that_is_free_now_does_not_stop_a_run(tmp_path):
    """Provably free from this host: a run taking the lock in the folder, after one that took it in
    OODCORR_LOCK_DIR and ended, runs (and so does the next one back in the lock folder)."""
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    env = {LOCK_DIR_ENV: str(tmp_path / "locks")}
    assert _take(exp, **env) == "HELD"
    assert _take(exp) == "HELD"
    assert _take(exp, **env) == "HELD"


def test_a_lock_folder_of_another_host_cannot_be_proved_free_and_is_named(tmp_path):
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    env = {LOCK_DIR_ENV: str(tmp_path / "locks")}
    assert _take(exp, **env) == "HELD"
    (record,) = (exp / ".lock-places").iterdir()
    doc = json.loads(record.read_text())
    record.write_text(json.dumps(dict(doc, host="node-elsewhere")))
    out = _take(exp)
    assert out.startswith("FolderInUse: "), out
    assert "node-elsewhere" in out and str(record) in out and "cannot be told from here" in out, out
    record.unlink()  # the way out the sentence gives, once no run is alive there
    assert _take(exp) == "HELD"
