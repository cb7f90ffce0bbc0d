"""Time and peak memory of `oodcorr analyse` on a wide table of many testsets (issue 13's scale target).

Writes a wide table -- one row per checkpoint (30), one column per testset (an
in-domain one and 149 OOD ones: 11,026 pairs) with learning-curve-shaped scores
driven by a few shared latent trends plus noise -- and runs the installed command on
it under ``/usr/bin/time -v`` (wall time, maximum resident set size), with the
default options, ``--reps`` times, with plots and with ``--no-plots``.

    .venv/bin/python benchmarks/analysis_scale.py --out benchmarks/latest/analysis_scale.json

Target (issue 13): at most 15 s and 1 GiB with plots on the 2-core machine.
"""

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd


def wide_table(path: Path, n_ood: int, n_steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(n_steps)
    z = 0.5 + 0.3 * (1 - np.exp(-t / (n_steps / 4))) + 0.01 * rng.normal(size=n_steps)
    latent = np.cumsum(rng.normal(size=(n_steps, 6)), axis=0) * 0.01
    cols = {"step": t * 100, "in-domain": z}
    for j in range(n_ood):
        cols[f"ood_{j:03d}"] = (
            0.4 + 0.3 * rng.uniform() * z + 0.5 * latent @ rng.normal(size=6) + 0.01 * rng.normal(size=n_steps)
        )
    pd.DataFrame(cols).to_csv(path, index=False)


def timed(cmd: list[str]) -> dict:
    res = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", res.stderr)
    h, m, s = wall.groups()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", res.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", res.stderr).group(1))
    return {"wall_s": int(h or 0) * 3600 + int(m) * 60 + float(s), "max_rss_gib": rss / 2**20, "cpu_s": user + system}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-ood", type=int, default=149)
    ap.add_argument("--n-steps", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", help="write the measurements as JSON here")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("oodcorr"))
    res = {
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "n_ood": args.n_ood,
        "n_steps": args.n_steps,
        "pairs": args.n_ood * (args.n_ood - 1) // 2,
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "wide.csv"
        wide_table(table, args.n_ood, args.n_steps)
        base = [exe, "analyse", str(table), "--format", "wide", "--unit", "step", "--in-domain", "in-domain", "-q"]
        for rep in range(args.reps):
            for label, extra in (("with plots", []), ("tables only", ["--no-plots"])):
                out = Path(tmp) / f"out-{rep}-{len(extra)}"
                got = timed(base + ["--out", str(out)] + extra)
                got.update(rep=rep, what=label)
                if label == "with plots":
                    png = out / "heatmaps" / "wide.png"
                    from PIL import Image

                    with Image.open(png) as im:
                        got["heatmap_pixels"] = list(im.size)
                    got["heatmap_bytes"] = png.stat().st_size
                res["runs"].append(got)
                print(
                    f"{label:12s} rep {rep}: {got['wall_s']:.1f} s wall, {got['cpu_s']:.1f} s CPU, "
                    f"{got['max_rss_gib']:.2f} GiB",
                    flush=True,
                )
    for label in ("with plots", "tables only"):
        rows = [r for r in res["runs"] if r["what"] == label]
        print(
            f"{label}: wall {min(r['wall_s'] for r in rows):.1f}-{max(r['wall_s'] for r in rows):.1f} s, "
            f"peak {max(r['max_rss_gib'] for r in rows):.2f} GiB over {len(rows)} runs"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
