"""The answer line's clause for one or two models: how often it names a pair falsely, and how often truly.

With one or two models the ladder states nothing about a further model, and the answer's line names
instead the pairs that every model's run finds significant with one sign, where the pair is not
``noise-limited`` (oodcorr.core.answer.every_run_clause). This measures that clause on studies simulated
item by item as the embedded default is shaped (oodcorr.analysis.simulate.items.item_runs: 2 models x
1 run, 9 checkpoints, an in-domain test set of 1,200 items and OOD sets of 600; items with
difficulties, their deviations white or persistent across checkpoints), through the analysis' own
per-run rows and pooling (simulate_items.fast_run_rows, pipeline.pool; a model's significance its
pooled p below 0.05 with the one pair as its family, as lenient as the workflow's Holm correction
over its pairs can be) and the ladder (agreement_table.agreement). Per regime: the share of studies
whose clause names the pair, with its sign, at truths 0 (any naming is false), -0.5, -0.95 and
-0.99 (any positive naming is false).
``s`` is the residual sd of an OOD series beyond in-domain: 0.02 as the default's shifts (0.05 between), 0.25 as its
planted halves (benchmarks/README.md#9-the-embedded-default-end-to-end).

    .venv/bin/python benchmarks/every_run_clause.py --out benchmarks/latest/every_run_clause.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement
from oodcorr.analysis.pipeline import pool
from oodcorr.analysis.simulate.items import fast_run_rows, item_runs
from oodcorr.core.answer import every_run_clause

OPTS = Options(pool_by=(), example_boot=0)
T = 9
SIZES = (1200, 600, 600)
PERSISTENCE = {"white": (0.2, 0.0), "12%": (0.5, 0.8)}  # as benchmarks/item_noise_calibration.py


def named(studies: int, truth: float, s: float, persistence: str, seed: int) -> np.ndarray:
    """Per study: +1 or -1 where the clause names the pair with that sign, 0 where it does not."""
    difficulty, persist = PERSISTENCE[persistence]
    rng = np.random.default_rng([seed, round(1000 * truth) + 1000, round(1000 * s), round(100 * difficulty)])
    d = item_runs(rng, [truth] * (studies * 2), T, SIZES, difficulty=difficulty, persistence=persist, s=s)
    runs = fast_run_rows(d, 2, 1)
    pooled = pool(runs, OPTS)
    pooled["significant"] = pooled["p"].astype(float) < OPTS.alpha
    ag = agreement(
        pd.concat([runs, pooled], ignore_index=True), OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero
    )
    out = np.zeros(len(ag), int)
    for i, row in enumerate(ag.to_dict("records")):
        text = every_run_clause(
            [{k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in row.items()}]
        )
        out[i] = 0 if not text else (1 if text.endswith("positive") else -1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--studies", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=46)
    args = ap.parse_args()
    rows = []
    for s, pers, truth in product((0.02, 0.05, 0.25), ("white", "12%"), (0.0, -0.5, -0.95, -0.99)):
        t = time.time()
        sign = named(args.studies, truth, s, pers, args.seed)
        n = len(sign)
        false = (sign != 0) if truth == 0 else (sign == 1)
        true = np.zeros(n, bool) if truth == 0 else (sign == -1)
        row = {
            "s": s,
            "persistence": pers,
            "truth": truth,
            "studies": n,
            "named_falsely": float(false.mean()),
            "se_false": math.sqrt(false.mean() * (1 - false.mean()) / n),
            "named_truly": float(true.mean()),
            "seconds": round(time.time() - t, 1),
        }
        rows.append(row)
        print(
            f"s {s:.2f} {pers:5s} truth {truth:+.2f}: named falsely {row['named_falsely']:.4f} "
            f"± {row['se_false']:.4f}, truly {row['named_truly']:.3f} ({row['seconds']} s)",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps({"checkpoints": T, "sizes": SIZES, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
