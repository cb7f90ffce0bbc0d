"""What the analysis' root finding costs: the between-estimate variance and the mixtures' quantiles.

Every between-run and between-model variance (Paule-Mandel) and its upper confidence bound is a
root of the generalised Q (:func:`oodcorr.analysis.across.pooling.solve_tau2`); the prediction interval,
the tolerance bounds and the share of models that share a sign are roots of a mixture of normals'
distribution function (:func:`oodcorr.analysis.across.predictive._mixture_quantile`, ``_largest_share``).
Both are scipy's vectorised bracketing root finder (``scipy.optimize.elementwise.find_root``) since
issue 45; before, two hand-written safeguarded Newton iterations. This script times them on fixed
workloads, each the smallest CPU time (``time.process_time``) of ``--repeats`` runs in one process,
one BLAS thread:

* ``solve_tau2`` on 20,000 studies of 6 estimates (one group), 5,000 of 6 groups of 3 (runs
  around their models' means) and 2,000 of 16; and one study of 5 estimates, 200 calls one at a
  time (what pooling the runs of one model does, a group at a time);
* ``predictive_batch`` (the prediction interval) and ``tolerance_batch`` (the tolerance bounds and
  the shared sign's share) on 1,000 studies of 6 and of 16 models.

Run it against another checkout by putting its ``src`` first:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/root_finding.py
    OMP_NUM_THREADS=1 PYTHONPATH=/path/to/other/checkout/src .venv/bin/python benchmarks/root_finding.py

Numbers: benchmarks/README.md#17-the-analysis-root-finding-scipy-against-the-hand-written-newton.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from oodcorr.analysis.across.pooling import solve_tau2
from oodcorr.analysis.across.predictive import predictive_batch, tolerance_batch, within_scale_draws


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def workloads() -> list[tuple[str, object]]:
    rng = np.random.default_rng(1)
    out = []
    for S, G, K in ((20000, 1, 6), (5000, 6, 3), (2000, 1, 16)):
        z = rng.normal(0, 0.3, (S, G, K))
        v = rng.uniform(0.01, 0.2, (S, G, K))
        mask = rng.random((S, G, K)) < 0.9
        target = np.maximum(mask.sum((-2, -1)) - G, 0)
        out.append(
            (f"solve_tau2, {S:,} studies of {G} x {K}", lambda z=z, v=v, m=mask, t=target: solve_tau2(z, v, m, t))
        )
    z1, v1, m1 = rng.normal(0, 0.3, (1, 1, 5)), rng.uniform(0.01, 0.05, (1, 1, 5)), np.ones((1, 1, 5), bool)
    out.append(("solve_tau2, 1 study of 5, 200 calls", lambda: [solve_tau2(z1, v1, m1, 4) for _ in range(200)]))
    rng = np.random.default_rng(4)
    for M in (6, 16):
        S = 1000
        zm, Vm = rng.normal(-0.4, 0.2, (S, M)), rng.uniform(0.01, 0.06, (S, M))
        present = np.ones((S, M), bool)
        scales = within_scale_draws(rng.uniform(0.5, 3, S), np.full(S, 2))
        out.append(
            (f"predictive_batch, {S:,} studies of {M} models", lambda a=zm, b=Vm, c=present: predictive_batch(a, b, c))
        )
        out.append(
            (
                f"tolerance_batch, {S:,} studies of {M} models",
                lambda a=zm, b=Vm, c=present, s=scales: tolerance_batch(a, b, c, scales=s),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for name, fn in workloads():
        print(f"{name}: {_best(fn, args.repeats) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
