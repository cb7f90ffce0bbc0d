"""``oodcorr budget --configfile X``: jobs, GPU-hours, checkpoint disk, download size and longest path."""

from __future__ import annotations

import logging

from ..launch import budget
from ..launch import grid as grids
from ..modeling import hub
from .config import read_lock, read_plan

log = logging.getLogger("oodcorr")


def add_parser(sub, help: str) -> None:
    b = sub.add_parser(
        "budget",
        help=help,
        description="What a config will cost before it is submitted, for a compute-time request. GPU-hours are "
        "GPUs x time limits (the config's runtime), and expected where finished jobs of this "
        "experiment measured their cost on a GPU.",
    )
    b.add_argument("--configfile", required=True, metavar="FILE", help="the workflow config")
    b.add_argument("--profile", metavar="DIR", help="the Snakemake profile to submit with (e.g. profiles/slurm)")
    b.add_argument("--gpus", type=int, metavar="N", help="GPUs available at once: also print the wall time on them")
    b.add_argument(
        "--out", metavar="PREFIX", help="write PREFIX.md and PREFIX.json (default: results/<experiment>/budget)"
    )
    b.add_argument("--workflow", metavar="DIR", help="the workflow folder (default: this checkout)")
    add_work_flags(b)


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


def run(args) -> int:
    config, plan = read_plan(args.configfile, args.workflow)
    lock = read_lock(args.configfile, config)
    if lock is not None:
        try:
            hub.check_lock(plan, lock)
        except ValueError as e:
            log.warning("%s (sizes from it may be out of date)", e)
    b = compute_budget(plan, config, args, lock)
    print(budget.markdown(b), end="")
    md, js = budget.write(b, args.out or f"{plan.paths.root}/budget")
    log.info("wrote %s and %s", md, js)
    return 0


def compute_budget(plan, config, args, lock):
    """The budget of ``plan`` with ``args``' profile, GPUs and work flags (also ``oodcorr design``'s)."""
    measured = budget.measured_costs(plan)
    b = budget.compute(
        plan,
        configfile=args.configfile,
        lock=lock,
        profile=budget.read_profile(args.profile),
        gpus=args.gpus,
        measured=measured,
    )
    if args.throughput:
        sizes = grids.testset_sizes(plan, sorted({t for d in plan.testsets for t, _ in plan.testsets[d]}))
        sizes = {t: (n if n is not None else args.examples) for t, n in sizes.items()}
        b.work = budget.work(
            plan,
            budget.parse_throughput(args.throughput),
            lock=lock,
            examples=sizes,
            tokens_per_example=args.tokens_per_example,
            measured=measured,
        )
    return b
