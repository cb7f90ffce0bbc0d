"""A LoRA run's checkpoints on one testset, end to end in fresh processes, against lm-evaluation-harness.

Three ways to score the same K LoRA checkpoints of one run on one tokenised testset,
each timed as a user pays it (fresh processes: interpreter, imports, model loads,
scoring, writing predictions), wall clock and the children's user + sys CPU seconds:

  (a) run unit: ONE process calls oodcorr.jobs.evaluate.evaluate_run over all K checkpoints
      (the base model read once, each adapter swapped in);
  (b) checkpoint unit: K processes, evaluate_run over one checkpoint each;
  (c) lm-eval: K invocations of ``lm-eval run --model hf --model_args
      pretrained=<base>,peft=<checkpoint>,dtype=float32`` on a local task that is our
      prompt with our verbalisers (lmeval_common.write_lmeval_task).

Every process runs with one torch thread (OMP_NUM_THREADS=1, and evaluate_run's
threads=1), one after another, so each side runs on one core. The order of the three
sides rotates across repetitions, after an untimed warm-up of each. Per-example
predictions are compared between (a), (b) and (c) for every checkpoint, and (a)'s and
(b)'s logits bit for bit. The tokenised testset (oodcorr's per tokenizer x testset
cache) is built once before timing; its cost is reported beside the timings.

The model is OPT-125m-shaped (hidden 768, 12 layers, 12 heads, FFN 3072, 50,272-row
tied embedding / LM head, random weights) with a byte-level BPE tokenizer of 50,272
tokens trained here: lm-eval resizes the model's embeddings to the tokenizer's length
when it loads a peft adapter, so the tokenizer must have all 50,272 rows for lm-eval to
pay the real LM head. Run it from the benchmark venv (benchmarks/README.md):

    /tmp/bench-venv/bin/python benchmarks/lora_series_vs_lmeval.py --k 5 --limit 64 --reps 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lmeval_common import (
    ARCHS,
    CORPORA,
    DEFAULT_TEMPLATE,
    DEFAULT_TESTSET,
    DEFAULT_VERBALISERS,
    LABELS,
    build_model,
    lmeval_choice_scores,
    load_records,
    median_spread,
    write_lmeval_task,
)

SIDES = {
    "run": "(a) our run unit: 1 process",
    "checkpoint": "(b) our checkpoint unit: K processes",
    "lmeval": "(c) lm-eval, peft=: K processes",
}
# what one of our evaluation processes runs: evaluate_run on a job written as JSON
CHILD = (
    "import json, sys\nfrom oodcorr.jobs.evaluate import EvalParams, evaluate_run\n"
    "args = json.load(open(sys.argv[1]))\nevaluate_run(EvalParams.from_mapping(args.pop('job')), **args)\n"
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data",
        default=str(DEFAULT_TESTSET),
        help="a JSONL testset in the oodcorr record format (premise, hypothesis, label)",
    )
    p.add_argument("--limit", type=int, help="use only the first LIMIT examples")
    p.add_argument("--k", type=int, default=5, help="checkpoints in the LoRA run")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--template", default=DEFAULT_TEMPLATE)
    p.add_argument(
        "--verbalisers", nargs=2, default=list(DEFAULT_VERBALISERS), metavar=("ENTAILMENT", "NON_ENTAILMENT")
    )
    p.add_argument("--arch", choices=sorted(ARCHS), default="125m")
    p.add_argument("--tokenizer-vocab", type=int, default=50272, help="BPE vocabulary trained for the tokenizer")
    p.add_argument("--model-vocab", type=int, default=50272, help="rows of the embedding / LM head")
    p.add_argument("--corpus", choices=CORPORA, default="nli", help="text the tokenizer is trained on")
    p.add_argument("--max-length", type=int, default=2048, help="positions of the model (OPT-125m: 2048)")
    p.add_argument(
        "--lora",
        default='{"r": 8, "alpha": 32, "dropout": 0.1, "target_modules": ["q_proj", "k_proj", "v_proj", "out_proj"]}',
        help="the adapters' LoRA settings (JSON; default as config/paper.yaml's OPT models)",
    )
    p.add_argument(
        "--lora-std",
        type=float,
        default=0.05,
        help="standard deviation of the random adapter weights (A and B; each checkpoint its own)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="rows per batch, both sides")
    p.add_argument("--max-tokens", type=int, default=16384, help="our evaluator's padded tokens per batch")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    p.add_argument("--sides", nargs="+", choices=sorted(SIDES), default=list(SIDES))
    p.add_argument(
        "--max-load", type=float, help="before each repetition, wait until the 1-minute load average is below this"
    )
    p.add_argument("--max-wait", type=float, default=1800, help="seconds to wait for --max-load at most")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out", help="write every repetition's numbers to this JSON file")
    p.add_argument(
        "--fit",
        nargs="+",
        metavar="JSON",
        help="measure nothing: fit fixed + per-example costs to the --out files of two or more "
        "testset sizes (same K) and print where lm-eval / run unit reaches 3x",
    )
    return p.parse_args(argv)


def child_env(args, workdir: Path) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HOME": str(workdir / "hf-home"),
            "HF_DATASETS_CACHE": str(workdir / "hf-datasets"),
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": str(args.threads),
            "MKL_NUM_THREADS": str(args.threads),
        }
    )
    return env


def lora_series(model_dir: Path, workdir: Path, lora: dict, k: int, std: float) -> list[dict]:
    """K LoRA checkpoints of one run, as finetuning writes them (save_pretrained + manifest): one
    adapter configuration, each checkpoint with its own random adapter weights. Cached in workdir."""
    import hashlib

    from oodcorr.jobs.checkpoints import verify_checkpoint

    tag = hashlib.sha256(json.dumps([lora, std], sort_keys=True).encode()).hexdigest()[:8]
    root = workdir / f"lora-{model_dir.name}-{tag}" / "checkpoints"
    steps = [100 * (i + 1) for i in range(k)]
    cks = [{"step": s, "checkpoint": str(root / f"checkpoint-{s}")} for s in steps]
    if all(verify_checkpoint(Path(c["checkpoint"]), full=False)[0] for c in cks):
        return cks
    import torch

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.finetune import apply_lora
    from oodcorr.modeling.loading import load_model

    model = apply_lora(load_model({"name": "bench-opt", "path": str(model_dir)}), lora, "CAUSAL_LM")
    adapter = [p for n, p in model.named_parameters() if "lora_" in n]
    for i, c in enumerate(cks):
        ck = Path(c["checkpoint"])
        if verify_checkpoint(ck, full=False)[0]:
            continue
        gen = torch.Generator().manual_seed(1000 + i)
        with torch.no_grad():
            for p in adapter:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        model.save_pretrained(ck)
        write_ckpt_manifest(ck, c["step"], resumable=False)
    return cks


def tokenised_testset(args, workdir: Path, model_spec: dict) -> dict:
    """Our cache of the testset (oodcorr.jobs.tokenize_testset.tokenize_testset), built once; returns its facts."""
    import torch

    from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
    from oodcorr.core.digests import sha256_json
    from oodcorr.jobs.tokenize_testset import tokenize_testset
    from oodcorr.modeling.prompting import format_prompt

    name, recs = load_records(args.data, args.limit)
    tdir = workdir / f"testset-{name.replace('/', '-')}-n{len(recs)}"
    tdir.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(tdir / "records.jsonl", recs)
    write_json_atomic(tdir / "records.meta.json", {"fingerprint": sha256_json(recs), "records_sha256": None})
    prompt = {"template": args.template, "verbalisers": dict(zip(LABELS, args.verbalisers))}
    cache_path = tdir / f"{Path(model_spec['path']).name}.pt"
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    tokenize_testset(
        model_spec=model_spec,
        built_model_dir=None,
        testset=name,
        data_path=str(tdir / "records.jsonl"),
        data_meta=str(tdir / "records.meta.json"),
        labels=LABELS,
        prompt=prompt,
        max_length=args.max_length,
        out_path=str(cache_path),
    )
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cache = torch.load(cache_path, weights_only=True)
    gold = [LABELS.index(r["label"]) for r in recs]
    assert cache["labels"] == gold
    prompts = [format_prompt(args.template, r["premise"], r["hypothesis"]) for r in recs]
    task_dir = write_lmeval_task(tdir, prompts, gold, args.verbalisers)
    n_tokens = sum(map(len, cache["input_ids"]))
    return {
        "name": name,
        "n": len(recs),
        "tokens": n_tokens,
        "mean_tokens": n_tokens / len(recs),
        "n_truncated": cache["n_truncated"],
        "cache": str(cache_path),
        "gold": gold,
        "lmeval_task": str(task_dir),
        # in this (already warm) process: tokenizer load + encoding + writing the cache
        "tokenize_s": {
            "wall": time.perf_counter() - t0,
            "cpu": ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime,
        },
    }


def run_timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Run one child process to its end; its wall time and user + sys CPU seconds."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{cmd[:3]}... exited with {rc}; its log {log} ends:\n{tail}")
    user, sys_ = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    return {"wall": wall, "user": user, "sys": sys_, "cpu": user + sys_}


class Sides:
    """The three ways to score the run, each writing its predictions under its own fresh folder."""

    def __init__(self, args, model_dir: Path, cks: list[dict], testset: dict, env: dict):
        self.args, self.model_dir, self.cks, self.testset, self.env = args, model_dir, cks, testset, env
        self.spec = {"name": "bench-opt", "path": str(model_dir), "dtype": "float32"}
        self.lmeval = str(Path(sys.executable).with_name("lm-eval"))

    def _our_job(self, out: Path, cks: list[dict], summary: Path) -> list[str]:
        job = {
            "job": {"model_spec": self.spec, "built_model_dir": None, "provenance": {"run_id": "bench"}},
            "tokenized": self.testset["cache"],
            "checkpoints": [dict(c, predictions=str(out / f"step{c['step']}.parquet")) for c in cks],
            "batch_size": self.args.batch_size,
            "max_tokens": self.args.max_tokens,
            "out_summary": str(summary),
            "device": "cpu",
            "threads": self.args.threads,
        }
        path = out / summary.name.replace("summary", "job")
        path.write_text(json.dumps(job))
        return [sys.executable, "-c", CHILD, str(path)]

    def run(self, out: Path, cks: list[dict] | None = None) -> list[dict]:
        cks = cks or self.cks
        return [
            dict(
                run_timed(self._our_job(out, cks, out / "summary.json"), self.env, out / "log.txt"),
                what="evaluate_run over all",
            )
        ]

    def checkpoint(self, out: Path, cks: list[dict] | None = None) -> list[dict]:
        return [
            dict(
                run_timed(
                    self._our_job(out, [c], out / f"summary-step{c['step']}.json"),
                    self.env,
                    out / f"log-step{c['step']}.txt",
                ),
                what=f"step {c['step']}",
            )
            for c in (cks or self.cks)
        ]

    def lmeval_cmd(self, out: Path, ck: dict, limit: int | None = None) -> list[str]:
        cmd = [
            self.lmeval,
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={self.model_dir},peft={ck['checkpoint']},dtype=float32",
            "--tasks",
            "oodcorr_bench",
            "--include_path",
            self.testset["lmeval_task"],
            "--batch_size",
            str(self.args.batch_size),
            "--device",
            "cpu",
            "--output_path",
            str(out / f"step{ck['step']}"),
            "--log_samples",
        ]
        return cmd + (["--limit", str(limit)] if limit else [])

    def lmeval_side(self, out: Path, cks: list[dict] | None = None, limit: int | None = None) -> list[dict]:
        return [
            dict(
                run_timed(self.lmeval_cmd(out, c, limit), self.env, out / f"log-step{c['step']}.txt"),
                what=f"step {c['step']}",
            )
            for c in (cks or self.cks)
        ]

    def __call__(self, side: str, out: Path, **kw) -> list[dict]:
        if out.exists():  # never reuse predictions: evaluate_run keeps files made by the same evaluation
            shutil.rmtree(out)
        out.mkdir(parents=True)
        return {"run": self.run, "checkpoint": self.checkpoint, "lmeval": self.lmeval_side}[side](out, **kw)


def read_ours(out: Path, step: int) -> dict:
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(out / f"step{step}.parquet").to_pydict()
    logits = np.stack([np.asarray(t[f"logit_{lab}"], dtype=np.float32) for lab in LABELS], axis=1)
    return {"pred": [LABELS.index(p) for p in t["pred"]], "logits": logits}


def read_lmeval(out: Path, step: int, n: int) -> dict:
    files = sorted((out / f"step{step}").rglob("samples_oodcorr_bench_*.jsonl"))
    if len(files) != 1:
        raise RuntimeError(f"{out / f'step{step}'}: expected one lm-eval samples file, found {len(files)}")
    samples = sorted(
        (json.loads(line) for line in files[0].read_text().splitlines() if line.strip()), key=lambda s: s["doc_id"]
    )
    if [s["doc_id"] for s in samples] != list(range(n)):
        raise RuntimeError(f"{files[0]}: lm-eval scored a different set of documents")
    lls = [lmeval_choice_scores(s) for s in samples]
    return {"pred": [max(range(len(x)), key=x.__getitem__) for x in lls], "margin": [x[0] - x[1] for x in lls]}


def compare(rep_dir: Path, sides: list[str], cks: list[dict], gold: list[int]) -> dict:
    """Per checkpoint: identical predictions between the sides, (a) vs (b) logits bit for bit,
    the largest |our logit margin - lm-eval's log-likelihood margin|, and each side's accuracy."""
    import numpy as np

    n = len(gold)
    per = []
    for c in cks:
        s = c["step"]
        got = {}
        if "run" in sides:
            got["run"] = read_ours(rep_dir / "run", s)
        if "checkpoint" in sides:
            got["checkpoint"] = read_ours(rep_dir / "checkpoint", s)
        if "lmeval" in sides:
            got["lmeval"] = read_lmeval(rep_dir / "lmeval", s, n)
        row = {"step": s, "accuracy": {k: sum(p == g for p, g in zip(v["pred"], gold)) / n for k, v in got.items()}}
        names = list(got)
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                row[f"same_pred_{x}_{y}"] = sum(p == q for p, q in zip(got[x]["pred"], got[y]["pred"]))
        if "run" in got and "checkpoint" in got:
            a, b = got["run"]["logits"], got["checkpoint"]["logits"]
            row["logits_bitwise_equal_run_checkpoint"] = bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
        ours = got.get("run") or got.get("checkpoint")
        if ours is not None and "lmeval" in got:
            margin = ours["logits"][:, 0] - ours["logits"][:, 1]
            row["max_margin_diff_lmeval"] = float(np.max(np.abs(margin - np.asarray(got["lmeval"]["margin"]))))
        row["pred"] = {k: v["pred"] for k, v in got.items()}
        per.append(row)
    first = names[0]
    preds = [tuple(r["pred"][first]) for r in per]
    return {
        "n": n,
        "per_checkpoint": per,
        "distinct_prediction_vectors": len(set(preds)),
        "min_pairwise_differences": min(
            (
                sum(p != q for p, q in zip(preds[i], preds[j]))
                for i in range(len(preds))
                for j in range(i + 1, len(preds))
            ),
            default=None,
        ),
    }


def our_timing(out: Path) -> dict:
    """The stages evaluate_run recorded (timing_s) in each process's summary."""
    res = []
    for f in sorted(out.glob("summary*.json")):
        s = json.loads(f.read_text())
        res.append(
            {
                "job": s["timing_s"],
                "checkpoints": [dict(r["timing_s"], step=r["step"], load=r["load"]) for r in s["checkpoints"]],
            }
        )
    return {"processes": res}


