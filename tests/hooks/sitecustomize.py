"""Test hook: simulated out-of-memory failures in evaluation jobs, on a CPU.

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has
one; a test puts this folder on ``PYTHONPATH`` (see :data:`PYTHONPATH_ENTRY`) and sets
``OODCORR_TEST_SIMULATE_OOM_ABOVE`` for the Snakemake run it starts, and every evaluation job
of that run installs the hook below. Production code knows nothing of it.

``N``: any forward pass over a batch of more than N rows raises torch.OutOfMemoryError, as an
oversized batch does on a GPU (the evaluator then halves its batch within the job).
``kill:N``: such a forward pass SIGKILLs the process instead, as the operating system's
out-of-memory killer does; nothing in the job can catch that, so only Snakemake's retry (which
halves the batch per attempt) recovers.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

SIMULATE_OOM_ENV = "OODCORR_TEST_SIMULATE_OOM_ABOVE"
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
