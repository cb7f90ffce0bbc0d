"""Multi-GPU finetuning: the `accelerate launch` command built for a model entry (dry run)."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oodcorr.jobs import multi_gpu
from oodcorr.planning.config import Experiment
from oodcorr.planning.finetune_job import FinetuneJob
from oodcorr.planning.schema import fill_defaults

from helpers import REPO, micro_config

FSDP_MODEL = {
    "name": "big",
    "hub": "org/big-model",
    "revision": "abc123",
    "dtype": "bfloat16",
    "distributed": {
        "strategy": "fsdp",
        "gpus": 4,
        "fsdp": {"transformer_layer_cls_to_wrap": "LlamaDecoderLayer", "activation_checkpointing": True},
    },
}


def _config(model):
    cfg = micro_config()
    cfg["models"].append(copy.deepcopy(model))
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return cfg


def test_fsdp_launch_command_exact():
    cfg = _config(FSDP_MODEL)
    entry = next(m for m in cfg["models"] if m["name"] == "big")
    argv = multi_gpu.launch_argv(
        entry["distributed"],
        "/runs/big/distributed_args.json",
        mixed_precision="bf16",
        threads=8,
        port=29811,
        python="/venv/bin/python",
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--num_processes",
        "4",
        "--main_process_port",
        "29811",
        "--mixed_precision",
        "bf16",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
        "8",
        "--use_fsdp",
        "--fsdp_version",
        "1",
        "--fsdp_sharding_strategy",
        "FULL_SHARD",
        "--fsdp_auto_wrap_policy",
        "TRANSFORMER_BASED_WRAP",
        "--fsdp_transformer_layer_cls_to_wrap",
        "LlamaDecoderLayer",
        "--fsdp_state_dict_type",
        "FULL_STATE_DICT",
        "--fsdp_use_orig_params",
        "true",
        "--fsdp_sync_module_states",
        "true",
        "--fsdp_offload_params",
        "false",
        "--fsdp_activation_checkpointing",
        "true",
        "--module",
        "oodcorr.jobs.multi_gpu",
        "/runs/big/distributed_args.json",
    ]


def test_deepspeed_launch_command_exact():
    dist = {
        "strategy": "deepspeed",
        "gpus": 2,
        "deepspeed": {"zero_stage": 2, "offload_optimizer_device": "cpu", "gradient_clipping": 1.0},
    }
    cfg = _config(dict(FSDP_MODEL, dtype="float32", distributed=dist))
    entry = next(m for m in cfg["models"] if m["name"] == "big")
    argv = multi_gpu.launch_argv(
        entry["distributed"],
        "a.json",
        port=1234,
        python="py",
        mixed_precision="no",
    )
    assert argv == [
        "py",
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--num_processes",
        "2",
        "--main_process_port",
        "1234",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
        "1",
        "--use_deepspeed",
        "--zero_stage",
        "2",
        "--offload_optimizer_device",
        "cpu",
        "--offload_param_device",
        "none",
        "--zero3_init_flag",
        "false",
        "--zero3_save_16bit_model",
        "true",
        "--gradient_clipping",
        "1.0",
        "--module",
        "oodcorr.jobs.multi_gpu",
        "a.json",
    ]


def test_launcher_accepts_every_flag_we_pass():
    """accelerate's own parser (the pinned version) knows every option in both commands."""
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    for dist in (
        FSDP_MODEL["distributed"],
        {"strategy": "deepspeed", "gpus": 2, "deepspeed": {"gradient_clipping": 1.0}},
    ):
        argv = multi_gpu.launch_argv(dist, "a.json", threads=2)
        args = parser.parse_args(argv[3:])
        assert args.num_processes == dist["gpus"] and args.module is True
        assert args.training_script == "oodcorr.jobs.multi_gpu" and args.training_script_args == ["a.json"]


def test_schema_refuses_unknown_strategy_and_flag_injection():
    with pytest.raises(Exception, match="strategy"):
        _config(dict(FSDP_MODEL, distributed={"strategy": "megatron", "gpus": 2}))
    with pytest.raises(Exception, match="pattern|does not match"):
        _config(
            dict(
                FSDP_MODEL,
                distributed={"strategy": "fsdp", "gpus": 2, "fsdp": {"transformer_layer_cls_to_wrap": "X --use_cpu"}},
            )
        )


