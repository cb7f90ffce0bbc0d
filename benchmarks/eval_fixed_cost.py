"""What an evaluation job pays before it scores: fresh processes, process start to first batch.

Each repetition starts a fresh Python process per case that does what the ``evaluate`` rule's
script does for one checkpoint x testset: the Snakemake script preamble's imports, then
``oodcorr.jobs.evaluate.evaluate_run`` on one checkpoint. The process records, from its own start
(read from /proc, to the clock tick):

* ``ready``: when the first batch is handed to the model (everything before scoring: interpreter,
  imports, the tokenised testset, the model);
* ``first_batch``: when that batch's scores are back;
* ``total``: when evaluate_run returned (the predictions file written);

and the parent measures its wall and CPU (user + sys) time. The first call of the method's
``label_logits`` is wrapped to read those marks, so the same child measures the landed code (run
it with ``--src`` pointing at another checkout's ``src``) and this one.

Cases: the embedded default's two tiny models (their last checkpoints and tokenised testsets, from
a finished ``results/default``), and the OPT-125m shape (benchmarks/lmeval_common.py, random
weights, a checkpoint folder with its manifest) on RTE validation, plain and (``--lora``) LoRA.

    .venv/bin/python benchmarks/eval_fixed_cost.py --default-results results/default --reps 5 \\
        --out benchmarks/latest/eval_fixed_cost.json [--src ../main/src] [--env OODCORR_LEAN=0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lmeval_common import DEFAULT_TEMPLATE, DEFAULT_TESTSET, LABELS, REPO, build_model, load_records

CHILD = r"""
import json, os, sys, time
# what Snakemake's script preamble imports before the rule's script runs
import pickle
from snakemake.logging import logger
from snakemake.iocontainers import Snakemake
from oodcorr.jobs import evaluate
from oodcorr.modeling import adaptation

marks = {}
for cls in adaptation.ADAPTATIONS.values():
    def wrap(orig):
        def label_logits(*a, **k):
            marks.setdefault("ready", time.time())
            out = orig(*a, **k)
            marks.setdefault("first_batch", time.time())
            return out
        return staticmethod(label_logits)
    cls.label_logits = wrap(cls.label_logits)
