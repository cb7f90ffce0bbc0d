"""A publish that meets a full disk (a real ENOSPC on a small tmpfs): the previous set stays whole,
nothing half-built is left, and the sentence names the folder, the bytes and what to delete. And a
publish preempted (a real SIGTERM, then SIGKILL after the grace time) leaves the previous set whole."""

from __future__ import annotations

import json
import textwrap

import pytest

from oodcorr.core.errors import DiskFull
from oodcorr.core.published import PUBLISHED, inspect, publish_set, write_marker
from oodcorr.core.seals import seal

from faults import fill, preempt, small_filesystem, start_stopped, wait_for

RELS = ["scores.csv", "analysis/partial_correlations.csv"]


def _stage(where, tag: str, size: int):
    files = {
        "scores.csv": (f"model,step,acc\nm,0,{tag}\n" + "x" * size).encode(),
        "analysis/partial_correlations.csv": f"x,y,r\na,b,{tag}\n".encode(),
    }
    for rel, data in files.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_bytes(data)
    seal([where / rel for rel in files])
    return {rel: where / rel for rel in files}, files


@pytest.fixture
def exp(tmp_path):
    with small_filesystem(tmp_path / "scratch", "256k") as fs:
        root = fs / "results" / "x"
        staged, files = _stage(tmp_path / "staging-old", "old", 100)
        write_marker(root, publish_set(root, staged, experiment="x"))
        yield root, files


def _seen(root):
    return {rel: (root / rel).read_bytes() for rel in RELS}


def test_a_set_that_cannot_fit_is_refused_before_copying_and_the_old_set_stays(tmp_path, exp):
    root, old = exp
    staged, _ = _stage(tmp_path / "staging-new", "new", 200_000)
    fill(root, leave=64 * 1024)
    with pytest.raises(DiskFull) as e:
        publish_set(root, staged, experiment="x")
    msg = str(e.value)
    assert str(root / PUBLISHED) in msg and "bytes" in msg and "the published set is as it was" in msg
    assert _seen(root) == {rel: old[rel] for rel in RELS}
    assert inspect(root, RELS).whole
    assert not list((root / PUBLISHED).glob(".new-*"))


def test_a_disk_that_fills_while_the_set_is_built_leaves_the_old_set_whole(tmp_path, exp):
    root, old = exp
    staged, _ = _stage(tmp_path / "staging-new", "new", 10_000)
    fill(root, leave=16 * 1024 + 2048)  # the copies fit (16 KiB in blocks), the set's record does not
    with pytest.raises(DiskFull):
        publish_set(root, staged, experiment="x")
    assert _seen(root) == {rel: old[rel] for rel in RELS}
    assert inspect(root, RELS).whole
    assert not list((root / PUBLISHED).glob(".new-*"))


# A publisher stopped half-way through building the new set (after its first file is copied),
# where it writes the file named and blocks, as a slow shared disk would, until the signals come.
STOPPED = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import oodcorr.core.published as p
    staged, reached = json.loads(sys.argv[2]), Path(sys.argv[3])
    copy = p._copy_hashing
    def copy_then_stop(src, dst, *a, **k):
        out = copy(src, dst, *a, **k)
        reached.write_text("here")
        while True:
            time.sleep(1)
    p._copy_hashing = copy_then_stop
    p.publish_set(sys.argv[1], staged, experiment="x")
    """
)


@pytest.mark.slow
def test_a_preempted_publish_leaves_the_previous_set_whole_and_the_requeued_one_publishes(tmp_path):
    root = tmp_path / "results" / "x"
    staged, old = _stage(tmp_path / "staging-old", "old", 100)
    write_marker(root, publish_set(root, staged, experiment="x"))
    new_staged, new = _stage(tmp_path / "staging-new", "new", 100)
    reached = tmp_path / "reached"
    proc = start_stopped(STOPPED, str(root), json.dumps({k: str(v) for k, v in new_staged.items()}), str(reached))
    wait_for(reached, proc, timeout=120)
    assert preempt(proc, grace=2.0) != 0
    assert _seen(root) == {rel: old[rel] for rel in RELS}  # readers see the previous set, whole
    assert inspect(root, RELS).whole
    write_marker(root, publish_set(root, new_staged, experiment="x"))  # the requeued job
    assert _seen(root) == {rel: new[rel] for rel in RELS}
    assert not list((root / PUBLISHED).glob(".new-*"))  # the preempted one's half-built set is gone
