"""Which process am I, under a distributed launcher (accelerate/torchrun)? Apart from
:mod:`oodcorr.jobs.multi_gpu` so that finetune can use it without importing its own launcher.
"""

from __future__ import annotations

import os
from datetime import timedelta

# a rank that waits for rank 0 to load a large model and write step 0 must not time out
BARRIER_TIMEOUT = timedelta(hours=3)


def launched() -> bool:
    return "LOCAL_RANK" in os.environ


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    from accelerate import PartialState  # heavy; only a launched process gets here

    PartialState(timeout=BARRIER_TIMEOUT).wait_for_everyone()


def main_first_begin() -> None:
    """Ranks other than 0 wait here until rank 0 reaches ``main_first_end`` (no-op unless launched)."""
    if launched() and not is_main_process():
        _barrier()


def main_first_end() -> None:
    if launched() and is_main_process():
        _barrier()


def wait_for_everyone() -> None:
    if launched():
        _barrier()
