"""How long Snakemake takes to plan a config (dry run), and its peak memory.

Runs `snakemake -n` on the repository's Snakefile with --configfile CONFIG in an
empty working directory (so every job is planned: the worst case, a first run),
under /usr/bin/time -v, and prints the wall time, the peak resident memory, the
job counts from Snakemake's own job-stats table and the number of checkpoint x
testset evaluations those jobs make (one per evaluation job in `evaluation.unit:
checkpoint`; a run's checkpoints per job in unit `run`). `--unit` plans a copy of
the config in that unit.

    .venv/bin/python benchmarks/dag_plan.py --configfile benchmarks/dag_grid.yaml
    .venv/bin/python benchmarks/dag_plan.py --configfile config/paper.yaml --reps 3

--print-jobs plans with Snakemake's default output (every job printed, sent to
/dev/null) instead of `--quiet rules`; --profile FILE writes a cProfile of one
planning run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", required=True, help="the config to plan (any path)")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    p.add_argument("--print-jobs", action="store_true", help="print every job (to /dev/null), as plain -n does")
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of one planning run here")
    p.add_argument("--unit", choices=("checkpoint", "run"), help="plan the config in this evaluation unit")
    p.add_argument("--out", help="write the numbers to this JSON file")
    return p.parse_args(argv)


def job_counts(text: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table as {rule: count}."""
    m = re.search(r"Job stats:\njob\s+count\n[-\s]+\n((?:\S+\s+\d+\n)+)", text)
    if not m:
        raise RuntimeError("no job stats in Snakemake's output:\n" + text[-3000:])
    return {rule: int(n) for rule, n in re.findall(r"(\S+)\s+(\d+)\n", m.group(1))}


def plan_once(args, workdir: str) -> dict:
    cmd = [
        args.snakemake,
        "-n",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        workdir,
        "--configfile",
        str(Path(args.configfile).resolve()),
    ]
    if args.profile:
        cmd = [sys.executable, "-m", "cProfile", "-o", args.profile] + cmd
    cmd_counts = cmd + ["--quiet", "rules"]
    timed = cmd if args.print_jobs else cmd_counts
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        out = subprocess.run(
            ["/usr/bin/time", "-v", "-o", tf.name] + timed,
            cwd=REPO,
            text=True,
            stdout=subprocess.DEVNULL if args.print_jobs else subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        wall = time.perf_counter() - t0
        rusage = tf.read()
    if out.returncode:
        raise RuntimeError(f"snakemake failed ({out.returncode}):\n{(out.stdout or '')[-3000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", rusage).group(1))
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", rusage))
    if args.print_jobs:  # counts from a second, quiet run
        text = subprocess.run(cmd_counts, cwd=REPO, text=True, capture_output=True, check=True).stdout
    else:
        text = out.stdout
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_gib": round(rss_kb / 2**20, 3),
        "jobs": job_counts(text),
    }


def count_evaluations(configfile: str) -> int:
    """Checkpoint x testset evaluations the config asks for (one output file each)."""
    import yaml

    sys.path.insert(0, str(REPO / "src"))
    from oodcorr.planning.plan import build_plan
    from oodcorr.planning.schema import fill_defaults

    cfg = yaml.safe_load(Path(configfile).read_text())
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return sum(len(job.steps) for job in build_plan(cfg, REPO).eval_jobs)


def with_unit(configfile: str, unit: str, folder: str) -> str:
    """A copy of the config with `evaluation.unit` set (paths in it stay relative to the repository)."""
    import yaml

    cfg = yaml.safe_load(Path(configfile).read_text())
    cfg.setdefault("experiment", Path(configfile).stem)
    cfg.setdefault("evaluation", {})["unit"] = unit
    out = Path(folder) / f"{Path(configfile).stem}-{unit}.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(out)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.unit:
        tmp = tempfile.mkdtemp(prefix="oodcorr-unit-")
        args.configfile = with_unit(args.configfile, args.unit, tmp)
    evaluations = count_evaluations(args.configfile)
    runs = []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="oodcorr-dag-") as wd:
            r = plan_once(args, wd)
        runs.append(r)
        print(
            f"{r['wall_s']:7.1f} s wall, {r['cpu_s']:7.1f} s CPU, {r['peak_rss_gib']:.2f} GiB peak RSS, "
            f"{sum(n for k, n in r['jobs'].items() if k.startswith('evaluate'))} evaluation jobs making "
            f"{evaluations} checkpoint x testset evaluations, {r['jobs']['total']} jobs in all",
            flush=True,
        )
    summary = {
        "configfile": args.configfile,
        "unit": args.unit,
        "print_jobs": args.print_jobs,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "jobs": runs[-1]["jobs"],
        "evaluations": evaluations,
        "wall_s": [r["wall_s"] for r in runs],
        "cpu_s": [r["cpu_s"] for r in runs],
        "peak_rss_gib": [r["peak_rss_gib"] for r in runs],
        "wall_s_median": statistics.median(r["wall_s"] for r in runs),
    }
    print(json.dumps(summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
