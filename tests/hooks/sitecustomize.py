"""Test hooks: simulated out-of-memory failures in evaluation jobs, on a CPU; a publish killed or
held half-way.

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has
one; a test puts this folder on ``PYTHONPATH`` (see :data:`PYTHONPATH_ENTRY`) and sets
``OODCORR_TEST_SIMULATE_OOM_ABOVE`` for the Snakemake run it starts, and every evaluation job
of that run installs the hook below. Production code knows nothing of it.

``N``: any forward pass over a batch of more than N rows raises torch.OutOfMemoryError, as an
oversized batch does on a GPU (the evaluator then halves its batch within the job).
``kill:N``: such a forward pass SIGKILLs the process instead, as the operating system's
out-of-memory killer does; nothing in the job can catch that, so only Snakemake's retry (which
halves the batch per attempt) recovers.

In a publish_results job (workflow/scripts/publish_results.py): ``OODCORR_TEST_KILL_PUBLISH_AFTER=N``
SIGKILLs the process right after its N-th rename (``os.replace`` or ``os.rename``), as a kill -9
half-way through publishing does; ``OODCORR_TEST_HOLD_PUBLISH=<file>`` makes the job write
``<file>.waiting`` and wait until ``<file>`` exists before it publishes (a run caught publishing,
for a second writer to meet).

In any job: ``OODCORR_TEST_FILL_AT=<prefix>`` fills the file system of the folder a temporary file
or folder whose name starts with ``<prefix>`` is made in, just before it is made (the atomic writes
make ``.<name>.*.tmp`` beside their file, a publish ``.new-*``): the write that follows meets a real
full disk (ENOSPC), at the moment the test chose. The filler is ``.test-filler`` in that folder.

In a rank other than 0 of a launched finetune: ``OODCORR_TEST_LATE_RNG_STATE=<seconds>`` makes its
RNG state file exist empty for that long before the Trainer writes it, as a slow rank does.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

SIMULATE_OOM_ENV = "OODCORR_TEST_SIMULATE_OOM_ABOVE"
KILL_PUBLISH_ENV = "OODCORR_TEST_KILL_PUBLISH_AFTER"
HOLD_PUBLISH_ENV = "OODCORR_TEST_HOLD_PUBLISH"
FILL_AT_ENV = "OODCORR_TEST_FILL_AT"
LATE_RNG_ENV = "OODCORR_TEST_LATE_RNG_STATE"
PYTHONPATH_ENTRY = str(Path(__file__).resolve().parent)


def install() -> None:
    spec = os.environ[SIMULATE_OOM_ENV]
    import signal

    import torch  # only the evaluation job this runs in, which loads torch anyway

    kill = spec.startswith("kill:")
    limit = int(spec.removeprefix("kill:"))
    log = logging.getLogger("oodcorr.test_hook")

    def hook(module, args):
        # every model embeds its (batch, length) token ids first: one check per forward pass
        if (
            isinstance(module, torch.nn.Embedding)
            and args
            and getattr(args[0], "dim", lambda: 0)() == 2
            and args[0].shape[0] > limit
        ):
            what = f"simulated by {SIMULATE_OOM_ENV}={spec}: a batch of {args[0].shape[0]} rows"
            if kill:
                log.warning("%s; the process is killed now", what)
                os.kill(os.getpid(), signal.SIGKILL)
            raise torch.OutOfMemoryError(what)

    torch.nn.modules.module.register_module_forward_pre_hook(hook)
    log.warning("%s=%s: simulating out-of-memory failures (test hook)", SIMULATE_OOM_ENV, spec)


# only in an evaluation job (Snakemake runs a copy of workflow/scripts/evaluate.py), only when asked
if os.environ.get(SIMULATE_OOM_ENV) and sys.argv and sys.argv[0].endswith("evaluate.py"):
    install()


def install_publish_hooks() -> None:
    import signal
    import time

    go = os.environ.get(HOLD_PUBLISH_ENV)
    if go:
        Path(go + ".waiting").write_text(str(os.getpid()))
        deadline = time.time() + 600
        while not os.path.exists(go) and time.time() < deadline:
            time.sleep(0.1)
    after = int(os.environ.get(KILL_PUBLISH_ENV) or 0)
    if after:
        calls = [0]

        def counted(real):
            def renamed(*args, **kwargs):
                out = real(*args, **kwargs)
                calls[0] += 1
                if calls[0] == after:
                    os.kill(os.getpid(), signal.SIGKILL)
                return out

            return renamed

        os.replace, os.rename = counted(os.replace), counted(os.rename)


if (
    sys.argv
    and sys.argv[0].endswith("publish_results.py")
    and (os.environ.get(KILL_PUBLISH_ENV) or os.environ.get(HOLD_PUBLISH_ENV))
):
    install_publish_hooks()


def install_fill_hook(prefix: str) -> None:
    import contextlib
    import tempfile

    def fill(folder) -> None:
        with open(os.path.join(folder or tempfile.gettempdir(), ".test-filler"), "ab") as fh:
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * (1 << 16))
                    fh.flush()

    def filling(real):
        def made(*args, **kwargs):
            if str(kwargs.get("prefix", "")).startswith(prefix):
                fill(kwargs.get("dir"))
            return real(*args, **kwargs)

        return made

    tempfile.mkstemp, tempfile.mkdtemp = filling(tempfile.mkstemp), filling(tempfile.mkdtemp)


if os.environ.get(FILL_AT_ENV):
    install_fill_hook(os.environ[FILL_AT_ENV])


def install_late_rng_hook(seconds: float) -> None:
    import time

    from transformers import trainer

    real = trainer.Trainer._save_rng_state

    def late(self, output_dir):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        Path(output_dir, f"rng_state_{self.args.process_index}.pth").touch()
        time.sleep(seconds)
        return real(self, output_dir)

    trainer.Trainer._save_rng_state = late


if os.environ.get(LATE_RNG_ENV) and os.environ.get("RANK", "0") != "0":
    install_late_rng_hook(float(os.environ[LATE_RNG_ENV]))
