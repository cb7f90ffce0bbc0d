"""Where an experiment's evaluation jobs spent their time, from the records they wrote.

Every predictions file carries its record (``oodcorr.core.records.read_result``); each record
holds the job's stage times (``job_timing_s``: startup, imports, cache, and since issue 24 ready
and first_batch: from the process's start to its first scoring and to its first batch scored)
and its own (``timing_s``: model, forward, write; ``batching``: the share of padding). This
prints medians (min-max) over the jobs and the checkpoint x testset records of one finished
experiment, and how the records were loaded (lean or transformers, LoRA folded or not):

    .venv/bin/python benchmarks/eval_job_stages.py results/default [--out FILE.json]

Nothing is run: it reads what `make run` (or any experiment) left behind.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from oodcorr.core.records import read_result


def spread(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", help="an experiment's results folder, e.g. results/default")
    ap.add_argument("--out", help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    files = sorted(Path(args.experiment, "eval").rglob("*.predictions.parquet"))
    if not files:
        print(f"{args.experiment}/eval: no predictions files; run the experiment first", file=sys.stderr)
        return 2
    jobs: dict[str, dict] = {}
    per_record: dict[str, list[float]] = {}
    loads: dict[str, int] = {}
    loaders: dict[str, int] = {}
    padding: list[float] = []
    for f in files:
        rec = read_result(str(f))
        job = rec.get("job_timing_s") or {}
        # one job per record in unit checkpoint; in unit run a job's records share its stage times
        jobs.setdefault(json.dumps(job, sort_keys=True), job)
        for stage, s in (rec.get("timing_s") or {}).items():
            per_record.setdefault(stage, []).append(float(s))
        loads[rec.get("load", "?")] = loads.get(rec.get("load", "?"), 0) + 1
        how = f"{rec.get('loader', 'transformers')}, lora {rec.get('lora') or '-'}"
        loaders[how] = loaders.get(how, 0) + 1
        batching = rec.get("batching") or {}
        if batching.get("padded_tokens"):
            padding.append(1 - batching["tokens"] / batching["padded_tokens"])
    per_job = {
        stage: spread([float(j[stage]) for j in jobs.values() if j.get(stage) is not None])
        for stage in ("startup", "imports", "cache", "ready", "first_batch")
        if any(j.get(stage) is not None for j in jobs.values())
    }
    summary = {
        "experiment": args.experiment,
        "records": len(files),
        "jobs": len(jobs),
        "per_job_s": per_job,
        "per_record_s": {k: spread(v) for k, v in per_record.items()},
        "padding": spread(padding) if padding else None,
        "loads": loads,
        "loaders": loaders,
    }
    for scope in ("per_job_s", "per_record_s"):
        for stage, s in summary[scope].items():
            print(
                f"{scope[:-2]:<11} {stage:<8} median {s['median']:7.3f} s  ({s['min']:.3f}-{s['max']:.3f}, n={s['n']})"
            )
    if padding:
        p = summary["padding"]
        print(f"padding     share    median {p['median']:7.3f}    ({p['min']:.3f}-{p['max']:.3f}, n={p['n']})")
    print(f"{len(files)} records from {len(jobs)} jobs; model loads: {loads}; loaded by: {loaders}")
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
