"""Coverage of the block-bootstrap intervals and size of the block-permutation test.

Simulates runs whose two OOD scores have a known partial correlation (rho = 0.4)
given the in-domain score, with AR(1) noise across checkpoints (coefficient phi),
and counts how often the 95% interval covers rho, and how often the permutation
test rejects at 5% when rho = 0 (its size; nominal 0.05). The default block rule
(ceil(n^(1/3))) is compared with i.i.d. resampling (block length 1).

    .venv/bin/python benchmarks/analysis_coverage.py            # 1000 runs per cell
    .venv/bin/python benchmarks/analysis_coverage.py --reps 200 # quicker

Prints a Markdown table (the README quotes it).
"""
import argparse
import time

from oodcorr.analysis.simulate import coverage


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--n", type=int, nargs="+", default=[9, 30, 60, 120])
    ap.add_argument("--phi", type=float, nargs="+", default=[0.0, 0.5, 0.8])
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    print("| n | phi | block | coverage (fisher-z) | coverage (percentile) | permutation size "
          "| i.i.d. coverage | i.i.d. size |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    t0 = time.time()
    for n in args.n:
        for phi in args.phi:
            z = coverage(n, phi, 0.4, args.reps, seed=args.seed)
            pc = coverage(n, phi, 0.4, args.reps, seed=args.seed, interval="percentile")
            iid = coverage(n, phi, 0.4, args.reps, seed=args.seed, block_length=1)
            print(f"| {n} | {phi} | {z['block_length']} | {z['coverage']:.3f} | {pc['coverage']:.3f} | "
                  f"{z['size']:.3f} | {iid['coverage']:.3f} | {iid['size']:.3f} |", flush=True)
    print(f"\n{args.reps} simulated runs per cell, seed {args.seed}, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
