"""bfloat16 against float32 scoring on a CPU: how often the predictions differ, by how much, how fast.

Two sets of models, each scored in float32 and in bfloat16 (the lean model, modeling/plain_torch.py,
batched as a CPU job batches: ``device_batching``):

* the OPT-125m shape (benchmarks/lmeval_common.py: random weights, a BPE tokenizer trained on
  RTE's and the synthetic task's text) on the real testsets of ``../shared/data/nli`` (see its
  SOURCES.md; binary label mode, the first ``--limit`` examples of each);
* with ``--default-results``, the embedded default's trained tiny models (every checkpoint of
  each run) on their six synthetic testsets, from a finished ``results/default``.

Per testset: the predictions that differ, the largest difference of the margin (the first label's
score minus the second's) against the median |margin|, the smallest float32 |margin| among the
examples that flip, and the scoring time of each dtype (median of ``--reps``).

    .venv/bin/python benchmarks/bf16_vs_fp32.py --limit 300 --threads 2 \\
        --default-results results/default --out benchmarks/latest/bf16_vs_fp32.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from lmeval_common import DEFAULT_TEMPLATE, LABELS, SHARED_NLI, build_model, load_records

TESTSETS = [
    "snli/test.jsonl",
    "mnli/validation_matched.jsonl",
    "anli/test.jsonl",
    "scitail/test.jsonl",
    "rte/validation.jsonl",
    "wnli/validation.jsonl",
    "paws/test.jsonl",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=300, help="the first N examples of each real testset")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--default-results", help="a finished results/default: its tiny models too")
    p.add_argument("--no-125m", action="store_true")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out")
    return p.parse_args(argv)


def compare(torch, want, got, gold) -> dict:
    m32, m16 = want[:, 0] - want[:, 1], got[:, 0] - got[:, 1]
    flips = (want.argmax(-1) != got.argmax(-1)).nonzero().flatten().tolist()
    gold = torch.as_tensor(gold)
    acc32, acc16 = float((want.argmax(-1) == gold).float().mean()), float((got.argmax(-1) == gold).float().mean())
    return {
        "n": int(want.shape[0]),
        "differ": len(flips),
        "accuracy_fp32": round(acc32, 4),
        "accuracy_bf16": round(acc16, 4),
        "max_margin_diff": round(float((m32 - m16).abs().max()), 4),
        "median_abs_margin": round(float(m32.abs().median()), 4),
        "flipped_fp32_abs_margins": [round(float(m32[i].abs()), 4) for i in flips],
    }


def scored(torch, score, model, cache, threads, reps):
    from oodcorr.jobs.scoring import device_batching

    rows, tokens, overhead = device_batching("cpu", threads, 32, 16384)
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = score(model, cache, rows, tokens, overhead=overhead)
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from oodcorr.jobs.scoring import score
    from oodcorr.modeling import plain_torch
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_tokenizer

    torch.set_num_threads(args.threads)
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": args.threads, "load_before": os.getloadavg(), "sets": {}}
    if not args.no_125m:
        model_dir = build_model(
            Path(args.workdir), arch="125m", tokenizer_vocab=8000, model_vocab=50272, max_length=2048
        )
        tok = load_tokenizer({"name": "b", "path": str(model_dir)})
        models = {dt: plain_torch.build(model_dir, dt) for dt in ("float32", "bfloat16")}
        prompt = {"template": DEFAULT_TEMPLATE, "verbalisers": {"entailment": " Yes", "non-entailment": " No"}}
        for name in TESTSETS:
            _, recs = load_records(SHARED_NLI / name, args.limit)
            ids, _, extra = get("pattern").encode(
                tok, recs, labels=LABELS, prompt=prompt, max_length=2048, model_name="b"
            )
            cache = {
                "input_ids": ids,
                "method": "pattern",
                "label_names": LABELS,
                "pad_id": tok.pad_token_id,
                "extra": extra,
            }
            (a, ta), (b, tb) = (scored(torch, score, models[dt], cache, args.threads, args.reps) for dt in models)
            gold = [LABELS.index(r["label"]) for r in recs]
            row = dict(compare(torch, a, b, gold), fp32_s=round(ta, 2), bf16_s=round(tb, 2), speedup=round(ta / tb, 2))
            out["sets"][f"opt-125m shape | {name}"] = row
            print(f"opt-125m shape {name:<32} {row}", flush=True)
    if args.default_results:
        res = Path(args.default_results)
        for run in sorted((res / "finetune").glob("*/*/n*/seed*")):
            model = run.relative_to(res / "finetune").parts[0]
            cks = sorted(run.glob("checkpoints/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
            for cache_path in sorted((res / "cache" / "tokenized" / model).glob("*.pt")):
                cache = torch.load(cache_path, weights_only=True)
                rows = []
                for ck in cks:
                    (a, ta), (b, tb) = (
                        scored(torch, score, plain_torch.build(ck, dt), cache, args.threads, args.reps)
                        for dt in ("float32", "bfloat16")
                    )
                    rows.append(dict(compare(torch, a, b, cache["labels"]), fp32_s=ta, bf16_s=tb))
                row = {
                    "checkpoints": len(rows),
                    "n": sum(r["n"] for r in rows),
                    "differ": sum(r["differ"] for r in rows),
                    "max_accuracy_diff": round(max(abs(r["accuracy_fp32"] - r["accuracy_bf16"]) for r in rows), 4),
                    "max_margin_diff": max(r["max_margin_diff"] for r in rows),
                    "median_abs_margin": statistics.median(r["median_abs_margin"] for r in rows),
                    "flipped_fp32_abs_margins": sorted(m for r in rows for m in r["flipped_fp32_abs_margins"]),
                    "speedup": round(sum(r["fp32_s"] for r in rows) / sum(r["bf16_s"] for r in rows), 2),
                }
                out["sets"][f"{model} | {cache_path.stem}"] = row
                flips = row["flipped_fp32_abs_margins"]
                shown = {k: v for k, v in row.items() if k != "flipped_fp32_abs_margins"}
                print(f"{model} {cache_path.stem:<20} {shown}, flipped |margin| <= {max(flips, default=0)}", flush=True)
    out["load_after"] = os.getloadavg()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