def wait_for_quiet(max_load: float | None, max_wait: float) -> tuple[float, float]:
    t0 = time.time()
    while max_load is not None and os.getloadavg()[0] >= max_load and time.time() - t0 < max_wait:
        time.sleep(15)
    return os.getloadavg()[0], time.time() - t0


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.fit:
        return fit_sizes(args.fit)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env = child_env(args, workdir)
    os.environ.update(
        {
            k: env[k]
            for k in (
                "HF_HUB_OFFLINE",
                "HF_DATASETS_OFFLINE",
                "TRANSFORMERS_OFFLINE",
                "HF_HOME",
                "TOKENIZERS_PARALLELISM",
            )
        }
    )
    import torch

    from oodcorr.modeling.loading import load_tokenizer

    torch.set_num_threads(2)  # set-up only; the timed children run with --threads
    model_dir = build_model(
        workdir,
        arch=args.arch,
        tokenizer_vocab=args.tokenizer_vocab,
        model_vocab=args.model_vocab,
        max_length=args.max_length,
        corpus=args.corpus,
        exclude=Path(args.data),
    )
    spec = {"name": "bench-opt", "path": str(model_dir), "dtype": "float32"}
    n_tok = len(load_tokenizer(spec))
    cfg = json.loads((model_dir / "config.json").read_text())
    if "lmeval" in args.sides and n_tok != cfg["vocab_size"]:
        raise SystemExit(
            f"the tokenizer has {n_tok} tokens and the model {cfg['vocab_size']} rows: lm-eval would "
            "resize the model to the tokenizer when it loads an adapter (use --corpus nli, or a "
            "--tokenizer-vocab the corpus reaches, with --model-vocab equal to it)"
        )
    lora = json.loads(args.lora)
    cks = lora_series(model_dir, workdir, lora, args.k, args.lora_std)
    testset = tokenised_testset(args, workdir, spec)
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as fh:
        n_params = sum(math.prod(fh.get_slice(key).get_shape()) for key in fh.keys())
    sides = Sides(args, model_dir, cks, testset, env)
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "python": sys.executable,
        "torch": torch.__version__,
        "dtype": "float32",
        "threads_per_process": args.threads,
        "k": args.k,
        "steps": [c["step"] for c in cks],
        "testset": testset["name"],
        "n": testset["n"],
        "tokens": testset["tokens"],
        "mean_tokens": testset["mean_tokens"],
        "n_truncated": testset["n_truncated"],
        "tokenize_once_s": testset["tokenize_s"],
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "model": {
            **ARCHS[args.arch],
            "arch": args.arch,
            "vocab": cfg["vocab_size"],
            "tokenizer_len": n_tok,
            "max_position_embeddings": cfg["max_position_embeddings"],
            "n_params_saved": n_params,
            "dir": str(model_dir),
        },
        "lora": lora,
        "lora_std": args.lora_std,
        "checkpoints": [c["checkpoint"] for c in cks],
        "lmeval_cmd_example": sides.lmeval_cmd(workdir / "out", cks[0]),
        "child_cmd": CHILD,
        "sides": {s: SIDES[s] for s in args.sides},
    }
    try:
        import importlib.metadata as md

        info["versions"] = {p: md.version(p) for p in ("lm_eval", "transformers", "peft", "torch")}
    except Exception:  # noqa: BLE001 -- informational
        pass
    print(json.dumps({k: v for k, v in info.items() if k not in ("checkpoints", "lmeval_cmd_example")}, indent=1))
    print(" ".join(info["lmeval_cmd_example"]), flush=True)

    # untimed warm-up of each side: page cache, .pyc files, lm-eval's datasets cache of the task
    warm = workdir / "out" / "warmup"
    for side in args.sides:
        sides(side, warm / side, cks=cks[:1], **({"limit": 16} if side == "lmeval" else {}))

    reps = []
    for r in range(args.reps):
        load, waited = wait_for_quiet(args.max_load, args.max_wait)
        order = args.sides[r % len(args.sides) :] + args.sides[: r % len(args.sides)]
        rep = {"rep": r, "order": order, "waited_s": round(waited), "sides": {}}
        rep_dir = workdir / "out" / f"n{testset['n']}-rep{r}"
        for side in order:
            l0 = os.getloadavg()
            t0 = time.time()
            procs = sides(side, rep_dir / side)
            tot = {k: sum(p[k] for p in procs) for k in ("wall", "user", "sys", "cpu")}
            rep["sides"][side] = {
                **tot,
                "load_before": l0,
                "load_after": os.getloadavg(),
                "started": time.strftime("%H:%M:%S", time.localtime(t0)),
                "processes": procs,
            }
            if side != "lmeval":
                rep["sides"][side]["evaluate_run_timing"] = our_timing(rep_dir / side)
            print(
                f"rep {r} {side:10s}: {tot['wall']:7.1f} s wall, {tot['cpu']:7.1f} s CPU "
                f"(load {l0[0]:.2f} -> {os.getloadavg()[0]:.2f})",
                flush=True,
            )
        rep["comparison"] = compare(rep_dir, args.sides, cks, testset["gold"])
        reps.append(rep)
    summary = summarise(info, reps, args.sides)
    print_table(summary)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def summarise(info: dict, reps: list[dict], sides: list[str]) -> dict:
    out = dict(info, repetitions=reps)
    out["summary"] = {}
    for side in sides:
        rows = [r["sides"][side] for r in reps]
        out["summary"][side] = {
            "wall": median_spread([x["wall"] for x in rows]),
            "cpu": median_spread([x["cpu"] for x in rows]),
            "load_1min": median_spread([x["load_before"][0] for x in rows] + [x["load_after"][0] for x in rows]),
        }
        if "lmeval" in sides and side != "lmeval":
            # paired per repetition (the same repetition, the sides one after another)
            for what in ("wall", "cpu"):
                out["summary"][side][f"speedup_{what}"] = median_spread(
                    [r["sides"]["lmeval"][what] / r["sides"][side][what] for r in reps]
                )
    rows = [row for r in reps for row in r["comparison"]["per_checkpoint"]]
    n = info["n"]
    agreement = {
        key: f"{sum(row[key] for row in rows)} of {n * len(rows)} examples"
        for key in rows[0]
        if key.startswith("same_pred_")
    }
    if "logits_bitwise_equal_run_checkpoint" in rows[0]:
        agreement["logits_bitwise_equal_run_checkpoint"] = (
            f"{sum(row['logits_bitwise_equal_run_checkpoint'] for row in rows)} of {len(rows)} checkpoints"
        )
    if "max_margin_diff_lmeval" in rows[0]:
        agreement["max_margin_diff_lmeval"] = max(row["max_margin_diff_lmeval"] for row in rows)
    agreement.update(
        checkpoints_x_repetitions=len(rows),
        distinct_prediction_vectors=[r["comparison"]["distinct_prediction_vectors"] for r in reps],
        min_pairwise_differences=[r["comparison"]["min_pairwise_differences"] for r in reps],
        accuracy_last_rep={row["step"]: row["accuracy"] for row in reps[-1]["comparison"]["per_checkpoint"]},
    )
    out["agreement"] = agreement
    return out