def test_sharding_settings_rerun_nothing_and_set_the_jobs_gpus():
    cfg = _config(FSDP_MODEL)
    exp = Experiment(cfg, REPO)
    assert "distributed" not in exp.model_entry("big").params()  # evaluation and finetune params unchanged
    plain = copy.deepcopy(cfg)
    del next(m for m in plain["models"] if m["name"] == "big")["distributed"]
    assert Experiment(plain, REPO).model_entry("big").params() == exp.model_entry("big").params()


def _job(tmp_path, **over) -> FinetuneJob:
    """A job for the launching side (nothing is trained): model ``big``, run folder ``tmp_path/run``."""
    kw = {
        "model_spec": {"name": "big", "dtype": "float32"},
        "built_model_dir": None,
        "train_path": "t.jsonl",
        "labels": ["a", "b"],
        "prompt": {},
        "finetune": {"batch_size": 8, "learning_rate": 1e-4, "max_length": 64, "bf16": True},
        "n_train": 8,
        "seed": 0,
        "steps": [0, 4],
        "max_steps": 4,
        "run_dir": str(tmp_path / "run"),
        "manifest_path": str(tmp_path / "run/manifest.json"),
    }
    return FinetuneJob(**(kw | over))


def test_finetune_job_dry_run_claims_devices_and_launches(tmp_path, monkeypatch):
    """run_distributed on 4 simulated GPUs: narrows CUDA_VISIBLE_DEVICES, writes the args, runs the argv."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")
    monkeypatch.setenv("OODCORR_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(multi_gpu, "_free_port", lambda: 29999)
    from oodcorr.core import gpus

    monkeypatch.setattr(gpus, "_HELD", [])  # this process's claims end with the test
    seen = {}

    def fake_run(argv, stdout=None, stderr=None):
        assert isinstance(argv, list)  # an argument list, never a shell string
        seen["argv"], seen["cvd"] = argv, multi_gpu.os.environ["CUDA_VISIBLE_DEVICES"]
        (tmp_path / "run/manifest.json").write_text(json.dumps({"trained": True}))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(multi_gpu.subprocess, "run", fake_run)
    job = _job(tmp_path, report_to=["tensorboard"], threads=5)
    dist = {"strategy": "fsdp", "gpus": 4}
    info = multi_gpu.run_distributed(dist, job, log_path=str(tmp_path / "ft.log"), threads=3)
    args_file = tmp_path / "run/distributed_args.json"
    assert info == {"trained": True} and seen["cvd"] == "0,1,2,3"
    # bf16 from finetune.bf16 (the model is float32)
    assert seen["argv"] == multi_gpu.launch_argv(dist, args_file, mixed_precision="bf16", threads=3, port=29999)
    shipped = json.loads(args_file.read_text())
    assert shipped["finetune"] == job.finetune and shipped["report_to"] == ["tensorboard"]
    assert FinetuneJob.from_json(args_file.read_text()) == job  # each launched process reads the same job
    assert seen["argv"][0] == sys.executable
    for claim in gpus._HELD:
        claim.release()


def test_deepspeed_without_the_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(multi_gpu.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="deepspeed package is not installed"):
        multi_gpu.run_distributed({"strategy": "deepspeed", "gpus": 2}, _job(tmp_path), log_path=None)


@pytest.mark.slow
def test_two_processes_train_one_run_and_rank0_writes_it(tmp_path, tiny_models):
    """The module entry point under torch's launcher, 2 processes over gloo on the CPU (DDP).

    The ranks share the run folder: rank 0 prepares it while the other waits, only rank 0
    writes checkpoint manifests and the job's manifest, and both train one model together.
    Rank 1 is slow to write its RNG state (a test hook): rank 0 records it only once it is whole.
    """
    from hooks.sitecustomize import LATE_RNG_ENV, PYTHONPATH_ENTRY

    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.jobs.checkpoints import verify_checkpoint
    from oodcorr.modeling import synthetic

    from helpers import LABELS, PROMPT

    write_jsonl_atomic(tmp_path / "train.jsonl", synthetic.generate("in-domain", 200, 0, split="train"))
    run = tmp_path / "run"
    job = FinetuneJob(
        model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
        built_model_dir=str(tiny_models["opt"]),
        train_path=str(tmp_path / "train.jsonl"),
        labels=LABELS,
        prompt=PROMPT,
        finetune={"batch_size": 8, "learning_rate": 3e-3, "max_length": 64},
        n_train=64,
        seed=0,
        steps=[0, 10, 20],
        max_steps=20,
        run_dir=str(run),
        manifest_path=str(run / "manifest.json"),
    )
    (tmp_path / "args.json").write_text(job.to_json())
    env = dict(multi_gpu.os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", **{LATE_RNG_ENV: "3"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHONPATH_ENTRY, env.get("PYTHONPATH")) if p)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(multi_gpu._free_port()),
            "-m",
            multi_gpu.ENTRY_MODULE,
            str(tmp_path / "args.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout + res.stderr
    # 64 examples, 8 per process per step, 2 processes: 4 steps an epoch, so 20 steps are 5 epochs
    assert "'epoch': '5'" in out  # (one process alone would stop at epoch 2.5)
    info = json.loads((run / "manifest.json").read_text())
    assert [c["step"] for c in info["checkpoints"]] == [0, 10, 20] and info["trained"]
    for step in (0, 10, 20):
        assert verify_checkpoint(run / "checkpoints" / f"checkpoint-{step}")[0]
    assert not list(run.glob("checkpoints.stale-*")) and not list((run / "checkpoints").glob(".incomplete-*"))


@pytest.mark.slow
def test_dry_run_gives_the_finetune_job_the_models_gpus(tmp_path):
    cfg = micro_config()
    cfg["models"][0]["distributed"] = {"strategy": "fsdp", "gpus": 2}
    cfg["models"][0]["resources"] = {"finetune": {"gpu_model": "h100"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            str(Path(sys.executable).with_name("snakemake")),
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "c.yaml"),
            "-n",
            "--cores",
            "1",
            "results/micro/finetune/micro-opt/synth/n64/seed0/manifest.json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    block = res.stdout.split("rule finetune:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"\bgpu=2\b", block) and "gpu_model=h100" in block, block


HOLDER = """
import sys, time
from oodcorr.core.locks import hold
with hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(300)
"""


def _hold_in_another_process(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_launching_job_refuses_a_run_another_finetune_holds(tmp_path, monkeypatch):
    from oodcorr.core.locks import FolderInUse

    monkeypatch.setattr(multi_gpu.subprocess, "run", lambda *a, **k: pytest.fail("launched anyway"))
    holder = _hold_in_another_process(tmp_path / "run")
    try:
        with pytest.raises(FolderInUse, match=rf"PID {holder.pid} on host"):
            multi_gpu.run_distributed({"strategy": "fsdp", "gpus": 2}, _job(tmp_path), log_path=None)
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "run/distributed_args.json").exists()


@pytest.mark.slow
def test_rank0_of_a_launch_takes_the_run_lock(tmp_path, tiny_models):
    """Launched directly (no launching job to check first), rank 0 itself refuses a held run folder."""
    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.modeling import synthetic

    from helpers import LABELS, PROMPT

    write_jsonl_atomic(tmp_path / "train.jsonl", synthetic.generate("in-domain", 200, 0, split="train"))
    run = tmp_path / "run"
    job = FinetuneJob(
        model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
        built_model_dir=str(tiny_models["opt"]),
        train_path=str(tmp_path / "train.jsonl"),
        labels=LABELS,
        prompt=PROMPT,
        finetune={"batch_size": 8, "learning_rate": 3e-3, "max_length": 64},
        n_train=64,
        seed=0,
        steps=[0, 10],
        max_steps=10,
        run_dir=str(run),
        manifest_path=str(run / "manifest.json"),
    )
    (tmp_path / "args.json").write_text(job.to_json())
    holder = _hold_in_another_process(run)
    env = dict(multi_gpu.os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                "2",
                "--master_port",
                str(multi_gpu._free_port()),
                "-m",
                multi_gpu.ENTRY_MODULE,
                str(tmp_path / "args.json"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        holder.kill()
        holder.wait()
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"is in use by another finetune (it holds {run / 'finetune.lock'}): PID {holder.pid}" in out, out[-3000:]
    assert not (run / "checkpoints").exists() and not (run / "run_identity.json").exists()
