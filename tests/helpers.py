"""Constants and helpers the tests share (imported as ``from helpers import ...``).

conftest.py keeps only pytest's own business (fixtures, profiles, environment); anything a
test module imports by name lives here, so a reader finds it and a script outside pytest
(tests/gpu/device_check.py) can import it too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def smk(workdir, configfile, *args, timeout=900, env=None):
    """Run the real workflow (this checkout's Snakefile) in ``workdir`` with ``configfile``."""
    cmd = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=None if env is None else {**os.environ, **env}
    )


def planned_jobs(workdir, configfile, timeout=600, env=None) -> dict[str, int]:
    """Jobs per rule (and ``total``) in ``snakemake -n --quiet rules`` of ``configfile`` in ``workdir``."""
    res = smk(workdir, configfile, "-n", "--quiet", "rules", timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", res.stdout, re.M)}


LABELS = ["entailment", "non-entailment"]


def label_mode(name: str = "binary") -> dict:
    """A label mode from resources/label_modes.yaml, as the workflow passes it to the package."""
    modes = yaml.safe_load((REPO / "resources" / "label_modes.yaml").read_text())
    return dict(modes[name], name=name)


BINARY = label_mode("binary")
PROMPT = {
    "template": "{premise} Question: {hypothesis} Yes or No?",
    "verbalisers": {"entailment": " Yes", "non-entailment": " No"},
}

TINY_CONFIGS = {
    "opt": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "ffn_dim": 64,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 128,
    },
    "olmo2": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 128,
    },
}


def n_evaluations(plan) -> int:
    """Checkpoint x testset evaluations a plan asks for, whichever its unit (a run-unit job
    evaluates every checkpoint of its run)."""
    return sum(len(job.steps) for job in plan.eval_jobs)


def tokenised_testset(folder, tiny, spec, records, meta_doc, name="neg", max_length=128):
    """Testset ``name`` of ``records`` with its meta file ``meta_doc``, tokenised as the workflow does
    it (rule tokenize_testset), in ``folder``: (data file, meta file, tokenised cache)."""
    from oodcorr.core.io import write_json_atomic, write_jsonl_atomic
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    folder = Path(folder)
    data, meta, cache = folder / f"{name}.jsonl", folder / f"{name}.meta.json", folder / f"{name}.pt"
    write_jsonl_atomic(data, records)
    write_json_atomic(meta, meta_doc)
    tokenize_testset(
        model_spec=spec,
        tiny_dir=str(tiny),
        testset=name,
        data_path=str(data),
        data_meta=str(meta),
        labels=LABELS,
        prompt=PROMPT,
        max_length=max_length,
        out_path=str(cache),
    )
    return data, meta, cache


def finetune_job(data_dir, tiny_dir, run_dir, steps=(0, 5, 10, 15, 20), lora=None):
    """The finetune job the tests train: the tiny OPT model, 64 examples of a synthetic in-domain
    set (written once into ``data_dir``), checkpoints at ``steps`` of 20, into ``run_dir``."""
    from oodcorr.core.io import write_jsonl_atomic
    from oodcorr.modeling import synthetic
    from oodcorr.planning.finetune_job import FinetuneJob

    train = Path(data_dir) / "train.jsonl"
    if not train.exists():
        write_jsonl_atomic(train, synthetic.generate("in-domain", 200, 0, split="train"))
    ft = {"batch_size": 8, "learning_rate": 3e-3, "max_length": 64, "warmup_ratio": 0.1}
    if lora:
        ft["lora"] = lora
    run = Path(run_dir)
    return FinetuneJob(
        model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
        tiny_dir=str(tiny_dir),
        train_path=str(train),
        labels=LABELS,
        prompt=PROMPT,
        finetune=ft,
        n_train=64,
        seed=0,
        steps=list(steps),
        max_steps=20,
        run_dir=str(run),
        manifest_path=str(run / "manifest.json"),
        threads=1,
    )