def _speedup(x: dict | None) -> str:
    return f"**{x['median']:.2f}×** ({x['min']:.2f}–{x['max']:.2f})" if x else "1"


def print_table(s: dict) -> None:
    k = s["k"]
    print(
        f"\n{s['testset']}, n = {s['n']} ({s['tokens']} tokens), K = {k} LoRA checkpoints, "
        f"{len(s['repetitions'])} repetitions, 1 torch thread per process\n"
    )
    print(
        "| side | wall s, median (min–max) | CPU s, median (min–max) | per checkpoint, wall / CPU s | "
        "lm-eval ÷ this, wall | lm-eval ÷ this, CPU | 1-min load (min–max) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for side, v in s["summary"].items():
        w, c, ld = v["wall"], v["cpu"], v["load_1min"]
        sw, sc = v.get("speedup_wall"), v.get("speedup_cpu")
        print(
            f"| {SIDES[side]} | {w['median']:.1f} ({w['min']:.1f}–{w['max']:.1f}) | "
            f"{c['median']:.1f} ({c['min']:.1f}–{c['max']:.1f}) | {w['median'] / k:.1f} / {c['median'] / k:.1f} | "
            f"{_speedup(sw)} | {_speedup(sc)} | {ld['min']:.1f}–{ld['max']:.1f} |"
        )
    print("\nagreement:", json.dumps(s["agreement"], indent=1))


def fit_sizes(paths: list[str], target: float = 3.0) -> dict:
    """Each side's cost as fixed + per-example, from the medians at two or more testset sizes.

    Per checkpoint, time = f + n c (least squares over the sizes); the run unit's fixed cost
    is paid once per job (F = K f), the checkpoint unit's and lm-eval's once per checkpoint.
    So lm-eval / run unit = K (F_lm + n c_lm) / (F_run + K n c_run): it tends to c_lm / c_run
    as n grows, and reaches ``target`` up to n* = (K F_lm - target F_run) / (K (target c_run - c_lm)).
    """
    runs = sorted((json.loads(Path(p).read_text()) for p in paths), key=lambda r: r["n"])
    ks = {r["k"] for r in runs}
    if len(ks) != 1 or len(runs) < 2:
        raise SystemExit("--fit needs the files of at least two testset sizes measured with the same --k")
    k = ks.pop()
    ns = [r["n"] for r in runs]
    out = {"k": k, "sizes": ns, "files": paths}
    for what in ("cpu", "wall"):
        fits = {}
        for side in SIDES:
            if not all(side in r["summary"] for r in runs):
                continue
            ys = [r["summary"][side][what]["median"] / k for r in runs]
            mx, my = statistics.mean(ns), statistics.mean(ys)
            c = sum((x - mx) * (y - my) for x, y in zip(ns, ys)) / sum((x - mx) ** 2 for x in ns)
            f = my - c * mx
            fits[side] = {
                "per_example_s": c,
                "fixed_s": f * k if side == "run" else f,
                "fixed_paid": "once per job" if side == "run" else "once per checkpoint",
                "per_checkpoint_s": dict(zip(map(str, ns), ys)),
            }
        res = {"sides": fits}
        if "run" in fits and "lmeval" in fits:
            a, lm = fits["run"], fits["lmeval"]
            res["per_example_ratio_lmeval_run"] = lm["per_example_s"] / a["per_example_s"]
            denom = k * (target * a["per_example_s"] - lm["per_example_s"])
            res[f"n_max_for_{target:g}x"] = (
                (k * lm["fixed_s"] - target * a["fixed_s"]) / denom if denom > 0 else float("inf")
            )
            res[f"n_max_for_{target:g}x_any_k"] = (
                lm["fixed_s"] / (target * a["per_example_s"] - lm["per_example_s"]) if denom > 0 else float("inf")
            )
            res["predicted_ratio"] = {
                str(n): k * (lm["fixed_s"] + n * lm["per_example_s"]) / (a["fixed_s"] + k * n * a["per_example_s"])
                for n in ns
            }
            res["measured_ratio"] = {str(r["n"]): r["summary"]["run"][f"speedup_{what}"]["median"] for r in runs}
        out[what] = res
    print(f"K = {k}, sizes {ns}")
    for what in ("cpu", "wall"):
        print(f"\n{what} seconds:")
        print("| side | fixed s | paid | per example s | per checkpoint at each n |")
        print("| --- | --- | --- | --- | --- |")
        for side, v in out[what]["sides"].items():
            per = ", ".join(f"{n}: {y:.1f}" for n, y in v["per_checkpoint_s"].items())
            print(f"| {SIDES[side]} | {v['fixed_s']:.2f} | {v['fixed_paid']} | {v['per_example_s']:.4f} | {per} |")
        r = out[what]
        if "predicted_ratio" in r:
            print(
                f"per-example cost lm-eval / ours: {r['per_example_ratio_lmeval_run']:.2f}; lm-eval / run unit "
                f"predicted {r['predicted_ratio']}, measured {r['measured_ratio']}; reaches {target:g}x up to "
                f"n = {r[f'n_max_for_{target:g}x']:.1f} at K = {k} "
                f"(up to n = {r[f'n_max_for_{target:g}x_any_k']:.1f} for any K)"
            )
    return out


if __name__ == "__main__":
    main()
