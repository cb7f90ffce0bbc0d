"""A job's refusal (oodcorr.launch.runtime): recorded in room taken when the job starts, so that the
end-of-run report can repeat it on the console with the job named, whichever job it was and even on
a full disk; a job that ends well leaves no record."""

from __future__ import annotations

import subprocess
import textwrap

from oodcorr.core.refusals import REFUSALS_ENV, read_refusals

from faults import PYTHON, fill, python_env, read_only_mount, small_filesystem

JOB = """
import sys, types
from pathlib import Path
from oodcorr.launch.runtime import end_job, refuse, start_job

out = Path(sys.argv[1])
sm = types.SimpleNamespace(
    log=[sys.argv[2]], rule="convert_gguf", wildcards=types.SimpleNamespace(model="m"), output=[str(out / "model")]
)
start_job(sm)
"""


def _job(tmp_path, body: str, out, refusals) -> subprocess.CompletedProcess:
    """A rule's script in a process of its own, as Snakemake runs it: ``body`` after start_job."""
    log = tmp_path / "logs" / "convert.log"
    return subprocess.run(
        [PYTHON, "-c", JOB + textwrap.dedent(body), str(out), str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        env=python_env(**{REFUSALS_ENV: str(refusals)}),
    )


def test_a_raw_write_that_meets_a_full_disk_is_recorded_as_its_sentence(tmp_path):
    """A job whose own code writes without the atomic helpers (a converter, a figure library) and meets
    ENOSPC: its traceback was all there was. Now its log ends with the full-disk sentence and the
    refusal is recorded for the end of the run, the job named."""
    refusals = tmp_path / "refused"
    with small_filesystem(tmp_path / "scratch", "256k") as fs:
        fill(fs)
        body = """
        with open(out / "model.bin", "wb") as fh:
            fh.write(b"w" * 300_000)
        """
        assert _job(tmp_path, body, fs, refusals).returncode == 1
        log = (tmp_path / "logs" / "convert.log").read_text()
        (doc,) = read_refusals(refusals)
    sentence = (
        f"rule convert_gguf's output {fs}/model: no room in {fs}"  # a write's error names no file: the job's output
    )
    assert log.strip().splitlines()[-1].startswith(f"oodcorr: {sentence}") and "Traceback" not in log
    assert doc["rule"] == "convert_gguf" and doc["wildcards"] == {"model": "m"} and doc["kind"] == "disk full"
    assert doc["message"].startswith(sentence) and doc["log"].endswith("convert.log")


def test_a_raw_write_into_a_read_only_file_system_is_recorded_as_its_sentence(tmp_path):
    """As above, with a read-only file system (EROFS, issue 47): before, a traceback and a record of kind
    'failed' holding ``OSError: [Errno 30] Read-only file system``."""
    refusals = tmp_path / "refused"
    ro = tmp_path / "ro"
    ro.mkdir()
    with read_only_mount(ro):
        body = """
        with open(out / "model.bin", "wb") as fh:
            fh.write(b"w")
        """
        assert _job(tmp_path, body, ro, refusals).returncode == 1
    log = (tmp_path / "logs" / "convert.log").read_text()
    (doc,) = read_refusals(refusals)
    sentence = f"rule convert_gguf's output {ro}/model.bin: {ro} is on a read-only file system (file system {ro} ("
    assert log.strip().splitlines()[-1].startswith(f"oodcorr: {sentence}") and "Traceback" not in log, log
    assert doc["kind"] == "write failed" and doc["message"].startswith(sentence), doc


def test_the_record_is_written_when_the_disk_it_is_on_filled_after_the_job_started(tmp_path):
    """The refusal's room is taken when the job starts: a job that fills the disk its record (and its
    log) are on can still record why it stopped."""
    with small_filesystem(tmp_path / "scratch", "512k") as fs:
        refusals = fs / "refused"
        body = """
        from oodcorr.core.atomic_write import write_text_atomic
        with open(out / "filler", "wb") as fh:  # the job's own output fills the disk
            try:
                while True:
                    fh.write(b"\\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        write_text_atomic(out / "summary.json", "x" * 100_000)
        """
        res = _job(tmp_path, body, fs, refusals)
        assert res.returncode == 1, res.stderr[-2000:]
        (doc,) = read_refusals(refusals)
    assert doc["kind"] == "disk full" and doc["message"].startswith(f"{fs}/summary.json: no room in {fs}")


def test_a_refusal_is_recorded_and_a_job_that_ends_well_leaves_none(tmp_path):
    refusals = tmp_path / "refused"
    body = """
    from oodcorr.core.errors import ResultError
    refuse(ResultError("x.json: unreadable; delete it and run again"))
    """
    res = _job(tmp_path, body, tmp_path, refusals)
    assert res.returncode == 1
    assert (tmp_path / "logs" / "convert.log").read_text().strip().splitlines()[-1] == (
        "oodcorr: x.json: unreadable; delete it and run again"
    )
    (doc,) = read_refusals(refusals)
    assert doc["kind"] == "refused" and doc["message"] == "x.json: unreadable; delete it and run again"
    for body in ("print('done')", "end_job()"):  # the same job run again, ending well: its record goes
        assert _job(tmp_path, body, tmp_path, refusals).returncode == 0
        assert read_refusals(refusals) == [] and not list(refusals.iterdir())


def test_an_error_of_another_kind_keeps_its_traceback_and_is_recorded_as_failed(tmp_path):
    refusals = tmp_path / "refused"
    res = _job(tmp_path, "raise KeyError('label')", tmp_path, refusals)
    assert res.returncode == 1
    assert "Traceback" in (tmp_path / "logs" / "convert.log").read_text()
    (doc,) = read_refusals(refusals)
    assert doc["kind"] == "failed" and doc["message"] == "KeyError: 'label'"


def test_a_job_killed_before_it_said_why_leaves_a_record_naming_it(tmp_path):
    """Before: its slot stayed empty, and a job killed for memory on this machine was said only in
    Snakemake's own error (issue 53). Now the slot holds, from the start, the record of a killed job."""
    refusals = tmp_path / "refused"
    res = _job(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", tmp_path, refusals)
    assert res.returncode == -9
    (doc,) = read_refusals(refusals)
    assert doc["kind"] == "killed" and doc["rule"] == "convert_gguf" and doc["wildcards"] == {"model": "m"}
    assert doc["message"].startswith("killed before it could say why")
    assert _job(tmp_path, "print('done')", tmp_path, refusals).returncode == 0  # run again, ending well
    assert read_refusals(refusals) == [] and not list(refusals.iterdir())
