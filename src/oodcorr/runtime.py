"""Glue shared by the workflow scripts: logging to the rule's log file, device choice."""
from __future__ import annotations

import logging
import os
import sys


def setup_logging(log_path: str | None) -> None:
    """Send this job's stdout, stderr and logging records to its Snakemake log file."""
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        fh = open(log_path, "w", buffering=1, encoding="utf-8")
        sys.stdout = sys.stderr = fh
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def pick_device(gpus: int) -> str:
    """``cuda`` when the job asked for a GPU and one is visible, else ``cpu``.

    A GPU job first claims its own device(s) from the machine's pool (see
    oodcorr.gpus), so jobs running side by side never share a GPU.
    """
    if gpus and gpus > 0:
        from .gpus import claim_for_job

        claim_for_job(int(gpus))
        import torch

        if torch.cuda.is_available():
            return "cuda"
        logging.getLogger(__name__).warning("job asked for %s GPU(s) but none is visible; running on CPU", gpus)
    return "cpu"
