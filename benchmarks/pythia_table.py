"""A real per-checkpoint table nobody here made: the Pythia suite's zero-shot evaluations.

EleutherAI's ``pythia`` repository publishes lm-evaluation-harness results of 16 pretraining
runs (8 sizes, each on the Pile and on the deduplicated Pile) at 27 checkpoints each (steps 0,
1, 2, 4, ..., 512, 1000, 3000, 13000, ..., 143000), on 8 tasks, under
``evals/pythia-v1/<model>/zero-shot/<size>_step<k>.json``. This script takes ``evals/pythia-v1``
out of a snapshot of that repository (a git directory; into a temporary folder, nothing is copied
into this project), reads it with the reader ``oodcorr analyse --format lm-eval`` uses
(:func:`oodcorr.analysis.readers.lmeval.read_folder`, with the path pattern below naming each model by its
folder) and writes one long table in the layout ``oodcorr analyse --format long`` reads:

    model, step, testset, accuracy, n

``n`` is the number of items behind each score, read back from the harness's ``acc_stderr``
(:func:`oodcorr.analysis.readers.lmeval.items_behind`; the files give no sample counts; empty where the
score is 0 with a standard error of 0, which says no size): with ``--n-column n`` it bounds each
testset's item noise (docs/measurement.md#scores-as-measurements).

    .venv/bin/python benchmarks/pythia_table.py /path/to/pythia/.git --out /tmp/pythia.csv
    .venv/bin/oodcorr analyse /tmp/pythia.csv --unit step --in-domain lambada_openai --n-column n \\
        --out /tmp/pythia-analysis

The same folder, checked out, is read directly by ``oodcorr analyse evals/pythia-v1 --format
lm-eval --path-pattern '{model}/zero-shot/*_step{step}.json' --tasks ...``. Each model is one
run (one pretraining seed), so the table is 16 models x 1 run x 27 checkpoints. The score is
each task's ``acc``.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from oodcorr.analysis.readers.lmeval import items_behind, read_folder
from oodcorr.core.errors import DataError

TASKS = ("arc_challenge", "arc_easy", "piqa", "sciq", "winogrande", "logiqa", "wsc", "lambada_openai")
PATTERN = "{model}/zero-shot/*_step{step}.json"


def _git(git_dir: Path, *args: str, text: bool = True):
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=text, check=True).stdout


def rows(git_dir: Path, rev: str = "HEAD") -> list[dict]:
    """One row per model x step x task, from the zero-shot result files at ``rev``."""
    with tempfile.TemporaryDirectory(prefix="pythia-evals-") as tmp:
        archive = _git(git_dir, "archive", "--format=tar", rev, "evals/pythia-v1", text=False)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        scores = read_folder(Path(tmp) / "evals" / "pythia-v1", metric="acc", tasks=list(TASKS), path_pattern=PATTERN)
    s = scores.scores
    n = items_behind(s["n"], s["score"], s["stderr"])
    return [
        {"model": r.model, "step": int(r.step), "testset": r.testset, "accuracy": r.score, "n": int(k) if k > 0 else ""}
        for r, k in zip(s.itertuples(index=False), n)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("git_dir", type=Path, help="a snapshot of github.com/EleutherAI/pythia (its git directory)")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--out", type=Path, required=True, help="the long table to write (CSV)")
    args = ap.parse_args(argv)
    try:
        table = rows(args.git_dir, args.rev)
    except (DataError, subprocess.CalledProcessError) as e:
        sys.exit(f"{args.git_dir}: {getattr(e, 'stderr', None) or e}")
    commit = _git(args.git_dir, "rev-parse", args.rev).strip()
    with open(args.out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["model", "step", "testset", "accuracy", "n"])
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
