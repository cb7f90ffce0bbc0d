"""Glue shared by the workflow scripts: logging to the rule's log file, a job's refusal (and an exception no
script catches: both recorded for the end-of-run report), device choice."""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import socket
import sys
import time
from pathlib import Path

from ..core.errors import ConfigError, DataError, DiskFull, ResultError, StaleResult, WriteFailed
from ..core.filesystems import DISK_FULL_ERRNOS, write_errno, write_failed
from ..core.gpus import claim_for_job
from ..core.refusals import REFUSALS_ENV, RefusalSlot

# errors whose message is the whole story (each names the file or key and what to do): said, not traced back
SENTENCE_ERRORS = (ConfigError, DataError, ResultError, StaleResult, WriteFailed)
_JOB: dict = {}  # this process's job: its rule, wildcards, log, first output and refusal slot


def start_job(sm) -> None:
    """Start a rule's script (``sm``: its ``snakemake`` object): its log, the room for its refusal, and the
    hook that records an exception no script catches."""
    log = sm.log[0] if len(sm.log) else None
    if log:  # stdout, stderr and logging records go to the rule's log file
        os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
        sys.stdout = sys.stderr = open(log, "w", buffering=1, encoding="utf-8")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, force=True, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    wildcards = getattr(sm, "wildcards", None)
    items = wildcards.items() if hasattr(wildcards, "items") else vars(wildcards or object()).items()
    outputs = getattr(sm, "output", None) or []
    outputs = list(outputs) if hasattr(outputs, "__iter__") else list(vars(outputs).values())
    folder = os.environ.get(REFUSALS_ENV)
    _JOB.update(
        rule=getattr(sm, "rule", None) or "?",
        wildcards={str(k): str(v) for k, v in items},
        log=log,
        output=str(outputs[0]) if outputs else None,
    )
    # what stays recorded if the job is killed before it can say why (oodcorr.launch.disk_checks.refusal_lines)
    killed = _doc("killed before it could say why (a signal: no Python error, no sentence of its own)", "killed")
    _JOB["slot"] = RefusalSlot(folder, str(Path(log or "job").resolve()), killed) if folder else None
    sys.excepthook = _uncaught
    atexit.register(_ended)


def refuse(e: BaseException | str) -> None:
    """Stop the job with ``e``'s sentence: the log's last line, recorded for the end-of-run report."""
    message = str(e)
    _record(message, _kind(e))
    sys.exit(f"oodcorr: {message}")


def _kind(e: BaseException | str) -> str:
    return "disk full" if isinstance(e, DiskFull) else "write failed" if isinstance(e, WriteFailed) else "refused"


def _record(message: str, kind: str) -> None:
    """Fill this job's refusal slot (``kind`` ``failed``: an exception no script caught)."""
    slot = _JOB.get("slot")
    if slot is None or not slot.fill(_doc(message, kind)):
        # no record (no room even for that): the console of a local run still gets the sentence
        print(f"oodcorr: job {_JOB.get('rule')} stopped: {message}", file=sys.__stderr__)


def _doc(message: str, kind: str) -> dict:
    return {
        "rule": _JOB.get("rule"),
        "wildcards": _JOB.get("wildcards") or {},
        "log": _JOB.get("log"),
        "message": message,
        "kind": kind,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
    }


def _uncaught(kind, e, tb) -> None:
    """sys.excepthook of a job: a write the file system stopped, or an error whose message is a sentence,
    is said as a sentence, anything else keeps its traceback; all are recorded."""
    if not isinstance(e, SENTENCE_ERRORS) and isinstance(e, Exception):
        e = _write_stopped(e) or e
    if isinstance(e, SENTENCE_ERRORS):
        _record(str(e), _kind(e))
        print(f"oodcorr: {e}", file=sys.stderr)
        return
    _record(f"{kind.__name__}: {e}", "failed")
    sys.__excepthook__(kind, e, tb)


def _write_stopped(e: Exception) -> WriteFailed | None:
    """The sentence of a raw error that is the file system stopping a write of this job: want of room or a
    read-only file system anywhere, an I/O or permission error only in the job's output folder."""
    code = write_errno(e)
    if code is None:
        return None
    where = getattr(e, "filename", None) or _JOB.get("output") or "."
    output = _JOB.get("output")
    if code not in DISK_FULL_ERRNOS and code != errno.EROFS:
        if not (output and getattr(e, "filename", None) and Path(str(where)).parent == Path(output).parent):
            return None
    return write_failed(Path(str(where)).parent, f"rule {_JOB.get('rule')}'s output {where}", cause=e)


def _ended() -> None:
    """At the exit of a job that refused nothing: no refusal record."""
    slot = _JOB.get("slot")
    if slot is not None and slot.fd is not None:
        slot.drop()


def end_job() -> None:
    """End a job's process now that its outputs are written, skipping the teardown of torch's modules."""
    _ended()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    os._exit(0)


def pick_device(gpus: int) -> str:
    """``cuda`` when the job asked for a GPU and one is visible (claimed: :mod:`oodcorr.core.gpus`), else ``cpu``."""
    if gpus and gpus > 0:
        claim_for_job(int(gpus))
        import torch  # torch stack: planning and the CLI never import it

        if torch.cuda.is_available():
            return "cuda"
        logging.getLogger(__name__).warning("job asked for %s GPU(s) but none is visible; running on CPU", gpus)
    return "cpu"


def retry_sizes(batch_size: int, max_tokens: int, attempt: int) -> tuple[int, int]:
    """Evaluation batch bounds for Snakemake's ``attempt``: halved on every retry (after running out of
    memory; batching never changes a score), never below 1."""
    shrink = 2 ** (max(1, int(attempt)) - 1)
    return max(1, int(batch_size) // shrink), max(1, int(max_tokens) // shrink)
