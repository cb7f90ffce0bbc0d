"""What ``oodcorr design`` predicts on curved series under the spline and under the line (issue 52):
for a grid (default 12 models x 1 run x 60 checkpoints, one pair), each OOD score a logistic curve of
the in-domain score of its own per run (``Assumptions.shape`` ``curve``), the share of simulated
studies that state the effect's sign (on average; in nearly every model) at +effect, and at 0 the
share that state a sign and the share that say ``models differ`` or ``sign reversal`` (false), each
with its Monte Carlo standard error:

    .venv/bin/python benchmarks/design_curved_power.py --studies 400 --phi 0.5 0.8
"""

from __future__ import annotations

import argparse
import json
import sys

from oodcorr.analysis.design import power as dz


def _spread(shares: dict) -> float:
    return sum(v for k, v in shares.items() if "differ" in k or "reversal" in k)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--checkpoints", type=int, default=60)
    ap.add_argument("--effect", type=float, default=0.5)
    ap.add_argument("--phi", type=float, nargs="+", default=[0.5])
    ap.add_argument("--shape", choices=("curve", "line"), default="curve")
    ap.add_argument("--studies", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    grid = dz.Grid(args.models, args.runs, args.checkpoints, 1)
    rows = []
    for phi in args.phi:
        for res in ("spline", "linear"):
            a = dz.Assumptions(phi=phi, shape=args.shape)
            c = dz.curve(grid, a, dz.Settings(residualiser=res), dz.Draws((0.0, args.effect), args.studies, args.seed))
            null = c.verdicts["same"][0]
            row = {
                "phi": phi,
                "residualiser": res,
                "average_sign": c.power["average sign"][1],
                "generalises": c.power["generalises"][1],
                "false_sign": c.power["average sign"][0],
                "false_models_differ": _spread(null),
                "se_at_half": dz.se_of(0.5, args.studies),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
