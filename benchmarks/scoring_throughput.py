"""Scoring throughput against the GEMM throughput measured in the same run, on the OPT-125m shape.

In one process, per torch thread count:

1. GEMM: the throughput of fp32 matrix products, ``torch.mm``, (a) square 2048 x 2048 x 2048 and
   (b) the products of one OPT-125m layer at 1,024 rows (q, k, v, out: 768 x 768; fc1 768 x 3072;
   fc2 3072 x 768), the median of repetitions over about two seconds each, measured before and
   again after the scoring. The largest of the four is what scoring is compared with.
2. Scoring: ``oodcorr.jobs.scoring.score`` over the first N RTE validation examples, tokenised
   as the workflow does, with the lean model (modeling/plain_torch.py), batched (a) as the landed code
   did (batches as full as batch_size 32 and max_tokens 16,384 allow) and (b) as a CPU job does
   now (``device_batching``: at most 512 padded tokens per thread, cut by cost). Useful GFLOP/s
   counts the examples' own tokens only (2 x the layers' linear parameters per token, causal
   attention 2 d n (n + 1) per layer, the LM head at the one scored position); padded GFLOP/s
   counts what the batches computed, padding included.
3. LoRA (r 8 on q_proj, v_proj, random B): scored with peft's adapter layers (transformers'
   model, the landed path) and folded into the lean model's weights, against the plain model,
   all with (b)'s batches; the FLOPs counted are the plain model's in every case.
4. ``--sweep``: useful GFLOP/s for token budgets from 128 to 4,096 per thread (what sized (b)).

On a shared machine another process lowers either measurement: ``--interleave`` also measures a
short GEMM right before every scoring repetition and reports the median of the per-repetition
ratios; ``cpu_per_wall`` (CPU seconds per wall second) falls below the threads when the process
waited for a core; ``--max-load`` waits for a quieter machine before each repetition.

Predictions are compared: (b) against (a) and folded against peft (identical per example; the
largest logit difference).

    .venv/bin/python benchmarks/scoring_throughput.py --threads 1 2 --limits 64 160 --reps 3 \\
        --sweep --out benchmarks/latest/scoring_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from lmeval_common import ARCHS, DEFAULT_TEMPLATE, DEFAULT_TESTSET, LABELS, build_model, load_records

VERBALISERS = {"entailment": " Yes", "non-entailment": " No"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--limits", type=int, nargs="+", default=[64, 160], help="first N RTE validation examples")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sweep", action="store_true", help="also useful GFLOP/s per token budget (the first limit)")
    p.add_argument("--no-lora", action="store_true")
    p.add_argument("--only-now", action="store_true", help="only the plain model with the CPU rule's batches")
    p.add_argument("--interleave", action="store_true", help="a GEMM measured before every scoring repetition too")
    p.add_argument("--max-load", type=float, help="before each repetition, wait for the 1-minute load to fall below")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out")
    return p.parse_args(argv)


def timed(fn, min_s: float = 2.0, min_reps: int = 3) -> float:
    """Median seconds of ``fn()`` over at least ``min_reps`` calls and ``min_s`` seconds."""
    fn()
    ts, end = [], time.perf_counter() + min_s
    while len(ts) < min_reps or time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def wait_for_quiet(max_load: float | None, max_wait: float = 300.0) -> None:
    """Wait (at most ``max_wait`` s) until the 1-minute load average is under ``max_load``."""
    end = time.time() + max_wait
    while max_load is not None and os.getloadavg()[0] >= max_load and time.time() < end:
        time.sleep(5)


def gemm(torch, min_s: float = 2.0) -> dict:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2048, 2048, generator=gen)
    b = torch.randn(2048, 2048, generator=gen)
    square = 2 * 2048**3 / timed(lambda: torch.mm(a, b), min_s) / 1e9
    d, f, m = 768, 3072, 1024
    x, h = torch.randn(m, d, generator=gen), torch.randn(m, f, generator=gen)
    w, w1, w2 = torch.randn(d, d, generator=gen), torch.randn(f, d, generator=gen), torch.randn(d, f, generator=gen)

    def layer():
        for _ in range(4):
            torch.mm(x, w.t())
        torch.mm(x, w1.t())
        torch.mm(h, w2.t())

    per_layer = 2 * m * (4 * d * d + 2 * d * f) / timed(layer, min_s) / 1e9
    return {"square_2048": round(square, 1), "opt125m_layer_1024_rows": round(per_layer, 1)}


def flops(n: int, cfg: dict, vocab: int) -> float:
    """The work of scoring one sequence of n positions: linear layers, causal attention, the head at one position."""
    d, layers, ffn = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["ffn_dim"]
    linear = layers * (4 * d * d + 2 * d * ffn)
    return 2 * linear * n + layers * 2 * d * n * (n + 1) + 2 * d * vocab


def batches_flops(lengths, batches, cfg, vocab) -> float:
    return sum(len(b) * flops(max(lengths[i] for i in b), cfg, vocab) for b in batches)


def main(argv=None) -> dict:
    args = parse_args(argv)
    workdir = Path(args.workdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from oodcorr.jobs.scoring import device_batching, length_batches, score
    from oodcorr.modeling import plain_torch
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_checkpoint, load_folded, load_tokenizer

    model_dir = build_model(workdir, arch="125m", tokenizer_vocab=8000, model_vocab=50272, max_length=2048)
    cfg, vocab = ARCHS["125m"], json.loads((model_dir / "config.json").read_text())["vocab_size"]
    spec = {"name": "bench-opt", "path": str(model_dir), "dtype": "float32"}
    tok = load_tokenizer(spec)
    _, recs = load_records(DEFAULT_TESTSET)
    prompt = {"template": DEFAULT_TEMPLATE, "verbalisers": VERBALISERS}
    ids, _, extra = get("pattern").encode(tok, recs, labels=LABELS, prompt=prompt, max_length=2048, model_name="b")
    plain = plain_torch.build(model_dir)
    models = {"plain (plain_torch)": plain}
    if not args.no_lora:
        from lora_series_vs_lmeval import lora_series

        lora = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
        ck = lora_series(model_dir, workdir, lora, 1, 0.02)[0]["checkpoint"]
        os.environ["OODCORR_LEAN"] = "0"
        models["LoRA, peft layers (landed)"] = load_checkpoint(spec, ck, for_scoring=True)
        os.environ["OODCORR_LEAN"] = "1"
        folded, _, why = load_folded(spec, ck)
        assert folded is not None, why
        models["LoRA, folded (plain_torch)"] = folded
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "model": dict(cfg, vocab=vocab, dir=str(model_dir)),
        "threads": {},
    }
    for threads in args.threads:
        torch.set_num_threads(threads)
        load0 = os.getloadavg()
        g = gemm(torch)
        peak = max(g.values())
        res = {"gemm_gflops": g, "load_before": load0, "limits": {}}
        print(f"threads {threads}: GEMM {g} GFLOP/s (load {load0[0]:.2f})", flush=True)
        warm = {
            "input_ids": ids[:8],
            "method": "pattern",
            "label_names": LABELS,
            "pad_id": tok.pad_token_id,
            "extra": extra,
        }
        for model in models.values():  # untimed: first calls allocate and pick their kernels
            score(model, warm, 8, 4096)
        for n in args.limits:
            cache = {
                "input_ids": ids[:n],
                "method": "pattern",
                "label_names": LABELS,
                "pad_id": tok.pad_token_id,
                "extra": extra,
            }
            lengths = [len(x) for x in cache["input_ids"]]
            useful = sum(flops(x, cfg, vocab) for x in lengths)
            rows, budget, overhead = device_batching("cpu", threads, 32, 16384)
            ways = {
                "landed: full batches (32, 16384)": (32, 16384, None),
                f"now: {budget} tokens, cut by cost": (rows, budget, overhead),
            }
            per = {"tokens": sum(lengths), "useful_gflop": round(useful / 1e9, 2), "runs": {}}
            logits = {}
            for way, (b, t, o) in ways.items():
                batches = length_batches(lengths, t, b, o)
                padded = batches_flops(lengths, batches, cfg, vocab)
                for name, model in models.items():
                    if name != "plain (plain_torch)" and not way.startswith("now"):
                        continue
                    if args.only_now and (name != "plain (plain_torch)" or not way.startswith("now")):
                        continue
                    load = os.getloadavg()[0]
                    times, ratios, cpu = [], [], []
                    for _ in range(args.reps):
                        wait_for_quiet(args.max_load)
                        g_rep = max(gemm(torch, min_s=0.5).values()) if args.interleave else None
                        t0, c0 = time.perf_counter(), time.process_time()
                        logits[(way, name)] = score(model, cache, b, t, overhead=o)
                        times.append(time.perf_counter() - t0)
                        cpu.append(time.process_time() - c0)
                        if g_rep:
                            ratios.append(useful / times[-1] / 1e9 / g_rep)
                    sec = statistics.median(times)
                    row = {
                        "seconds": round(sec, 3),
                        "batches": len(batches),
                        "padding": round(
                            1 - sum(lengths) / sum(len(x) * max(lengths[i] for i in x) for x in batches), 4
                        ),
                        "useful_gflops": round(useful / sec / 1e9, 1),
                        "padded_gflops": round(padded / sec / 1e9, 1),
                        "useful_of_gemm": round(useful / sec / 1e9 / peak, 3),
                        "load": round(load, 2),
                        # CPU seconds per wall second (at most the threads): lower means the process waited for a core
                        "cpu_per_wall": round(sum(cpu) / sum(times), 2),
                    }
                    if ratios:  # each repetition against a GEMM measured just before it
                        row["useful_of_gemm_interleaved"] = round(statistics.median(ratios), 3)
                        row["interleaved_ratios"] = [round(r, 3) for r in ratios]
                    per["runs"][f"{way} | {name}"] = row
                    print(f"  n {n} {way:<36} {name:<28} {row}", flush=True)
            new = next(k for k in logits if k[0].startswith("now") and k[1] == "plain (plain_torch)")
            old = next((k for k in logits if not k[0].startswith("now")), None)
            cmp = {"now vs landed batching (plain)": (logits[new], logits[old])} if old else {}
            if not args.no_lora and not args.only_now:
                cmp["folded vs peft (LoRA)"] = (
                    logits[(new[0], "LoRA, folded (plain_torch)")],
                    logits[(new[0], "LoRA, peft layers (landed)")],
                )
            per["predictions"] = {
                k: {
                    "identical": int((a.argmax(-1) == b.argmax(-1)).sum()),
                    "of": n,
                    "max_abs_logit_diff": float((a - b).abs().max()),
                    "bit_identical": bool(torch.equal(a, b)),
                }
                for k, (a, b) in cmp.items()
            }
            print(f"  n {n} predictions: {per['predictions']}", flush=True)
            res["limits"][str(n)] = per
        # the GEMM again after the scoring: the larger of the two is what scoring is compared with
        # (another process on the machine during one of them lowers it, and so would flatter the ratio)
        g2 = gemm(torch)
        res["gemm_gflops_after"] = g2
        print(f"threads {threads}: GEMM after {g2} GFLOP/s (load {os.getloadavg()[0]:.2f})", flush=True)
        best = max(peak, *g2.values())
        for per in res["limits"].values():
            for row in per["runs"].values():
                row["useful_of_gemm"] = round(row["useful_gflops"] / best, 3)
        res["gemm_compared"] = best
        if args.sweep:
            n = args.limits[0]
            cache = {
                "input_ids": ids[:n],
                "method": "pattern",
                "label_names": LABELS,
                "pad_id": tok.pad_token_id,
                "extra": extra,
            }
            lengths = [len(x) for x in cache["input_ids"]]
            useful = sum(flops(x, cfg, vocab) for x in lengths)
            res["sweep"] = {}
            for per_thread in (128, 256, 512, 1024, 2048, 4096):
                t = per_thread * threads
                times = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    score(plain, cache, 32, t, overhead=32.0 * threads)
                    times.append(time.perf_counter() - t0)
                sec = statistics.median(times)
                res["sweep"][per_thread] = {
                    "useful_gflops": round(useful / sec / 1e9, 1),
                    "useful_of_gemm": round(useful / sec / 1e9 / best, 3),
                }
                print(f"  sweep n {n}: {per_thread} tokens/thread: {res['sweep'][per_thread]}", flush=True)
        res["load_after"] = os.getloadavg()
        out["threads"][str(threads)] = res
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
