"""A full disk under the atomic writes: a real ENOSPC (a small tmpfs), never a mock."""

from __future__ import annotations

import json

import pytest

from oodcorr.core.errors import DiskFull
from oodcorr.core.io import atomic_path, write_json_atomic

from faults import fill, small_filesystem


@pytest.fixture
def full_disk(tmp_path):
    with small_filesystem(tmp_path / "scratch", "512k") as fs:
        yield fs


def test_a_result_that_does_not_fit_is_refused_before_writing_and_the_old_one_stays(full_disk):
    target = full_disk / "exp" / "summary.json"
    write_json_atomic(target, {"old": True})
    fill(full_disk, leave=4096)
    big = {"x": "y" * 200_000}
    with pytest.raises(DiskFull) as e:
        write_json_atomic(target, big)
    msg = str(e.value)
    assert str(target.parent) in msg  # the folder
    needed = len((json.dumps(big, indent=2, sort_keys=True) + "\n").encode())
    assert f"{needed} bytes" in msg  # the bytes it needed, known before writing
    assert "delete" in msg  # what to do
    assert json.loads(target.read_text()) == {"old": True}
    assert not list(target.parent.glob(".*.tmp"))  # nothing half-written left


def test_a_streamed_write_that_hits_enospc_leaves_no_half_file_and_says_how_far_it_got(full_disk):
    target = full_disk / "exp" / "predictions.bin"
    target.parent.mkdir()
    target.write_bytes(b"previous")
    fill(full_disk, leave=64 * 1024)
    with pytest.raises(DiskFull) as e:
        with atomic_path(target) as tmp:  # the size is not known in advance: the write itself hits ENOSPC
            with open(tmp, "wb") as fh:
                for _ in range(64):
                    fh.write(b"z" * 16384)
                    fh.flush()
    msg = str(e.value)
    assert str(target.parent) in msg and "written when it stopped" in msg
    assert target.read_bytes() == b"previous"
    assert not list(target.parent.glob(".*.tmp"))


def test_the_sentence_names_what_a_run_left_that_can_be_deleted(full_disk):
    exp = full_disk / "exp"
    (exp / ".published").mkdir(parents=True)
    stale = exp / "finetune" / "m" / "d" / "n8" / "seed0" / "checkpoints.stale-1"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"w" * 100_000)
    fill(full_disk, leave=4096)
    with pytest.raises(DiskFull) as e:
        write_json_atomic(exp / "scores" / "x.json", {"x": "y" * 50_000})
    assert str(stale) in str(e.value)
