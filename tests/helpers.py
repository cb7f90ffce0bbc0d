"""Constants and helpers the tests share (imported as ``from helpers import ...``).

conftest.py keeps only pytest's own business (fixtures, profiles, environment); anything a
test module imports by name lives here, so a reader finds it and a script outside pytest
(tests/gpu/device_check.py) can import it too.
"""

from __future__ import annotations

import json
import logging
import os
import re
import runpy
import subprocess
import sys
import types
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
MICRO = REPO / "config" / "micro.yaml"
PRECIOUS = "my thesis, chapter 3\n"  # what the ``victim`` fixture (conftest.py) holds


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


def score_row(model, run, unit, testset, score, in_domain="id") -> dict:
    """One row of the analysis' long table, its columns in the order the readers give them."""
    return {"model": model, "in_domain": in_domain, "run": run, "unit": unit, "testset": testset, "score": score}


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


def micro_config() -> dict:
    """config/micro.yaml as shipped, a fresh dict each call (a test edits its own copy)."""
    return yaml.safe_load(MICRO.read_text())


# the micro run logs to every experiment tracker the scores go to (offline: tests/conftest.py)
TRACKERS = ["tensorboard", "mlflow", "wandb"]


def finished_micro(
    tmp_path_factory, name: str, unit: str, report_to=None, evaluated_in=None
) -> tuple[Path, dict, Path]:
    """config/micro.yaml (evaluation.unit ``unit``, finetune.report_to ``report_to``) run to the end, in a
    folder of the calling module's own: (folder, config, config file). The run is made once per test
    session, by the first pytest-xdist worker to ask (another waits for it), and copied with its times,
    so a module that edits its copy leaves the others theirs. ``evaluated_in``: the arguments
    (name, unit, report_to) of another such run that this one starts from, its evaluations and their
    logs deleted: its data, model, finetune and tokenised testsets are used as they are, and only the
    evaluations and what follows them run again."""
    import shutil

    wd = tmp_path_factory.mktemp(name)
    shutil.copytree(
        _made_micro(tmp_path_factory, name, unit, report_to, evaluated_in), wd, symlinks=True, dirs_exist_ok=True
    )
    return wd, yaml.safe_load((wd / "micro.yaml").read_text()), wd / "micro.yaml"


def _made_micro(tmp_path_factory, name, unit, report_to=None, evaluated_in=None) -> Path:
    """The session's one finished run of :func:`finished_micro`, made by the first worker to ask."""
    import shutil

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    made = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"finished-{name}"
    with FileLock(f"{made}.lock"):
        if not Path(f"{made}.done").exists():
            shutil.rmtree(made, ignore_errors=True)
            cfg = micro_config()
            if evaluated_in:
                shutil.copytree(_made_micro(tmp_path_factory, *evaluated_in), made, symlinks=True)
                for evaluated in ("eval", "logs/eval"):
                    shutil.rmtree(made / "results" / cfg["experiment"] / evaluated)
            else:
                made.mkdir()
            cfg["evaluation"]["unit"] = unit
            if report_to:
                cfg["finetune"]["report_to"] = report_to
            (made / "micro.yaml").write_text(yaml.safe_dump(cfg))
            res = smk(made, made / "micro.yaml")
            assert res.returncode == 0, res.stderr[-5000:]
            Path(f"{made}.done").touch()
    return made


def copy_run(run, tmp_path, name) -> Path:
    """A copy of a finished run's folder (``run`` as :func:`finished_micro` gives it), with its times."""
    import shutil

    wd = tmp_path / name
    shutil.copytree(run[0], wd, symlinks=True)
    return wd


def job_counts(dry_run_stdout: str) -> dict:
    """Jobs per rule in the "Job stats" table of a Snakemake run's output (``total`` left out)."""
    block = dry_run_stdout.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", block, re.M) if m.group(1) != "total"
    }