start = time.time() - evaluate._process_age()
job = json.load(open(sys.argv[1]))
result = evaluate.evaluate_run(evaluate.EvalParams.from_mapping(job.pop("job")), **job)
done = time.time()
rec = result["checkpoints"][0]
print(json.dumps({
    "ready": marks["ready"] - start, "first_batch": marks["first_batch"] - start, "total": done - start,
    "job_timing_s": result["timing_s"], "timing_s": rec["timing_s"], "load": rec.get("load"),
    "loader": rec.get("loader", "transformers"), "lora": rec.get("lora"), "accuracy": rec["accuracy"],
    "batching": rec["batching"], "modules": len(sys.modules),
}))
sys.stdout.flush()
os._exit(0)  # as the rule's script ends (oodcorr.launch.runtime.end_job): no interpreter teardown
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--default-results", help="a finished results/default (the embedded default's checkpoints)")
    p.add_argument("--no-125m", action="store_true", help="skip the OPT-125m-shaped cases")
    p.add_argument("--lora", action="store_true", help="also a LoRA checkpoint of the OPT-125m shape")
    p.add_argument("--limit", type=int, default=160, help="RTE examples for the OPT-125m shape")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each job (the rule's default: 1)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--src", default=str(REPO / "src"), help="the oodcorr source the children import")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the children (e.g. OODCORR_LEAN=0)")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out", help="write every repetition's numbers here (JSON)")
    return p.parse_args(argv)


def _manifested(src: Path, dest: Path, step: int) -> Path:
    """``src``'s files hard-linked into a checkpoint folder with its oodcorr manifest."""
    from oodcorr.jobs.checkpoints import write_ckpt_manifest

    if not (dest / "oodcorr_manifest.json").exists():
        dest.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and not (dest / f.name).exists():
                os.link(f, dest / f.name)
        write_ckpt_manifest(dest, step, resumable=False)
    return dest


def opt125_cases(args, workdir: Path) -> list[dict]:
    """The OPT-125m shape on RTE: its tokenised testset and checkpoint(s)."""
    from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
    from oodcorr.core.digests import sha256_json
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    model_dir = build_model(workdir, arch="125m", tokenizer_vocab=8000, model_vocab=50272, max_length=2048)
    name, recs = load_records(DEFAULT_TESTSET, args.limit)
    tdir = workdir / f"fixed-cost-rte{len(recs)}"
    tdir.mkdir(parents=True, exist_ok=True)
    spec = {"name": "bench-opt", "path": str(model_dir), "dtype": "float32"}
    cache = tdir / f"{model_dir.name}.pt"
    if not cache.exists():
        write_jsonl_atomic(tdir / "records.jsonl", recs)
        write_json_atomic(tdir / "records.meta.json", {"fingerprint": sha256_json(recs), "records_sha256": None})
        prompt = {"template": DEFAULT_TEMPLATE, "verbalisers": {"entailment": " Yes", "non-entailment": " No"}}
        tokenize_testset(
            model_spec=spec,
            built_model_dir=None,
            testset=name,
            data_path=str(tdir / "records.jsonl"),
            data_meta=str(tdir / "records.meta.json"),
            labels=LABELS,
            prompt=prompt,
            max_length=2048,
            out_path=str(cache),
        )
    full = _manifested(model_dir, tdir / "checkpoints" / "checkpoint-1", 1)
    cases = [{"case": f"opt-125m shape, {name} {len(recs)}", "spec": spec, "checkpoint": full, "cache": cache}]
    if args.lora:
        from lora_series_vs_lmeval import lora_series

        lora = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
        ck = Path(lora_series(model_dir, workdir, lora, 1, 0.02)[0]["checkpoint"])
        cases.append(
            {"case": f"opt-125m shape LoRA r8 q,v, {name} {len(recs)}", "spec": spec, "checkpoint": ck, "cache": cache}
        )
    return cases


def default_cases(results: Path) -> list[dict]:
    """The embedded default's models: each run's last checkpoint on its in-domain testset."""
    cases = []
    for run in sorted((results / "finetune").glob("*/*/n*/seed*")):
        model = run.relative_to(results / "finetune").parts[0]
        last = max(run.glob("checkpoints/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        cache = results / "cache" / "tokenized" / model / "synth-test.pt"
        spec = {"name": model, "tiny": {"model_type": model.split("-")[-1]}, "dtype": "float32", "method": "pattern"}
        cases.append(
            {
                "case": f"{model} (embedded default), synth-test",
                "spec": spec,
                "checkpoint": last,
                "cache": cache,
                "built_model_dir": str(results / "models" / model),
            }
        )
    return cases


def run_child(case: dict, args, out: Path, env: dict) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    pred = out / "p.parquet"
    pred.unlink(missing_ok=True)
    from oodcorr.jobs.checkpoints import read_ckpt_manifest

    # scored as the step its own manifest records: a checkpoint is checked against its place (issue 25)
    step = (read_ckpt_manifest(Path(case["checkpoint"])) or {}).get("step")
    job = {
        "job": {
            "model_spec": case["spec"],
            "built_model_dir": case.get("built_model_dir"),
            "provenance": {"run_id": "bench"},
        },
        "checkpoints": [
            {"step": 1 if step is None else step, "checkpoint": str(case["checkpoint"]), "predictions": str(pred)}
        ],
        "tokenized": str(case["cache"]),
        "batch_size": 32,
        "max_tokens": 16384,
        "device": "cpu",
        "threads": args.threads,
    }
    (out / "job.json").write_text(json.dumps(job))
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, str(out / "job.json")], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise RuntimeError(f"{case['case']}: child failed:\n{res.stderr[-3000:]}")
    got = json.loads(res.stdout.strip().splitlines()[-1])
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    return dict(got, wall=wall, cpu=cpu, load_before=load, load_after=os.getloadavg()[0])


def main(argv=None) -> dict:
    args = parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OODCORR_")}
    env.update(
        PYTHONPATH=os.pathsep.join([args.src, str(REPO / "src")]),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS=str(args.threads),
        TOKENIZERS_PARALLELISM="false",
    )
    env.update(dict(kv.split("=", 1) for kv in args.env))
    cases = default_cases(Path(args.default_results)) if args.default_results else []
    if not args.no_125m:
        cases += opt125_cases(args, workdir)
    outdir = workdir / "fixed-cost-out"
    shutil.rmtree(outdir, ignore_errors=True)
    for c in cases:  # untimed warm-up: page cache, .pyc files
        run_child(c, args, outdir / "warmup", env)
    reps = []
    for r in range(args.reps):
        for i, c in enumerate(cases):
            got = run_child(c, args, outdir / f"rep{r}-{i}", env)
            got.update(case=c["case"], rep=r)
            reps.append(got)
            print(
                f"rep {r} {c['case']:<45} ready {got['ready']:.3f} s, first batch {got['first_batch']:.3f} s, "
                f"total {got['total']:.3f} s; process {got['wall']:.3f} s wall {got['cpu']:.3f} s CPU "
                f"({got['loader']}, load {got['load_before']:.2f})",
                flush=True,
            )
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "src": args.src,
        "env": args.env,
        "threads": args.threads,
        "reps": reps,
        "cases": {},
    }
    for c in cases:
        rows = [r for r in reps if r["case"] == c["case"]]
        summary["cases"][c["case"]] = {
            key: {
                "median": round(statistics.median(r[key] for r in rows), 3),
                "min": round(min(r[key] for r in rows), 3),
                "max": round(max(r[key] for r in rows), 3),
            }
            for key in ("ready", "first_batch", "total", "wall", "cpu", "load_before")
        }
        summary["cases"][c["case"]]["loader"] = rows[0]["loader"]
        summary["cases"][c["case"]]["modules"] = rows[0]["modules"]
    for name, s in summary["cases"].items():
        print(
            f"{name:<45} median ready {s['ready']['median']:.3f} s, first batch {s['first_batch']['median']:.3f} s, "
            f"process {s['wall']['median']:.3f} s wall, {s['cpu']['median']:.3f} s CPU, {s['modules']} modules "
            f"(load {s['load_before']['min']:.2f}-{s['load_before']['max']:.2f})"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
