"""Finetuning (pattern or classification head) with checkpoints on a schedule, resumable after a kill.

Layout of a run's folder (``run_dir``)::

    checkpoints/checkpoint-<step>/   weights (safetensors) or a LoRA adapter, plus
                                     oodcorr_manifest.json: size and sha256 of
                                     every file, written last, atomically
    manifest.json                    the job's declared output: every step and its
                                     folder, written when all checkpoints exist

Only ``manifest.json`` is a Snakemake output, so a failed or killed job's
checkpoints survive (Snakemake deletes only declared outputs) and the rerun
resumes from the newest checkpoint whose manifest verifies and that still has
its optimizer state. Older checkpoints keep their weights (they are evaluated)
but drop optimizer state to save disk; the resume point's state is never dropped
while training runs.

One writer: a finetune holds ``finetune.lock`` in the run folder from the moment
it first reads or writes the folder until its manifest is written
(:mod:`oodcorr.locks`); a second finetune of the same run is refused.

Verification compares sizes and sha256 hashes with each checkpoint's manifest.
A file's hash is computed once: ``.oodcorr_verified.json`` in the checkpoint
records, per file, the sha256 it matched and the file's size, mtime, ctime and
inode at that moment, and a file whose stat is unchanged is not hashed again. Any
write to a file changes its ctime (which no user call can set back), so an edit,
even one that restores the mtime, is hashed anew; only damage below the file
system (a failing disk) goes unseen until the cache is deleted.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import time
from pathlib import Path

from .io import read_jsonl, sha256_file, sha256_json, stat_key, write_json_atomic

log = logging.getLogger(__name__)

MANIFEST = "oodcorr_manifest.json"
VERIFIED = ".oodcorr_verified.json"  # hashes already checked, keyed by each file's stat (see above)
RESUME_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "scaler.pt", "trainer_state.json",
                "training_args.bin", "optimizer.bin", "pytorch_model_fsdp.bin")  # the last two: FSDP


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or inf: the run diverged, and no later checkpoint is saved.

    (The Trainer's own logging filters such losses out of the logged average by default,
    so without this check a diverged run would go on and save checkpoints of NaN weights.)
    """


# ---- checkpoint manifests ------------------------------------------------------------------

def _read_verified(ckpt: Path) -> dict:
    try:
        cache = json.loads((ckpt / VERIFIED).read_text())
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_verified(ckpt: Path, cache: dict) -> None:
    try:
        write_json_atomic(ckpt / VERIFIED, cache)
    except OSError:  # a read-only copy of a run: verification still works, just without the cache
        pass


def write_ckpt_manifest(ckpt: Path, step: int, resumable: bool) -> dict:
    files, verified = {}, {}
    for f in sorted(ckpt.rglob("*")):
        if f.is_file() and f.name != MANIFEST and not f.name.startswith("."):
            rel = str(f.relative_to(ckpt))
            files[rel] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
            verified[rel] = {"sha256": files[rel]["sha256"], "stat": stat_key(f)}
    man = {"step": step, "resumable": resumable, "files": files}
    _write_verified(ckpt, verified)  # the hashes just computed are the files' verification
    write_json_atomic(ckpt / MANIFEST, man)
    return man


