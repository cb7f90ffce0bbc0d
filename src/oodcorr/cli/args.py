"""Parser pieces more than one verb uses: argument types, an option whose help shows its default, and the
flags of the GPU-hours from the work (``budget`` and ``design``)."""

from __future__ import annotations

import argparse


def positive_int(flag: str, also: str = ""):
    """An argument type: an integer of at least 1, else an error naming ``flag``."""

    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be {also}a positive integer, got {v!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {n}")
        return n

    return parse


def add_showing_default(group, flag: str, default, text: str, spec: str = "", **kwargs) -> None:
    """An option whose help ends "(default: D)", D written from ``default`` itself."""
    shown = " ".join(default) if isinstance(default, list) else format(default, spec)
    group.add_argument(flag, default=default, help=f"{text} (default: {shown})", **kwargs)


def add_work_flags(p) -> None:
    w = p.add_argument_group("GPU-hours from the work (beside the time limits)")
    w.add_argument(
        "--throughput",
        nargs="+",
        metavar="[KEY=]TFLOPS",
        help="TFLOP/s one GPU reaches (bf16, achieved, not peak), for every job or KEY=... for a model name or "
        "size class: adds GPU-hours from the work (parameters x tokens); finished jobs' measured throughput "
        "replaces it for their model",
    )
    w.add_argument(
        "--tokens-per-example",
        type=float,
        metavar="N",
        help="tokens of a scored example (default: evaluation.max_length, an upper bound)",
    )
    w.add_argument(
        "--examples",
        type=int,
        metavar="N",
        help="examples per testset where the config does not say (max_examples) and the data is not prepared",
    )
