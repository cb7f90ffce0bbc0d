"""How often the models agree more closely than their within variances allow: simulated studies against a real table.

agreement.csv scales a pair's within-model variances down further
(:func:`oodcorr.analysis.across.predictive.within_scale_batch`; its ``note`` says "agree more closely")
when the models' Cochran Q at no spread is below its 2.5 % quantile. With the variances right,
that happens in 2.5 % of studies whose models share one value. This script counts it, for the
prediction interval (the variances as the per-run procedure gives them), in simulated studies
whose models all have r -0.5 (1,000 studies each, the design command's two steps; the table is in
benchmarks/README.md#14-the-answer-across-models-every-rung-measured) and, with ``--agreement``,
in a real table's agreement.csv (e.g. the Pythia table's:
docs/reference.md#a-real-table-of-checkpoint-series-the-pythia-suite), with the smallest scale of each.

    .venv/bin/python benchmarks/within_scale.py [--agreement /tmp/pythia-analysis/agreement.csv]
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
import pandas as pd

from oodcorr.analysis.design.power import Assumptions, Grid, Settings, simulate_runs, studies_of

SHAPES = ((16, 1, 27, 0.8), (16, 1, 27, 0.5), (10, 1, 27, 0.8), (6, 3, 21, 0.5), (16, 3, 21, 0.8))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agreement", help="a real table's agreement.csv")
    ap.add_argument("--studies", type=int, default=1000)
    args = ap.parse_args(argv)
    print("| shape (models × runs × checkpoints, φ) | studies | scaled down | smallest scale |")
    print("| --- | ---: | ---: | ---: |")
    for M, K, N, phi in SHAPES:
        runs = simulate_runs(
            Grid(M, K, N), Assumptions(phi=phi), math.tanh(-0.55), args.studies, np.random.default_rng([9, M, K, N])
        )
        scale = studies_of(runs, Settings())["pi_scale"]
        print(f"| {M} × {K} × {N}, φ {phi:g} | {args.studies} | {np.mean(scale < 1):.3f} | {np.nanmin(scale):.3f} |")
    if args.agreement:
        a = pd.read_csv(args.agreement, keep_default_na=False, na_values=[""])
        three = a[a["n_models_consensus"] >= 3]
        scaled = three["note"].astype(str).str.contains("agree more closely")
        s = three["within_scale"].to_numpy(float)
        print(
            f"| {args.agreement} (real) | {len(three)} pairs | {scaled.mean():.3f} ({int(scaled.sum())}) | "
            f"{np.nanmin(s):.3f} (of the tolerance bounds' scale) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
