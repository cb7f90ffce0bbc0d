"""How long ``oodcorr design`` takes on a config at its default precision (issue 26: at most 60 s on
2 cores for config/paper.yaml).

Runs the command in a fresh process ``--reps`` times and records wall time, CPU time of the process
and its workers (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), the load average
and a GEMM (suite_scale.gemm) before and after each run, and the wall time normalised by it
(``wall x GEMM / 188 GFLOP/s``, the quiet machine's: what the run would take with the cores free):

    .venv/bin/python benchmarks/design_time.py --configfile config/paper.yaml --reps 3 \\
        --out benchmarks/latest/design_time_paper.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_scale import REFERENCE_GFLOPS, gemm  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("extra", nargs="*", help="more arguments for oodcorr design (after --)")
    args = ap.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.reps):
            g0 = gemm()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            load0 = os.getloadavg()
            t0 = time.time()
            cmd = [sys.executable, "-m", "oodcorr.cli", "design", "--configfile", args.configfile]
            cmd += ["--out", f"{tmp}/design", *args.extra]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.time() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            rep = json.loads(Path(f"{tmp}/design.json").read_text())
            g1 = gemm()
            runs.append(
                {
                    "wall_s": round(wall, 1),
                    "gemm_gflops": [g0, g1],
                    "normalised_wall_s": round(wall * (g0 + g1) / 2 / REFERENCE_GFLOPS, 1),
                    "cpu_s": round(cpu, 1),
                    "load_before": [round(x, 2) for x in load0],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "workers": rep["workers"],
                    "studies": rep["precision"]["studies"],
                    "largest_se": rep["precision"]["largest_se"],
                }
            )
            print(runs[-1], flush=True)
    out = {
        "machine": platform.platform(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "config": args.configfile,
        "extra": args.extra,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "runs": runs,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
