"""What the metrics beyond accuracy and a series checkpoint's verification cost.

* ``metrics_s``: ``oodcorr.jobs.metrics.compute`` (macro-F1, ECE, Wilson interval, per-label F1)
  on ``n`` random predictions, as every evaluation computes it once per checkpoint x testset;
  600 examples (the embedded default's testsets), 9,815 (MNLI matched) and 30,000 (HANS),
  with 2 labels and with a 3-way model on a 2-way set (predictions collapsed).
* ``series_manifest_s``, ``series_verify_s``: writing a local series checkpoint's manifest
  (hashes every file) and verifying it before an evaluation (sizes and stats only, when no
  file changed), on a fake checkpoint of ``--mib`` MiB of random bytes.

    .venv/bin/python benchmarks/metrics_cost.py --reps 5 --mib 1024 --out benchmarks/latest/metrics_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from oodcorr.jobs import metrics
from oodcorr.jobs.series_checkpoint import verify, write_manifest


def _time(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=1024, help="size of the fake series checkpoint's weight file")
    ap.add_argument("--out", help="write every repetition here as JSON")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in (600, 9815, 30000):
        for kind in ("2 labels", "3-way model, 2-way set"):
            if kind == "2 labels":
                label_names, names, coarse = ["entailment", "non-entailment"], ["entailment", "non-entailment"], {}
                gold = rng.integers(0, 2, n)
                pred = rng.integers(0, 2, n)
                correct = gold == pred
            else:
                label_names = ["entailment", "neutral", "contradiction"]
                names = label_names + ["non-entailment"]
                coarse = {"non-entailment": ["neutral", "contradiction"]}
                gold = np.where(rng.random(n) < 0.5, 0, 3)
                pred = rng.integers(0, 3, n)
                correct = (gold == pred) | ((gold == 3) & (pred > 0))
            logits = rng.normal(size=(n, len(label_names))).astype(np.float32)
            times = _time(partial(metrics.compute, gold, pred, correct, logits, names, label_names, coarse), args.reps)
            rows.append({"what": "metrics_s", "n": n, "kind": kind, "times": times, "median": statistics.median(times)})
            print(f"metrics.compute  n={n:>6}  {kind:<24} median {statistics.median(times) * 1e3:8.2f} ms")
    with tempfile.TemporaryDirectory(prefix="oodcorr-series-") as tmp:
        d = Path(tmp) / "checkpoint-1000"
        d.mkdir()
        (d / "config.json").write_text("{}")
        with open(d / "model.safetensors", "wb") as fh:
            for _ in range(args.mib):
                fh.write(os.urandom(1 << 20))
        man = Path(tmp) / "step1000.json"
        times = _time(
            lambda: write_manifest(man, model="m", x=1000, x_unit="step", checkpoint={"path": str(d)}, entry={}),
            args.reps,
        )
        rows.append({"what": "series_manifest_s", "mib": args.mib, "times": times, "median": statistics.median(times)})
        print(f"series manifest  {args.mib} MiB  median {statistics.median(times):.3f} s")
        doc = json.loads(man.read_text())
        times = _time(lambda: verify(doc), args.reps)
        rows.append({"what": "series_verify_s", "mib": args.mib, "times": times, "median": statistics.median(times)})
        print(f"series verify    {args.mib} MiB  median {statistics.median(times) * 1e3:.3f} ms (no file changed)")
    info = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg(), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