def micro_plan(config: dict | None = None):
    """The plan of config/micro.yaml (or of ``config``, an edited copy of it) as the Snakefile
    builds it: :func:`oodcorr.planning.plan.load` from the repository root."""
    from oodcorr.planning.plan import load

    return load(micro_config() if config is None else config, REPO, [MICRO])


FINETUNE_STEPS = [0, 5, 10, 15, 20]


def finetune_job(tmp_path, built_model_dir, name, lora=None):
    """A short finetune of the tiny OPT model in ``tmp_path / name`` (``name`` may be a whole path
    elsewhere; checkpoints at :data:`FINETUNE_STEPS`, 20 steps of 64 synthetic examples written once
    into ``tmp_path``), ``lora`` its adapter block if any."""
    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.modeling import synthetic
    from oodcorr.planning.finetune_job import FinetuneJob

    train = Path(tmp_path) / "train.jsonl"
    if not train.exists():
        write_jsonl_atomic(train, synthetic.generate("in-domain", 200, 0, split="train"))
    ft = {"batch_size": 8, "learning_rate": 3e-3, "max_length": 64, "warmup_ratio": 0.1}
    if lora:
        ft["lora"] = lora
    run = Path(tmp_path) / name
    return FinetuneJob(
        model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
        built_model_dir=str(built_model_dir),
        train_path=str(train),
        labels=LABELS,
        prompt=PROMPT,
        finetune=ft,
        n_train=64,
        seed=0,
        steps=FINETUNE_STEPS,
        max_steps=20,
        run_dir=str(run),
        manifest_path=str(run / "manifest.json"),
        threads=1,
    )


def checkpoint_weights(run_dir, step) -> dict:
    """The tensors of checkpoint ``step`` that a finetune in ``run_dir`` saved (its first safetensors file)."""
    from safetensors.torch import load_file

    d = Path(run_dir) / "checkpoints" / f"checkpoint-{step}"
    files = sorted(d.glob("*.safetensors"))
    assert files, d
    return load_file(files[0])


SCRIPTS = REPO / "workflow" / "scripts"


class Wildcards(dict):
    """Snakemake's wildcards: a mapping whose items are attributes too."""

    __getattr__ = dict.__getitem__


def run_rule_script(name: str, tmp_path: Path, **fields):
    """Run a rule's script as Snakemake would, with a stand-in ``snakemake`` object; returns the
    message of the ``sys.exit`` it ends with (None if it ends normally)."""
    sm = types.SimpleNamespace(log=[str(tmp_path / f"{name}.log")], config={}, wildcards=types.SimpleNamespace())
    for k, v in fields.items():
        setattr(sm, k, v)
    try:
        runpy.run_path(str(SCRIPTS / f"{name}.py"), init_globals={"snakemake": sm}, run_name="__main__")
    except SystemExit as e:
        return str(e.code)
    finally:
        logging.getLogger().handlers.clear()  # setup_logging added a file handler for the job's log
        sys.excepthook = sys.__excepthook__  # start_job set the job's own
    return None


