"""What the curve costs: the analysis of a pretraining ladder's shape under the default residualiser
(``spline``) against the line alone (issue 52: at most 60 s for 30 runs x 21 testsets x up to 200
checkpoints, without figures).

The table is simulated in the ladder's shape (benchmarks/curve_calibration.md has the real one's
description): 30 models of one run each, 37 to 202 checkpoints, the in-domain column a validation
loss falling along a power law, 20 task accuracies that follow the model's ability along logistic
curves of their own (late emergence, early plateau) plus AR(1) noise. Each residualiser's
``oodcorr.analysis.analyse`` and ``agreement`` are timed in this process (wall and CPU), with the
fp32 GEMM of benchmarks/suite_scale.py before and after for the normalised wall
(``wall x GEMM / 188 GFLOP/s``, as there). The tasks do not correlate beyond the ability, so every
verdict but ``agree near zero`` and ``unresolved`` is false; with ``--loss-noise 0`` the in-domain
column is exact, with the default 0.005 it is noisy, and nothing here knows its noise (a loss has no
items), which fakes positive correlations through every residual (errors in variables).

    .venv/bin/python benchmarks/curve_cost.py --out benchmarks/latest/curve_cost.json
    .venv/bin/python benchmarks/curve_cost.py --loss-noise 0 --out benchmarks/latest/curve_cost_exact.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_scale import REFERENCE_GFLOPS, gemm  # noqa: E402

from oodcorr.analysis import Options, agreement, analyse  # noqa: E402
from oodcorr.core.answer import states_a_sign  # noqa: E402


def ladder(seed: int = 0, models: int = 30, tasks: int = 20, loss_noise: float = 0.005) -> pd.DataFrame:
    """A long table in the ladder's shape (the module doc)."""
    rng = np.random.default_rng(seed)
    rows = []
    for m in range(models):
        steps = int(rng.integers(37, 203))
        t = np.arange(1, steps + 1)
        ability = 1 - t ** -rng.uniform(0.3, 0.7)  # rises fast, then slowly
        loss = 2.2 + 1.5 * (1 - ability) + loss_noise * rng.normal(size=steps)
        rows += [(f"m{m:02d}", "val_loss", "r0", int(s), "val_loss", float(v)) for s, v in zip(t, loss)]
        e = np.zeros(tasks)
        noise = np.empty((steps, tasks))
        for i in range(steps):
            e = 0.6 * e + 0.8 * rng.normal(size=tasks)
            noise[i] = e
        for k in range(tasks):
            mid, slope = rng.uniform(0.3, 0.9), rng.uniform(4, 20)
            acc = 0.25 + 0.5 / (1 + np.exp(-(ability - mid) * slope)) + 0.01 * noise[:, k]
            rows += [(f"m{m:02d}", "val_loss", "r0", int(s), f"task{k:02d}", float(v)) for s, v in zip(t, acc)]
    return pd.DataFrame(rows, columns=["model", "in_domain", "run", "unit", "testset", "score"])


def _time(long: pd.DataFrame, residualiser: str) -> dict:
    before = gemm()
    w, c = time.perf_counter(), time.process_time()
    table = analyse(long, Options(residualisers=(residualiser,), pool_by=(), example_boot=0))
    answer = agreement(table)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    after = gemm()
    mine = answer[answer["residualiser"] == residualiser]
    signed = mine[mine["verdict"].map(states_a_sign)]["r_consensus"].abs()
    return {
        "residualiser": residualiser,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "gemm_gflops": [round(before, 1), round(after, 1)],
        "normalised_wall_s": round(wall * min(before, after) / REFERENCE_GFLOPS, 1),
        "cells": int(len(table)),
        "verdicts": mine["verdict"].value_counts().to_dict(),
        "depend_on_form": int((answer["form"] != "").sum()),
        # every verdict here is false but `agree near zero` / `unresolved`: how strong the signs stated are
        "largest_signed_r": round(float(signed.max()), 3) if len(signed) else None,
        "strong_signs": int((signed >= 0.3).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss-noise", type=float, default=0.005, help="sd of the in-domain loss' noise")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    long = ladder(loss_noise=args.loss_noise)
    out = {
        "command": " ".join(sys.argv),
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "shape": {
            "models": int(long["model"].nunique()),
            "testsets": int(long["testset"].nunique()),
            "checkpoints": [int(long.groupby("model")["unit"].nunique().min()), int(long["unit"].max())],
        },
        "runs": [_time(long, res) for res in ("linear", "spline")],
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