def _read_manifest(ckpt: Path) -> dict | None:
    try:
        man = json.loads((ckpt / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) and isinstance(man.get("files"), dict) else None


def _check_files(ckpt: Path, man: dict, rels: list[str], full: bool) -> tuple[bool, str]:
    """Whether the files ``rels`` match ``man``: present, same size, and (``full``) same sha256.

    A file whose sha256 was verified before and whose stat has not changed since is
    not hashed again (see the module docstring)."""
    for rel in rels:
        f, meta = ckpt / rel, man["files"][rel]
        if not f.exists():
            return False, f"{f}: missing"
        if f.stat().st_size != meta["size"]:
            return False, f"{f}: size {f.stat().st_size} != {meta['size']} in the manifest (truncated?)"
    if not full:
        return True, "ok"
    cache = _read_verified(ckpt)
    changed = False
    for rel in rels:
        f, want = ckpt / rel, man["files"][rel]["sha256"]
        seen = cache.get(rel)
        key = stat_key(f)
        if isinstance(seen, dict) and seen.get("sha256") == want and seen.get("stat") == key:
            continue
        if sha256_file(f) != want:
            return False, f"{f}: sha256 differs from the manifest (the file changed after it was saved)"
        cache[rel] = {"sha256": want, "stat": key}
        changed = True
    if changed:
        _write_verified(ckpt, cache)
    return True, "ok"


def verify_checkpoint(ckpt: Path, full: bool = True) -> tuple[bool, str]:
    """Whether ``ckpt``'s weights are complete: manifest present, every weight file matches it.

    Optimizer/RNG state (``RESUME_FILES``) is not needed for evaluation, so its
    absence does not make a checkpoint incomplete; ``is_resumable`` checks it.
    ``full`` also compares sha256, each file's once (cached), else sizes only.
    """
    man = _read_manifest(ckpt)
    if man is None:
        return False, f"{ckpt}: no readable {MANIFEST} (save did not finish)"
    weights = [rel for rel in man["files"] if Path(rel).name not in RESUME_FILES]
    return _check_files(ckpt, man, weights, full)


def weights_digest(ckpt: Path) -> str:
    """A hash of a checkpoint's weight files (names and sha256s from its manifest; optimizer
    state, which pruning removes, left out): what identifies the model it holds."""
    man = _read_manifest(ckpt) or {}
    files = {rel: meta["sha256"] for rel, meta in (man.get("files") or {}).items()
             if Path(rel).name not in RESUME_FILES}
    return sha256_json(files)


def is_resumable(ckpt: Path) -> bool:
    """The manifest says so and every listed optimizer/RNG file is intact (sha256, cached)."""
    man = _read_manifest(ckpt)
    if not man or not man.get("resumable"):
        return False
    listed = [rel for rel in man["files"] if Path(rel).name in RESUME_FILES]
    return bool(listed) and _check_files(ckpt, man, listed, full=True)[0]


def _step_of(ckpt: Path) -> int:
    return int(ckpt.name.split("-", 1)[1])


def _ckpt_dirs(ckpt_root: Path) -> list[tuple[int, Path]]:
    out = []
    for d in ckpt_root.glob("checkpoint-*"):
        try:
            out.append((int(d.name.split("-", 1)[1]), d))
        except ValueError:
            continue
    return sorted(out)


def find_resume_point(ckpt_root: Path, steps: list[int] | None = None) -> Path | None:
    """Newest checkpoint to resume from, or None to start from scratch.

    A checkpoint whose weights do not verify (sizes and sha256) is moved aside
    (``.incomplete-…``), kept but never trusted. The resume point must have intact
    optimizer state, and every scheduled step before it must still have verified
    weights (else those steps could never be produced, so training restarts from
    scratch).
    """
    good = {}
    for step, d in _ckpt_dirs(ckpt_root):
        ok, why = verify_checkpoint(d, full=True)
        if ok:
            good[step] = d
        else:
            _move_aside(d, why)
    for step in sorted(good, reverse=True):
        d = good[step]
        if step == 0 or not is_resumable(d):
            continue
        missing = [s for s in (steps or []) if s < step and s not in good]
        if missing:
            log.warning("checkpoints for steps %s are gone; training again from scratch", missing)
            return None
        return d
    return None


def _move_aside(d: Path, why: str) -> None:
    bad = d.with_name(f".incomplete-{d.name}-{int(time.time())}")
    log.warning("checkpoint %s is damaged (%s); moved to %s, not used", d, why, bad)
    d.rename(bad)


def _newest_resumable(ckpt_root: Path, up_to: int) -> Path | None:
    for step, d in reversed(_ckpt_dirs(ckpt_root)):
        if step <= up_to and is_resumable(d):
            return d
    return None


def prune_resume_state(ckpt_root: Path, keep: Path | None) -> None:
    """Drop optimizer/RNG state from every checkpoint but the resume point; weights stay.

    ``keep`` is the checkpoint just saved while training runs, or None once the run
    is complete (then every checkpoint's state goes). While training, the state
    kept is that of the newest resumable checkpoint (:func:`is_resumable`) up to
    ``keep``: ``keep`` itself when its state was saved whole, else the older one a
    rerun would resume from (with a warning); with none, nothing is pruned. A newer
    checkpoint's state is left from an earlier attempt that training has gone
    behind; it goes.

    The manifest is rewritten first (reusing the stored hashes), then the files
    are deleted, so a kill in between leaves a checkpoint that is still valid
    for evaluation and merely not resumable.
    """
    if keep is not None:
        point = _newest_resumable(ckpt_root, up_to=_step_of(keep))
        if point is None:
            log.warning("no checkpoint in %s has intact optimizer state; nothing pruned", ckpt_root)
            return
        if point != keep:
            log.warning("%s has no intact optimizer state; keeping that of %s, the resume point", keep, point)
        keep = point
    for _step, d in _ckpt_dirs(ckpt_root):
        man = _read_manifest(d)
        if d == keep or man is None or not man.get("resumable"):
            continue
        files = {rel: meta for rel, meta in man["files"].items() if Path(rel).name not in RESUME_FILES}
        write_json_atomic(d / MANIFEST, dict(man, resumable=False, files=files))
        for name in RESUME_FILES:
            (d / name).unlink(missing_ok=True)


def guard_run_identity(run_dir: Path, identity: dict) -> None:
    """Never resume from checkpoints made with other settings or data.

    The settings that shape training are hashed into ``run_identity.json``. If a
    previous attempt left checkpoints under different settings, they are moved
    aside to ``checkpoints.stale-<time>`` (kept, not deleted) and training starts
    afresh.
    """
    path = run_dir / "run_identity.json"
    digest = sha256_json(identity)
    ckpt_root = run_dir / "checkpoints"
    if path.exists():
        try:
            old = json.loads(path.read_text()).get("sha256")
        except json.JSONDecodeError:
            old = None
        if old != digest and ckpt_root.exists():
            stale = run_dir / f"checkpoints.stale-{int(time.time())}"
            log.warning("settings changed since the checkpoints in %s were made; moved them to %s",
                        ckpt_root, stale)
            ckpt_root.rename(stale)
    elif ckpt_root.exists() and any(ckpt_root.iterdir()):
        stale = run_dir / f"checkpoints.stale-{int(time.time())}"
        log.warning("checkpoints in %s have no run_identity.json; moved them to %s", ckpt_root, stale)
        ckpt_root.rename(stale)
    write_json_atomic(path, {"sha256": digest, "identity": identity})


# ---- training ------------------------------------------------------------------------------

def _make_trainer_classes():
    import torch
    from transformers import Trainer, TrainerCallback

    class LabelTrainer(Trainer):
        """Cross-entropy over the method's per-label scores (verbaliser logits, or a head's logits),
        or, with ``loss="vocabulary"``, over the whole vocabulary at the scored position with the
        gold label's verbaliser token as the target (:func:`training_loss`)."""

        # our loss is a per-batch mean: Trainer must divide it by the accumulation steps
        loss_is_scaled_for_ga = False

        def __init__(self, *a, method=None, extra=None, loss="verbalisers", schedule=(), **kw):
            super().__init__(*a, **kw)
            self.method = method
            self.extra = extra or {}
            self.loss_kind = loss
            self.schedule = tuple(schedule)  # the steps saved, for the divergence message

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, logits = training_loss(self.method, model, inputs, self.extra, self.loss_kind)
            # one device sync per step, which the Trainer pays anyway (logging_nan_inf_filter)
            if not bool(torch.isfinite(loss)):
                self._diverged(float(loss.detach()), logits)
            return (loss, {"logits": logits}) if return_outputs else loss

        def _diverged(self, loss: float, logits) -> None:
            step = self.state.global_step + 1
            saved = sorted(s for s in self.schedule if s < step)
            weights_ok = all(bool(torch.isfinite(p).all()) for p in self.model.parameters())
            where = ("the weights are still finite, so the scores overflowed" if weights_ok
                     else "the weights already hold NaN or inf")
            raise NonFiniteLoss(
                f"the training loss is {loss} at step {step} of {self.args.max_steps} ({where}): the run "
                f"diverged, so it stops here and no later checkpoint is saved (checkpoints up to step "
                f"{saved[-1] if saved else 0} are kept). Lower finetune.learning_rate (now {self.args.learning_rate}) "
                "or finetune.max_grad_norm, or train in float32, and run again; checkpoints made with other "
                "settings are moved aside, never reused")

    class ScheduleCallback(TrainerCallback):
        """Save exactly at the scheduled steps; write a manifest after each save."""

        def __init__(self, steps, ckpt_root):
            self.steps = set(steps)
            self.ckpt_root = ckpt_root

        def on_step_end(self, args, state, control, **kw):
            control.should_save = state.global_step in self.steps
            return control

        def on_save(self, args, state, control, **kw):
            if not state.is_world_process_zero:  # several processes (oodcorr.distributed): rank 0 writes
                return control
            d = self.ckpt_root / f"checkpoint-{state.global_step}"
            write_ckpt_manifest(d, state.global_step, resumable=True)
            prune_resume_state(self.ckpt_root, keep=d)
            return control

    return LabelTrainer, ScheduleCallback


LOSSES = ("verbalisers", "vocabulary")


def training_loss(method, model, inputs: dict, extra: dict, loss: str = "verbalisers"):
    """(mean cross-entropy of a batch, the logits it is computed over).

    ``verbalisers`` (default): over the method's per-label scores (the verbaliser tokens'
    logits, or a head's logits), the gold label's index as the target. ``vocabulary`` (the
    authors' code; pattern method only): over every token of the vocabulary at the scored
    position, the gold label's verbaliser token as the target, so training also pushes down
    every other token, not only the other labels' verbalisers."""
    import torch

    labels = inputs["labels"]
    if loss == "vocabulary":
        if not hasattr(method, "vocab_logits"):
            from .config import ConfigError

            raise ConfigError(f"finetune.loss: vocabulary needs the pattern method (a vocabulary to score), "
                              f"not {method.name!r}")
        logits = method.vocab_logits(model, inputs["input_ids"], inputs["attention_mask"], extra)
        target = torch.as_tensor(extra["verbaliser_ids"], device=logits.device)[labels.to(logits.device)]
    elif loss == "verbalisers":
        logits = method.label_logits(model, inputs["input_ids"], inputs["attention_mask"], extra)
        target = labels.to(logits.device)
    else:
        raise ValueError(f"finetune.loss: {loss!r} is not one of {', '.join(LOSSES)}")
    return torch.nn.functional.cross_entropy(logits, target), logits


class _Collator:
    def __init__(self, pad_id):
        self.pad_id = pad_id

    def __call__(self, feats):
        import torch

        from .prompting import pad_batch

        ids, mask = pad_batch([f["input_ids"] for f in feats], self.pad_id, side="right")
        return {"input_ids": ids, "attention_mask": mask,
                "labels": torch.tensor([f["labels"] for f in feats], dtype=torch.long)}


def apply_lora(model, lora: dict, task_type: str = "CAUSAL_LM"):
    """LoRA adapters; for a classification head (``SEQ_CLS``) peft also trains and saves the head."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=int(lora["r"]), lora_alpha=float(lora["alpha"]), lora_dropout=float(lora.get("dropout", 0.0)),
                     target_modules=lora.get("target_modules") or None, task_type=task_type, bias="none")
    return get_peft_model(model, cfg)


def base_weights_fingerprint(model_spec: dict, tiny_dir: str | None) -> str:
    """What identifies the starting weights: a hub revision, or the local files' sizes and times."""
    if model_spec.get("hub"):
        from .hub import pinned_model_revision

        # under a hub lock the commit the branch or tag resolved to (the same string for a commit)
        return f"hub:{model_spec['hub']}@{pinned_model_revision(model_spec) or 'unpinned'}"
    from .models import model_source

    d = Path(model_source(model_spec, tiny_dir)[0])
    files = sorted(d.glob("*.safetensors")) + sorted(d.glob("*.bin"))
    return sha256_json([[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files])


def reporting(report_to, run_dir: Path) -> list[str]:
    """The Trainer's ``report_to`` for ``finetune.report_to``: ``auto`` is TensorBoard when a writer
    (tensorboardX or tensorboard) is installed, else nothing; a list names integrations. Never a
    network service unless the config names one. W&B writes under the run's folder (WANDB_DIR)."""
    import importlib.util
    import os

    from transformers.integrations import is_tensorboard_available

    if report_to in (None, "auto"):
        return ["tensorboard"] if is_tensorboard_available() else []
    if report_to == "none":
        return []
    wanted = list(report_to)
    if "tensorboard" in wanted and not is_tensorboard_available():
        raise RuntimeError("finetune.report_to: tensorboard needs tensorboardX (pinned in requirements.txt) or "
                           "tensorboard installed")
    for name, module in (("wandb", "wandb"), ("mlflow", "mlflow"), ("comet_ml", "comet_ml"), ("trackio", "trackio")):
        if name in wanted and importlib.util.find_spec(module) is None:
            raise RuntimeError(f"finetune.report_to: {name} is not installed (pip install {module}); it is opt-in "
                               "and not pinned here")
    if "wandb" in wanted:
        os.environ.setdefault("WANDB_DIR", str(run_dir))
    return wanted


def _history(trainer) -> list[dict]:
    return [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]


def finetune(*, run_dir: str, **kwargs) -> dict:
    """Train one run into ``run_dir`` (see :func:`_finetune` for the arguments), holding its lock.

    The lock (:mod:`oodcorr.locks`) is taken once the inputs have been checked,
    before anything in the run folder is read or written, and held until the job's
    manifest is written; a second finetune of the same run folder raises
    :class:`oodcorr.locks.FolderInUse` at once. Under several processes rank 0,
    which alone writes the folder, holds it.
    """
    from .distributed import is_main_process
    from .locks import hold

    with contextlib.ExitStack() as held:
        def lock() -> None:
            if is_main_process():
                held.enter_context(hold(run_dir))

        return _finetune(run_dir=run_dir, lock=lock, **kwargs)


def _finetune(*, model_spec: dict, tiny_dir: str | None, train_path: str, labels: list[str],
              prompt: dict | None, ft: dict, n_train: int, seed: int, steps: list[int], max_steps: int,
              run_dir: str, manifest_path: str, lock, device: str = "cpu", threads: int = 1,
              report_to=None) -> dict:
    import torch
    from transformers import TrainingArguments, set_seed

    from . import methods
    from .config import ConfigError
    from .data import balanced_sample
    from .distributed import is_main_process, launched, main_first_begin, main_first_end
    from .models import load_model, load_tokenizer

    t0 = time.time()
    torch.set_num_threads(threads)
    main_first_begin()  # several processes: the others wait while rank 0 checks and repairs the run folder
    run_dir = Path(run_dir)
    ckpt_root = run_dir / "checkpoints"
    # what shapes the trained weights (resources and batch-independent settings do not)
    identity = {"model": {k: v for k, v in model_spec.items() if k != "resources"},
                "base_weights": base_weights_fingerprint(model_spec, tiny_dir),
                "finetune": {k: v for k, v in ft.items() if k not in ("n_train", "seeds")},
                "prompt": prompt, "labels": labels, "n_train": n_train, "seed": seed, "steps": steps,
                "max_steps": max_steps, "train_sha256": sha256_file(train_path)}
    method = methods.get(model_spec.get("method"))
    if ft.get("loss", "verbalisers") == "vocabulary" and not hasattr(method, "vocab_logits"):
        raise ConfigError(f"models[{model_spec['name']}]: finetune.loss: vocabulary needs the pattern method, "
                          f"not {method.name!r}")
    tok = load_tokenizer(model_spec, tiny_dir)
    train = balanced_sample(read_jsonl(train_path), n_train, labels, seed)
    ids, n_trunc, extra = method.encode(tok, train, labels=labels, prompt=prompt, max_length=int(ft["max_length"]),
                                        model_name=model_spec["name"])
    # only now, with the inputs known good (a bad verbaliser fails above), is run_dir read and written:
    # by one process at a time
    lock()
    guard_run_identity(run_dir, identity)
    ckpt_root.mkdir(parents=True, exist_ok=True)
    label_idx = {lab: i for i, lab in enumerate(labels)}
    dataset = [{"input_ids": x, "labels": label_idx[r["label"]]} for x, r in zip(ids, train)]

    set_seed(seed)
    # several processes: every rank loads on the CPU and FSDP/DeepSpeed places the shards
    model = load_model(model_spec, tiny_dir, "cpu" if launched() else device, labels, tok.pad_token_id)
    if ft.get("lora"):
        model = apply_lora(model, ft["lora"], method.peft_task)

    # step 0: the model before any update (for LoRA: the fresh adapter, equal to the base model)
    c0 = ckpt_root / "checkpoint-0"
    if not verify_checkpoint(c0)[0]:
        shutil.rmtree(c0, ignore_errors=True)
        model.save_pretrained(c0)
        write_ckpt_manifest(c0, 0, resumable=False)

    # sha256 too, not sizes only: a checkpoint damaged in place with its size intact must be trained again
    done = all(verify_checkpoint(ckpt_root / f"checkpoint-{s}", full=True)[0] for s in steps)
    resume = None if done else find_resume_point(ckpt_root, steps)
    main_first_end()
    history: list[dict] = []
    if done:
        # every scheduled checkpoint exists under these exact settings: nothing to train
        log.info("all %d scheduled checkpoints already exist in %s; not training again", len(steps), ckpt_root)
    else:
        if resume is not None:
            log.info("resuming from %s", resume)
        LabelTrainer, ScheduleCallback = _make_trainer_classes()
        # where the loss goes while training runs (finetune.report_to; changes no weights)
        report = reporting(report_to, run_dir)
        bf16 = model_spec.get("dtype") == "bfloat16" or bool(ft.get("bf16"))
        args = TrainingArguments(
            output_dir=str(ckpt_root), max_steps=max_steps,
            per_device_train_batch_size=int(ft["batch_size"]),
            gradient_accumulation_steps=int(ft.get("gradient_accumulation_steps", 1)),
            learning_rate=float(ft["learning_rate"]), weight_decay=float(ft.get("weight_decay", 0.0)),
            warmup_steps=int(math.ceil(float(ft.get("warmup_ratio", 0.0)) * max_steps)),
            lr_scheduler_type=ft.get("lr_scheduler", "linear"), max_grad_norm=float(ft.get("max_grad_norm", 1.0)),
            seed=seed, data_seed=seed, save_strategy="no", eval_strategy="no",
            logging_steps=max(1, max_steps // 20), report_to=report or "none", disable_tqdm=True,
            run_name=f"{model_spec['name']}/n{n_train}/seed{seed}",
            remove_unused_columns=False, dataloader_num_workers=0,
            use_cpu=(device == "cpu"), bf16=bf16 and device != "cpu",
        )
        trainer = LabelTrainer(model=model, args=args, train_dataset=dataset,
                               data_collator=_Collator(tok.pad_token_id), method=method, extra=extra,
                               loss=ft.get("loss", "verbalisers"), schedule=steps,
                               callbacks=[ScheduleCallback([s for s in steps if s > 0], ckpt_root)])
        for cb in trainer.callback_handler.callbacks:  # TensorBoard logs in the run's folder, not the checkpoints'
            if type(cb).__name__ == "TensorBoardCallback":
                cb.logging_dir = str(run_dir / "tensorboard")
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        history = _history(trainer)
    if not is_main_process():  # rank 0 verifies the checkpoints and writes the manifest
        return {}

    missing = []
    entries = []
    for step in steps:
        d = ckpt_root / f"checkpoint-{step}"
        ok, why = verify_checkpoint(d, full=True)  # hashed when saved: cached, not hashed again
        if not ok:
            missing.append(why)
        entries.append({"step": step, "path": str(d)})
    if missing:
        raise RuntimeError("finetune finished but scheduled checkpoints are not complete: " + "; ".join(missing))
    # the final checkpoint's optimizer state is no longer needed for resuming
    prune_resume_state(ckpt_root, keep=None)
    info = {"model": model_spec["name"], "method": method.name, "loss": ft.get("loss", "verbalisers"),
            "n_train": n_train, "seed": seed, "max_steps": max_steps,
            "checkpoints": entries, "resumed_from": str(resume) if resume else None, "trained": not done,
            "n_truncated_prompts": n_trunc,
            "train_loss": sum(h["loss"] for h in history) / len(history) if history else None,
            "loss_history": history, "lora": ft.get("lora"), "seconds": round(time.time() - t0, 2),
            "device": str(device)}
    write_json_atomic(manifest_path, info)
    return info