def truncated_json(path: Path, doc: dict) -> Path:
    """``doc`` as JSON in ``path``, cut in half (a write a kill or a full disk stopped)."""
    text = json.dumps(doc, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text[: len(text) // 2])
    return path


def synthetic_testset(tmp_path, tiny, spec, task, n, seed):
    """A synthetic testset ``neg`` of ``n`` examples, tokenised as the workflow does it:
    (data file, meta file, tokenised cache)."""
    from oodcorr.modeling import synthetic

    return tokenised_testset(
        tmp_path, tiny, spec, synthetic.generate(task, n, seed), {"fingerprint": "f", "records_sha256": "r"}
    )


def tokenised_testset(folder, tiny, spec, records, meta_doc, name="neg", max_length=128):
    """Testset ``name`` of ``records`` with its meta file ``meta_doc``, tokenised as the workflow does
    it (rule tokenize_testset), in ``folder``: (data file, meta file, tokenised cache)."""
    from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    folder = Path(folder)
    data, meta, cache = folder / f"{name}.jsonl", folder / f"{name}.meta.json", folder / f"{name}.pt"
    write_jsonl_atomic(data, records)
    write_json_atomic(meta, meta_doc)
    tokenize_testset(
        model_spec=spec,
        built_model_dir=str(tiny),
        testset=name,
        data_path=str(data),
        data_meta=str(meta),
        labels=LABELS,
        prompt=PROMPT,
        max_length=max_length,
        out_path=str(cache),
    )
    return data, meta, cache


def checkpoint_series(tmp_path, built_model_dir, spec, lora: bool, labels, n_ckpt=3):
    """A run's checkpoint folders as finetuning writes them: full weights or LoRA adapters,
    each perturbed differently (so every checkpoint scores differently), with manifests."""
    import torch

    from oodcorr.core.model_entry import ModelEntry
    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.finetune import apply_lora
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_model

    method = get(spec.get("method"))
    tok_pad = 1
    out = []
    for step in range(n_ckpt):
        torch.manual_seed(100 + step)
        model = load_model(ModelEntry.from_params(spec), built_model_dir, "cpu", labels, tok_pad)
        if lora:
            model = apply_lora(model, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, method.peft_task)
            trained = [p for n, p in model.named_parameters() if p.requires_grad]
        else:
            trained = list(model.parameters())
        with torch.no_grad():
            for p in trained:
                p.add_(torch.randn_like(p) * 0.05)
        ck = tmp_path / "run" / "checkpoints" / f"checkpoint-{step * 10}"
        model.save_pretrained(ck)
        write_ckpt_manifest(ck, step * 10, resumable=False)
        out.append({"step": step * 10, "checkpoint": str(ck)})
    return out


def sharded_copy(model_dir, dest, max_shard_size: str = "20KB") -> Path:
    """``model_dir`` (a tiny model folder) saved again into ``dest`` as transformers writes a large
    model: shards ``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json``."""
    import shutil

    from transformers import AutoModelForCausalLM

    dest = Path(dest)
    shutil.copytree(model_dir, dest, ignore=shutil.ignore_patterns("*.safetensors"))
    AutoModelForCausalLM.from_pretrained(str(model_dir)).save_pretrained(dest, max_shard_size=max_shard_size)
    assert (dest / "model.safetensors.index.json").exists() and not (dest / "model.safetensors").exists()
    return dest


def drop_shard(folder, tensor_suffix: str = "embed_tokens.weight") -> str:
    """Delete the shard holding the tensor ending in ``tensor_suffix`` and leave its tensors out of the
    index, as an index edited to match a deleted shard; returns that shard's name."""
    folder = Path(folder)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = next(s for t, s in index["weight_map"].items() if t.endswith(tensor_suffix))
    index["weight_map"] = {t: s for t, s in index["weight_map"].items() if s != shard}
    index_path.write_text(json.dumps(index, indent=2))
    (folder / shard).unlink()
    return shard


def tiny_llama_gguf(
    path,
    *,
    leave_out=(),
    n_blocks: int = 1,
    rows: int | None = None,
    seed: int = 0,
    shapes: dict | None = None,
    head_count_kv: int = 2,
    vocab_size: int = 16,
) -> Path:
    """A tiny llama GGUF file that transformers loads (F32 weights, a byte-level BPE tokenizer of 16
    tokens), written with the gguf package's own writer; ``leave_out`` names tensors not written,
    ``rows`` gives the token embeddings another row count than the tokenizer's, ``shapes`` other
    shapes to tensors (as numpy's: rows first), ``head_count_kv`` and ``vocab_size`` other metadata
    than the tensors have."""
    import gguf
    import numpy as np

    n_vocab, n_embd, n_ff, n_head = 16, 32, 64, 2
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_block_count(n_blocks)
    w.add_context_length(64)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(head_count_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["<s>", "</s>"] + [chr(ord("a") + i) for i in range(n_vocab - 3)] + ["ab"])
    w.add_token_types([3, 3] + [1] * (n_vocab - 2))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(seed)
    every = {"token_embd.weight": (rows or n_vocab, n_embd), "output_norm.weight": (n_embd,)}
    block = dict(
        attn_norm=(n_embd,),
        attn_q=(n_embd, n_embd),
        attn_k=(n_embd, n_embd),
        attn_v=(n_embd, n_embd),
        attn_output=(n_embd, n_embd),
        ffn_norm=(n_embd,),
        ffn_gate=(n_ff, n_embd),
        ffn_up=(n_ff, n_embd),
        ffn_down=(n_embd, n_ff),
    )
    for i in range(n_blocks):
        every.update({f"blk.{i}.{k}.weight": v for k, v in block.items()})
    every.update(shapes or {})
    for name, shape in every.items():
        if name not in leave_out:
            w.add_tensor(name, (rng.normal(size=shape) * 0.1).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---- the experiment trackers' own files, read back by readers other than oodcorr's writers ----------
def tensorboard_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in ``logdir`` (all files, as TensorBoard merges them), read by
    TensorBoard's own EventAccumulator: tag -> [(step, value), ...] in the order written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def wandb_runs(folder) -> list[dict]:
    """The W&B offline runs under ``folder`` (``**/offline-run-*/run-*.wandb``), read from their record
    files with W&B's own protocol buffers: per run its ``run`` record (name, group, job_type, tags),
    ``history`` (one dict per logged row, values JSON-decoded), ``metrics`` (define_metric: name or
    glob -> step metric) and ``artifacts`` (name, type, the files' paths in it)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    block = 32768  # the records' framing: 32 KiB blocks of (crc, length, type) chunks, as LevelDB's log
    out = []
    for path in sorted(Path(folder).rglob("offline-run-*/run-*.wandb")):
        data, pos, buf, run = path.read_bytes(), 7, b"", {"history": [], "metrics": {}, "artifacts": []}
        assert data[:4] == b":W&B", path
        while pos + 7 <= len(data):
            left = block - pos % block
            if left < 7:
                pos += left
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if kind == 0:
                pos += left
                continue
            chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
            buf = chunk if kind in (1, 2) else buf + chunk
            if kind not in (1, 4):
                continue
            rec = pb.Record()
            rec.ParseFromString(buf)
            what = rec.WhichOneof("record_type")
            if what == "run":
                r = rec.run
                run |= {"name": r.display_name, "group": r.run_group, "job_type": r.job_type, "tags": list(r.tags)}
                run |= {"project": r.project, "id": r.run_id}
            elif what == "history":
                run["history"].append(
                    {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
                )
            elif what == "metric":
                run["metrics"][rec.metric.name or rec.metric.glob_name] = rec.metric.step_metric
            elif what == "artifact":
                files = [e.path for e in rec.artifact.manifest.contents]
                run["artifacts"].append({"name": rec.artifact.name, "type": rec.artifact.type, "files": files})
        out.append(run)
    return out


def measured_study() -> dict:
    """One item-level study as the answer's figures and page show it (issue 44): 6 models x 20
    checkpoints, one run each, an in-domain set of 400 items and OOD sets ``ood0`` of 2,000 and
    ``ood1`` of 1,000 (the tasks' partial correlation 0.5 in every model;
    oodcorr.analysis.simulate.items), analysed with each item's correctness (``items``), with the
    sizes alone (``bound``: its one pair is noise-limited by ood1) and with neither (``unknown``):
    {how: (pairs table, agreement table, options)}, Pearson and the linear residualiser."""
    import numpy as np

    from oodcorr.analysis import Options, agreement, analyse
    from oodcorr.analysis.simulate.items import item_table

    long, examples = item_table(np.random.default_rng(0), [0.5] * 6, 1, 20, (400, 2000, 1000))
    opts = Options(methods=("pearson",), residualisers=("linear",), step0_check=False)
    out = {}
    for how, table, ex in (("items", long, examples), ("bound", long, None), ("unknown", long.drop(columns="n"), None)):
        pc = analyse(table, opts, ex)
        out[how] = pc, agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero), opts
    return out


# The test files that take minutes, longest first. `make test` hands files to its workers in collection
# order (--dist loadfile --no-loadscope-reorder) and tests/conftest.py sorts these first, so the longest
# is never the last file left running while the other worker idles; the two end-to-end files share
# one finished micro run (finished_micro), so the first builds it while the other worker plans the
# bad inputs.
LONGEST_FIRST = (
    "tests/workflow/test_workflow.py",
    "tests/workflow/test_bad_inputs.py",
    "tests/workflow/test_workflow_reruns.py",
    "tests/modeling/test_gguf_conversion.py",
    "tests/meta/test_docs.py",
)


class FakeSlurm:
    """SLURM's commands as shell scripts first on PATH, for unit tests of what the workflow makes of
    their answers (the real single-node cluster is tests/workflow/test_slurm.py's).

    ``answer("squeue", "1|PENDING|...")`` sets what ``squeue`` prints next; ``answer(..., sub="ping")``
    answers only calls whose first argument is ``ping`` (``scontrol ping``); several answers for one
    command are given in turn, the last one repeated. :meth:`calls` gives each call's arguments."""

    def __init__(self, folder, monkeypatch):
        self.root = Path(folder)
        (self.root / "bin").mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("PATH", f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")

    def answer(self, cmd: str, *outputs: str, rc: int = 0, stderr: str = "", sub: str = "_", rcs=()):
        d = self.root / cmd / sub
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():  # the answers given before, and how many were read
            old.unlink()
        for k, out in enumerate(outputs or ("",), start=1):
            (d / f"{k}.out").write_text(out)
            (d / f"{k}.err").write_text(stderr)
            (d / f"{k}.rc").write_text(str(rcs[k - 1] if k <= len(rcs) else rc))
        script = self.root / "bin" / cmd
        script.write_text(
            "#!/bin/sh\n"
            f'top="{self.root / cmd}"\n'
            'printf "%s\\n" "$*" >> "$top/calls"\n'
            'd="$top/_"; if [ -n "$1" ] && [ -d "$top/$1" ]; then d="$top/$1"; fi\n'
            '[ -d "$d" ] || exit 127\n'
            'n=$(cat "$d/n" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$d/n"\n'
            'k=$n; while [ "$k" -gt 1 ] && [ ! -f "$d/$k.out" ]; do k=$((k - 1)); done\n'
            'cat "$d/$k.out"; cat "$d/$k.err" >&2; exit "$(cat "$d/$k.rc")"\n'
        )
        script.chmod(0o755)

    def calls(self, cmd: str) -> list[str]:
        f = self.root / cmd / "calls"
        return f.read_text().splitlines() if f.exists() else []


# ---- one study through the analysis' batched functions --------------------------------------
# oodcorr.analysis.across.consensus and .predictive work on many studies at once; the tests read one study
# at a time through these.


def one_study(z, v, model, p_run=None):
    """One study's runs as the batch arrays: (model names in order of first appearance, z, v,
    p_run, mask), each of shape (1, models, most runs of a model)."""
    import numpy as np

    z, v, model = np.asarray(z, float), np.asarray(v, float), np.asarray(model)
    names = list(dict.fromkeys(model.tolist()))
    groups = [np.flatnonzero(model == m) for m in names]
    K = max((len(g) for g in groups), default=1)
    shape = (1, len(names), K)
    Z, V, P = np.zeros(shape), np.ones(shape), np.full(shape, np.nan)
    mask = np.zeros(shape, bool)
    for i, g in enumerate(groups):
        Z[0, i, : len(g)], V[0, i, : len(g)], mask[0, i, : len(g)] = z[g], v[g], True
        if p_run is not None:
            P[0, i, : len(g)] = np.asarray(p_run, float)[g]
    return names, Z, V, P, mask


def between_runs(z, v, model) -> tuple[float, int, float]:
    """(tau2_runs, degrees of freedom, q) of one study's runs (consensus.model_means_batch's)."""
    from oodcorr.analysis.across.consensus import model_means_batch

    _, Z, V, P, mask = one_study(z, v, model)
    t2, df, q = model_means_batch(Z, V, mask, P)[3:]
    return float(t2[0]), int(df[0]), float(q[0])


def model_means(z, v, model, p_run):
    """Per model of one study: (names, z_m, V_m, two-sided p of z_m = 0, tau2_runs, df of the runs,
    q of the runs) (consensus.model_means_batch)."""
    from oodcorr.analysis.across.consensus import model_means_batch

    names, Z, V, P, mask = one_study(z, v, model, p_run)
    zm, Vm, pm, t2, df, q = model_means_batch(Z, V, mask, P)
    return names, zm[0], Vm[0], pm[0], float(t2[0]), int(df[0]), float(q[0])


def consensus(zm, Vm, level: float = 0.95, tau_scale: float | None = None) -> dict:
    """One study's consensus of its models (one run each): consensus.consensus_batch's keys and
    consensus.shared_sign_batch's with no runs to scale by."""
    import numpy as np

    from oodcorr.analysis.across.consensus import consensus_batch, shared_sign_batch
    from oodcorr.analysis.across.predictive import TAU_SCALE

    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    present = np.ones((1, len(zm)), bool)
    res = consensus_batch(zm[None], Vm[None], present, level, TAU_SCALE if tau_scale is None else tau_scale)
    res.update(shared_sign_batch(zm[None], Vm[None], present, np.zeros(1), np.zeros(1, int), level))
    return {k: float(val[0]) for k, val in res.items()}


def tau2_upper(z, v, level: float = 0.95) -> float:
    """One study's Q-profile upper bound of the between-model variance (predictive.tau2_upper_batch)."""
    import numpy as np

    from oodcorr.analysis.across.predictive import tau2_upper_batch

    z, v = np.asarray(z, float), np.asarray(v, float)
    return float(tau2_upper_batch(z[None], v[None], np.ones((1, len(z)), bool), level)[0])


def reversal_p(zm, pm) -> tuple[float, int, int]:
    """One study's sign-reversal p-value and its two models (consensus.reversal_batch)."""
    import numpy as np

    from oodcorr.analysis.across.consensus import reversal_batch

    zm, pm = np.asarray(zm, float), np.asarray(pm, float)
    p, a, b = reversal_batch(zm[None], pm[None], np.ones((1, len(zm)), bool))
    return float(p[0]), int(a[0]), int(b[0])


def _one(fn, zm, Vm, *args, **kw) -> dict:
    import numpy as np

    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    res = fn(zm[None], Vm[None], np.ones((1, len(zm)), bool), *args, **kw)
    return {k: float(val[0]) for k, val in res.items()}


def predictive(zm, Vm, level: float = 0.95, tau_scale: float | None = None, within_scales=None) -> dict:
    """predictive.predictive_batch of one study's models: ``pi_lo``, ``pi_hi``, ``p_predictive``, ``tau``."""
    from oodcorr.analysis.across.predictive import TAU_SCALE, WITHIN_SCALES, predictive_batch

    tau_scale = TAU_SCALE if tau_scale is None else tau_scale
    within_scales = WITHIN_SCALES if within_scales is None else within_scales
    return _one(predictive_batch, zm, Vm, level, tau_scale, within_scales=within_scales)


def tolerance(zm, Vm, level: float = 0.95, scales=None) -> dict:
    """predictive.tolerance_batch of one study's models (``scales``: the within scale's (draws,
    weights), two lists)."""
    import numpy as np

    from oodcorr.analysis.across.predictive import tolerance_batch

    if scales is not None:
        scales = tuple(np.asarray(x, float)[None] for x in scales)
    return _one(tolerance_batch, zm, Vm, level, scales=scales)
