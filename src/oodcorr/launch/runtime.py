"""Glue shared by the workflow scripts: logging to the rule's log file, device choice."""

from __future__ import annotations

import logging
import os
import sys

from ..core.gpus import claim_for_job


def setup_logging(log_path: str | None) -> None:
    """Send this job's stdout, stderr and logging records to its Snakemake log file."""
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        fh = open(log_path, "w", buffering=1, encoding="utf-8")
        sys.stdout = sys.stderr = fh
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, force=True, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def end_job() -> None:
    """End a job's process now that its outputs are written: flush the log, skip teardown.

    A process that imported torch and transformers spends time at exit tearing its
    modules down (not yet measured in `benchmarks/README.md`), for nothing: every output is
    already written atomically and closed. Called as the last line of the scripts of
    the rules with many jobs (tokenisation, evaluation); a job that fails raises before.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


def pick_device(gpus: int) -> str:
    """``cuda`` when the job asked for a GPU and one is visible, else ``cpu``.

    A GPU job first claims its own device(s) from the machine's pool (see
    oodcorr.core.gpus), so jobs running side by side never share a GPU.
    """
    if gpus and gpus > 0:
        claim_for_job(int(gpus))
        import torch  # torch stack: planning and the CLI never import it

        if torch.cuda.is_available():
            return "cuda"
        logging.getLogger(__name__).warning("job asked for %s GPU(s) but none is visible; running on CPU", gpus)
    return "cpu"


def retry_sizes(batch_size: int, max_tokens: int, attempt: int) -> tuple[int, int]:
    """Evaluation batch bounds for Snakemake's ``attempt``: halved on every retry, never below 1.

    A retry after an out-of-memory failure thus runs smaller batches. Batching never
    changes an example's score (each row is read at its own last real token), so the
    result is the same.
    """
    shrink = 2 ** (max(1, int(attempt)) - 1)
    return max(1, int(batch_size) // shrink), max(1, int(max_tokens) // shrink)
