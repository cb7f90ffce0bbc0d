"""Finetuning on several GPUs of one node, for models that do not fit one GPU."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

from ..core.atomic_write import write_json_atomic
from ..core.gpus import claim_for_job
from ..core.io import read_json
from ..core.locks import check_free
from ..core.ranks import is_main_process
from ..planning.finetune_job import FinetuneJob, trains_in_bf16
from .finetune import finetune
from .series_checkpoint import MANIFEST_FIX

log = logging.getLogger(__name__)

ENTRY_MODULE = "oodcorr.jobs.multi_gpu"
ARGS_FILE = "distributed_args.json"  # the job, as JSON, in the run folder: what each launched process reads


def launch_argv(
    dist: dict,
    args_file: str | Path,
    *,
    mixed_precision: str = "no",
    threads: int = 1,
    port: int = 29500,
    python: str = sys.executable,
) -> list[str]:
    """The ``accelerate launch`` command for a model's ``distributed`` block, as an argument list."""
    opts = {
        "num_machines": "1",
        "num_processes": str(int(dist["gpus"])),
        "main_process_port": str(port),
        "mixed_precision": mixed_precision,
        "dynamo_backend": "no",
        "num_cpu_threads_per_process": str(threads),
    }
    if dist["strategy"] == "fsdp":  # (the schema allows fsdp and deepspeed)
        f = dist.get("fsdp") or {}
        opts |= {
            "use_fsdp": None,
            "fsdp_version": "1",
            "fsdp_sharding_strategy": f.get("sharding_strategy", "FULL_SHARD"),
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        }
        if f.get("transformer_layer_cls_to_wrap"):
            opts["fsdp_transformer_layer_cls_to_wrap"] = f["transformer_layer_cls_to_wrap"]
        # full (unsharded) weights at every checkpoint, so evaluation loads them like any model
        opts |= {
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_use_orig_params": "true",
            "fsdp_sync_module_states": "true",
            "fsdp_offload_params": str(bool(f.get("offload_params"))).lower(),
            "fsdp_activation_checkpointing": str(bool(f.get("activation_checkpointing"))).lower(),
        }
    else:
        d = dist.get("deepspeed") or {}
        opts |= {
            "use_deepspeed": None,
            "zero_stage": str(d.get("zero_stage", 3)),
            "offload_optimizer_device": d.get("offload_optimizer_device", "none"),
            "offload_param_device": d.get("offload_param_device", "none"),
            "zero3_init_flag": "false",
            "zero3_save_16bit_model": "true",
        }
        if d.get("gradient_clipping") is not None:
            opts["gradient_clipping"] = str(d["gradient_clipping"])
    argv = [python, "-m", "accelerate.commands.launch"]
    for name, value in opts.items():  # None: a flag without a value
        argv += [f"--{name}"] if value is None else [f"--{name}", value]
    return argv + ["--module", ENTRY_MODULE, str(args_file)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_distributed(dist: dict, job: FinetuneJob, *, log_path: str | None, threads: int = 1) -> dict:
    """Run ``finetune(job)`` under ``accelerate launch``; return rank 0's manifest."""
    if dist["strategy"] == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise RuntimeError(
            f"models[{job.name}].distributed.strategy is deepspeed, but the deepspeed package is not installed; "
            "install it or use strategy: fsdp"
        )
    check_free(job.run_dir)  # fail before the launch if another finetune holds the run; rank 0 takes the lock
    devices = claim_for_job(int(dist["gpus"]))  # also narrows CUDA_VISIBLE_DEVICES for the launch
    if not devices:
        raise RuntimeError(f"models[{job.name}].distributed asks for {dist['gpus']} GPU(s); this machine shows none")
    args_file = job.run_dir / ARGS_FILE
    write_json_atomic(args_file, job.to_dict())
    argv = launch_argv(
        dist,
        args_file,
        mixed_precision="bf16" if trains_in_bf16(job.model_entry, job.finetune) else "no",  # as in one process
        threads=threads,
        port=_free_port(),
    )
    log.info("launching %d processes on GPU(s) %s: %s", int(dist["gpus"]), ",".join(devices), argv)
    with open(log_path, "a", buffering=1) if log_path else contextlib.nullcontext() as out:
        res = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT if out else None)
    if res.returncode != 0:
        raise RuntimeError(f"accelerate launch exited with {res.returncode} (see {log_path or 'the output'})")
    return read_json(job.manifest_path, "the run's manifest", MANIFEST_FIX)


def main() -> None:
    """Each launched process (its one argument: the job's JSON): the single-process finetune, on its own GPU."""
    logging.basicConfig(
        level=logging.INFO if is_main_process() else logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s rank{os.environ.get('RANK', '0')} %(levelname)s %(name)s: %(message)s",
    )
    job = FinetuneJob.from_json(Path(sys.argv[1]).read_text())
    import torch  # torch stack: planning and the CLI never import it

    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: tests, several processes over gloo
    finetune(job.on(device=device, threads=int(os.environ.get("OMP_NUM_THREADS", "1"))))


if __name__ == "__main__":
    main()
