"""Our evaluator against lm-evaluation-harness: same model, testset, prompt and verbalisers.

One process loads the model once for each side, then alternates timed repetitions
(ours first in even repetitions, lm-eval first in odd ones) and prints examples/s
for each, the ratio, and how many per-example predictions agree. Both sides are
timed from text records to per-example predictions with the model already
loaded: ours includes tokenisation (which the workflow caches per tokenizer x
testset, so this is conservative); lm-eval's includes building its task and
requests. The "core" columns time only the scoring call on each side
(oodcorr.jobs.scoring.score vs HFLM._loglikelihood_tokens).

lm-eval runs offline from a local YAML task over a local JSONL file, without its
response cache (use_cache=None) or request cache (cache_requests=False), and with
its datasets cache in --workdir. Run it from the benchmark venv (benchmarks/README.md):

    /tmp/bench-venv/bin/python benchmarks/evaluator_vs_lmeval.py --reps 5

--skip-lmeval times our evaluator alone (e.g. on a GPU, with --arch 1b --dtype bfloat16).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from lmeval_common import (
    ARCHS,
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data",
        default=str(DEFAULT_TESTSET),
        help="a JSONL testset in the oodcorr record format (premise, hypothesis, label)",
    )
    p.add_argument("--synthetic", metavar="SHIFT", help="use a synthetic testset of this shift instead of --data")
    p.add_argument("--n", type=int, default=600, help="examples of --synthetic")
    p.add_argument("--limit", type=int, help="use only the first LIMIT examples")
    p.add_argument("--template", default=DEFAULT_TEMPLATE)
    p.add_argument(
        "--verbalisers", nargs=2, default=list(DEFAULT_VERBALISERS), metavar=("ENTAILMENT", "NON_ENTAILMENT")
    )
    p.add_argument("--arch", choices=sorted(ARCHS), default="small")
    p.add_argument("--tokenizer-vocab", type=int, default=8000, help="BPE vocabulary trained for the tokenizer")
    p.add_argument(
        "--model-vocab",
        type=int,
        default=50272,
        help="rows of the embedding / LM head (50272, as in facebook/opt-*: the head's cost is real)",
    )
    p.add_argument("--max-length", type=int, default=1024, help="no prompt is truncated below this")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=16384, help="our evaluator's padded tokens per batch")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--skip-lmeval", action="store_true")
    p.add_argument("--peak-tflops", type=float, help="the device's dense peak, to report the fraction reached")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out", help="write every repetition's numbers to this JSON file")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    workdir = Path(args.workdir)
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(workdir / "hf-home"),
        "HF_DATASETS_CACHE": str(workdir / "hf-datasets"),
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ[k] = v
    import torch

    from oodcorr.jobs.scoring import score
    from oodcorr.modeling.loading import load_model, load_tokenizer
    from oodcorr.modeling.prompting import encode_prompts, format_prompt, verbaliser_ids

    torch.set_num_threads(args.threads)
    model_dir = build_model(
        workdir,
        arch=args.arch,
        tokenizer_vocab=args.tokenizer_vocab,
        model_vocab=args.model_vocab,
        max_length=args.max_length,
    )
    name, recs = load_records(args.data, args.limit, args.synthetic, args.n)
    spec = {"name": "bench-opt", "path": str(model_dir), "dtype": args.dtype}
    tok = load_tokenizer(spec)
    model = load_model(spec, None, args.device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    verbs = dict(zip(LABELS, args.verbalisers))
    verb = verbaliser_ids(tok, verbs, LABELS, "bench-opt")
    gold = [LABELS.index(r["label"]) for r in recs]
    prompts = [format_prompt(args.template, r["premise"], r["hypothesis"]) for r in recs]
    ids0, n_trunc = encode_prompts(tok, recs, args.template, args.max_length)
    n_tokens = sum(map(len, ids0))
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "testset": name,
        "n": len(recs),
        "tokens": n_tokens,
        "mean_tokens": n_tokens / len(recs),
        "n_truncated": n_trunc,
        "arch": args.arch,
        "model": {
            **ARCHS[args.arch],
            "vocab": args.model_vocab,
            "tokenizer_vocab": len(tok),
            "n_params": n_params,
            "attn_implementation": model.config._attn_implementation,
        },
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
    }
    print(json.dumps({k: v for k, v in info.items()}, indent=1))
    sync = torch.cuda.synchronize if torch.device(args.device).type == "cuda" else (lambda: None)

    def run_ours(limit=None):
        t0 = time.perf_counter()
        ids, _ = encode_prompts(tok, recs[:limit], args.template, args.max_length)
        cache = {
            "input_ids": ids,
            "method": "pattern",
            "label_names": LABELS,
            "pad_id": tok.pad_token_id,
            "extra": {"verbaliser_ids": verb},
        }
        t1 = time.perf_counter()
        logits = score(model, cache, args.batch_size, args.max_tokens, args.device)
        sync()
        t2 = time.perf_counter()
        return {
            "s": t2 - t0,
            "core_s": t2 - t1,
            "pred": logits.argmax(-1).tolist(),
            "margin": (logits[:, 0] - logits[:, 1]).tolist(),
        }

    run_lm = None
    if not args.skip_lmeval:
        import logging

        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager

        logging.getLogger("lm_eval").setLevel(logging.WARNING)
        info["lm_eval"] = lm_eval.__version__ if hasattr(lm_eval, "__version__") else "?"
        tdir = write_lmeval_task(workdir, prompts, gold, args.verbalisers)
        lm = HFLM(
            pretrained=str(model_dir),
            tokenizer=str(model_dir),
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            max_length=args.max_length,
        )
        tm = TaskManager(include_path=str(tdir), include_defaults=False)
        core = {"s": 0.0}
        inner = lm._loglikelihood_tokens

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                sync()
                core["s"] += time.perf_counter() - t

        lm._loglikelihood_tokens = timed

        def run_lm(limit=None):
            core["s"] = 0.0
            t0 = time.perf_counter()
            out = lm_eval.simple_evaluate(
                model=lm,
                tasks=["oodcorr_bench"],
                task_manager=tm,
                num_fewshot=0,
                use_cache=None,
                cache_requests=False,
                log_samples=True,
                bootstrap_iters=0,
                verbosity="WARNING",
                limit=limit,
            )
            t1 = time.perf_counter()
            samples = sorted(out["samples"]["oodcorr_bench"], key=lambda s: s["doc_id"])
            if [s["doc_id"] for s in samples] != list(range(limit or len(recs))):
                raise RuntimeError("lm-eval returned a different set of documents")
            lls = [lmeval_choice_scores(s) for s in samples]
            pred = [max(range(len(x)), key=x.__getitem__) for x in lls]
            return {"s": t1 - t0, "core_s": core["s"], "pred": pred, "margin": [x[0] - x[1] for x in lls]}

    # warm-up on a few examples (first-call costs: thread pools, lazy imports, the datasets cache), not timed
    run_ours(16)
    if run_lm:
        run_lm(16)
    reps = {"ours": [], "lmeval": []}
    for r in range(args.reps):
        order = [("ours", run_ours), ("lmeval", run_lm)] if r % 2 == 0 else [("lmeval", run_lm), ("ours", run_ours)]
        for side, fn in order:
            if fn is None:
                continue
            res = fn()
            reps[side].append(res)
            print(
                f"rep {r} {side:6s}: {len(recs) / res['s']:8.1f} examples/s "
                f"({res['s']:.2f} s; scoring call {res['core_s']:.2f} s)",
                flush=True,
            )
    summary = dict(info)
    for side, rs in reps.items():
        if not rs:
            continue
        summary[side] = {
            "examples_per_s": median_spread([len(recs) / x["s"] for x in rs]),
            "core_examples_per_s": median_spread([len(recs) / x["core_s"] for x in rs]),
            "tokens_per_s": statistics.median(n_tokens / x["core_s"] for x in rs),
        }
    ours_pred = reps["ours"][-1]["pred"]
    summary["accuracy_ours"] = sum(p == g for p, g in zip(ours_pred, gold)) / len(gold)
    if reps["lmeval"]:
        lm_pred, lm_margin = reps["lmeval"][-1]["pred"], reps["lmeval"][-1]["margin"]
        same = sum(a == b for a, b in zip(ours_pred, lm_pred))
        summary["identical_predictions"] = same / len(recs)
        summary["n_different"] = len(recs) - same
        # log-likelihood margins equal logit margins (the softmax normaliser cancels)
        summary["max_margin_diff"] = max(abs(a - b) for a, b in zip(reps["ours"][-1]["margin"], lm_margin))
        summary["ratio_median"] = (
            summary["ours"]["examples_per_s"]["median"] / summary["lmeval"]["examples_per_s"]["median"]
        )
        summary["core_ratio_median"] = (
            summary["ours"]["core_examples_per_s"]["median"] / summary["lmeval"]["core_examples_per_s"]["median"]
        )
    if args.peak_tflops:
        # forward FLOPs: 2 x (non-embedding parameters) per token, plus one LM-head row per example,
        # plus attention scores and values (4 x layers x hidden x length per token, causal half)
        a = ARCHS[args.arch]
        body = 2 * (n_params - args.model_vocab * a["hidden_size"] - (args.max_length + 10) * a["hidden_size"])
        attn = sum(2 * a["num_hidden_layers"] * a["hidden_size"] * len(x) * len(x) for x in ids0)
        flops = body * n_tokens + attn + 2 * a["hidden_size"] * args.model_vocab * len(recs)
        t = statistics.median(x["core_s"] for x in reps["ours"])
        summary["ours"]["tflops"] = flops / t / 1e12
        summary["ours"]["fraction_of_peak"] = flops / t / 1e12 / args.peak_tflops
    print("\nsummary:")
    for side in ("ours", "lmeval"):
        if side in summary:
            e = summary[side]["examples_per_s"]
            c = summary[side]["core_examples_per_s"]
            print(
                f"  {side:6s}: {e['median']:8.1f} examples/s median (min {e['min']:.1f}, max {e['max']:.1f}); "
                f"scoring call alone {c['median']:.1f}/s; {summary[side]['tokens_per_s']:.0f} tokens/s"
            )
    if "ratio_median" in summary:
        print(
            f"  ratio ours/lm-eval: {summary['ratio_median']:.2f}x end to end, "
            f"{summary['core_ratio_median']:.2f}x scoring call alone"
        )
        print(
            f"  identical predictions: {summary['identical_predictions']:.4f} "
            f"({summary['n_different']} of {len(recs)} differ); max |margin difference| "
            f"{summary['max_margin_diff']:.2e}"
        )
    if "tflops" in summary.get("ours", {}):
        print(
            f"  ours: {summary['ours']['tflops']:.1f} TFLOP/s = {summary['ours']['fraction_of_peak']:.1%} "
            f"of {args.peak_tflops} peak"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        slim = {k: v for k, v in summary.items()}
        Path(args.out).write_text(json.dumps(slim, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
