"""How fast lm-evaluation-harness ``--log_samples`` files are read into per-item correctness (issue 44):
megabytes and rows (documents) a second of :func:`oodcorr.analysis.readers.lmeval.read_samples`, one
file at a time, and of the whole reader (:func:`oodcorr.analysis.readers.lmeval.read_folder`) on a folder of
results with their samples files.

The files are written here in the shape the harness writes them (its ``evaluator.py`` and
``loggers/evaluation_tracker.py``: each line the document, its target, the request arguments per
answer choice, the responses and filtered responses, the filter, the metric names, three hashes and
each metric's value), for two kinds of task:

* ``multiple-choice``: an MMLU-like question of four choices, each choice one loglikelihood request
  whose context repeats the prompt (about 3.4 kB a line);
* ``short``: a PIQA-like task of two choices and a short prompt (about 1.3 kB a line).

    .venv/bin/python benchmarks/lmeval_samples_speed.py --out benchmarks/latest/lmeval_samples_speed.json

CPU time (``time.process_time``) is reported beside the wall time: on a shared machine it is the
steadier measure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from oodcorr.analysis.readers.lmeval import read_folder, read_samples

DATE = "2026-01-02T03-04-05.678901"
WORDS = "the of a to in is that for it as was with be by on not he this are or his from at which".split()


def _text(rng, words: int) -> str:
    return " ".join(rng.choice(WORDS, words))


def sample_line(rng, doc_id: int, kind: str, correct: int) -> str:
    """One line of a samples file as the harness writes it."""
    n_choices, q_words = (4, 60) if kind == "multiple-choice" else (2, 25)
    choices = [_text(rng, 8) for _ in range(n_choices)]
    question = _text(rng, q_words)
    prompt = question + "\n" + "\n".join(f"{'ABCD'[i]}. {c}" for i, c in enumerate(choices)) + "\nAnswer:"
    doc = {"question": question, "subject": "anatomy", "choices": choices, "answer": int(rng.integers(n_choices))}
    rec = {
        "doc_id": doc_id,
        "doc": doc,
        "target": str(doc["answer"]),
        "arguments": {f"gen_args_{i}": {"arg_0": prompt, "arg_1": f" {'ABCD'[i]}"} for i in range(n_choices)},
        "resps": [[[str(-rng.exponential(2)), "False"]] for _ in range(n_choices)],
        "filtered_resps": [[str(-rng.exponential(2)), "False"] for _ in range(n_choices)],
        "filter": "none",
        "metrics": ["acc", "acc_norm"],
        "doc_hash": hashlib.sha256(json.dumps(doc).encode()).hexdigest(),
        "prompt_hash": hashlib.sha256(prompt.encode()).hexdigest(),
        "target_hash": hashlib.sha256(str(doc["answer"]).encode()).hexdigest(),
        "acc": float(correct),
        "acc_norm": float(correct),
    }
    return json.dumps(rec, ensure_ascii=False) + "\n"


def write_file(path: Path, rows: int, kind: str, seed: int = 0) -> float:
    """A samples file of ``rows`` documents; returns their mean ``acc``."""
    rng = np.random.default_rng(seed)
    correct = rng.integers(0, 2, rows)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(sample_line(rng, i, kind, int(correct[i])))
    return float(correct.mean())


def timed(fn, reps: int):
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_wall, best_cpu = min(best_wall, time.perf_counter() - w), min(best_cpu, time.process_time() - c)
    return out, best_wall, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="documents per samples file")
    ap.add_argument("--steps", type=int, default=8, help="checkpoints in the folder read whole")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(), "cores": os.cpu_count()}
    res["load"] = [round(os.getloadavg()[0], 2)]
    res["files"], res["folder"] = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("multiple-choice", "short"):
            path = Path(tmp) / f"samples_{kind}_{DATE}.jsonl"
            mean = write_file(path, args.rows, kind)
            size = path.stat().st_size
            got, wall, cpu = timed(lambda p=path, m=mean: read_samples(p, "acc,none", m), args.reps)
            assert len(got) == args.rows
            row = {
                "kind": kind,
                "rows": args.rows,
                "bytes": size,
                "bytes_per_row": round(size / args.rows),
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "mb_per_s_cpu": round(size / 1e6 / cpu, 1),
                "rows_per_s_cpu": round(args.rows / cpu),
                "mb_per_s_wall": round(size / 1e6 / wall, 1),
                "rows_per_s_wall": round(args.rows / wall),
            }
            res["files"].append(row)
            print(
                f"read_samples, {kind}: {args.rows:,} rows, {size / 1e6:.1f} MB ({row['bytes_per_row']:,} B a row): "
                f"{cpu:.2f} CPU-s ({row['mb_per_s_cpu']} MB/s, {row['rows_per_s_cpu']:,} rows/s), {wall:.2f} s wall",
                flush=True,
            )
        # a folder: one model, args.steps checkpoints, an in-domain task and two OOD tasks with samples
        root = Path(tmp) / "folder" / "org__m"
        total = 0
        for step in range(args.steps):
            d = root / f"step{step}"
            d.mkdir(parents=True)
            results, n = {}, {}
            for j, task in enumerate(("ind", "x", "y")):
                p = d / f"samples_{task}_{DATE}.jsonl"
                results[task] = {
                    "alias": task,
                    "acc,none": write_file(p, args.rows // 4, "multiple-choice", 10 * step + j),
                }
                n[task] = {"original": args.rows // 4, "effective": args.rows // 4}
                total += p.stat().st_size
            doc = {
                "results": results,
                "n-samples": n,
                "config": {"model_args": f"pretrained=org/m,revision=step{step}"},
            }
            (d / f"results_{DATE}.json").write_text(json.dumps(doc))
        got, wall, cpu = timed(lambda: read_folder(Path(tmp) / "folder"), args.reps)
        rows = len(got.examples)
        res["folder"] = {
            "samples_files": len(got.samples_files),
            "rows": rows,
            "bytes": total,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "mb_per_s_cpu": round(total / 1e6 / cpu, 1),
            "rows_per_s_cpu": round(rows / cpu),
        }
        print(
            f"read_folder: {len(got.samples_files)} samples files, {rows:,} rows, {total / 1e6:.1f} MB: "
            f"{cpu:.2f} CPU-s "
            f"({res['folder']['mb_per_s_cpu']} MB/s, {res['folder']['rows_per_s_cpu']:,} rows/s), {wall:.2f} s wall",
            flush=True,
        )
    res["load"].append(round(os.getloadavg()[0], 2))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
