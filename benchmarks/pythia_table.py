"""A real per-checkpoint table nobody here made: the Pythia suite's zero-shot evaluations.

EleutherAI's ``pythia`` repository publishes lm-evaluation-harness results of 16 pretraining
runs (8 sizes, each on the Pile and on the deduplicated Pile) at 27 checkpoints each (steps 0,
1, 2, 4, ..., 512, 1000, 3000, 13000, ..., 143000), on 8 tasks, under
``evals/pythia-v1/<model>/zero-shot/<size>_step<k>.json``. This script reads them out of a
snapshot of that repository (a git directory; nothing is copied into this project) and writes
one long table in the layout ``oodcorr analyse --format long`` reads:

    model, step, testset, accuracy

    .venv/bin/python benchmarks/pythia_table.py /path/to/pythia/.git --out /tmp/pythia.csv
    .venv/bin/oodcorr analyse /tmp/pythia.csv --unit step --in-domain lambada_openai \\
        --out /tmp/pythia-analysis

Each model is one run (one pretraining seed), so the table is 16 models x 1 run x 27
checkpoints. The score is each task's ``acc``.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

TASKS = ("arc_challenge", "arc_easy", "piqa", "sciq", "winogrande", "logiqa", "wsc", "lambada_openai")
PATH = re.compile(r"^evals/pythia-v1/(pythia-[^/]+)/zero-shot/[^/]+_step(\d+)\.json$")


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=True).stdout


def rows(git_dir: Path, rev: str = "HEAD") -> list[dict]:
    """One row per model x step x task, from the zero-shot result files at ``rev``."""
    out = []
    for path in _git(git_dir, "ls-tree", "-r", "--name-only", rev, "evals/pythia-v1").split():
        m = PATH.match(path)
        if not m:
            continue
        model, step = m.group(1), int(m.group(2))
        results = json.loads(_git(git_dir, "show", f"{rev}:{path}"))["results"]
        for task in TASKS:
            if task in results and "acc" in results[task]:
                out.append({"model": model, "step": step, "testset": task, "accuracy": results[task]["acc"]})
    return sorted(out, key=lambda r: (r["model"], r["step"], r["testset"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("git_dir", type=Path, help="a snapshot of github.com/EleutherAI/pythia (its git directory)")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--out", type=Path, required=True, help="the long table to write (CSV)")
    args = ap.parse_args(argv)
    table = rows(args.git_dir, args.rev)
    if not table:
        sys.exit(f"{args.git_dir}: no evals/pythia-v1/*/zero-shot/*.json at {args.rev}")
    commit = _git(args.git_dir, "rev-parse", args.rev).strip()
    with open(args.out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["model", "step", "testset", "accuracy"])
        w.writeheader()
        w.writerows(table)
    models = sorted({r["model"] for r in table})
    steps = sorted({r["step"] for r in table})
    print(
        f"{args.out}: {len(table)} rows, {len(models)} models x {len(steps)} checkpoints x {len(TASKS)} tasks "
        f"(pythia commit {commit})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
