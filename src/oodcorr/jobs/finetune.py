"""Finetuning with checkpoints on a schedule, resumable: only ``manifest.json`` is a Snakemake output, so a
killed job's checkpoints survive and its rerun resumes from the newest whole one with optimizer state."""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from functools import partial
from pathlib import Path

from ..core import trackers
from ..core.atomic_write import write_json_atomic
from ..core.digests import sha256_file, sha256_json
from ..core.errors import ConfigError
from ..core.filesystems import check_room, human_bytes
from ..core.io import read_jsonl
from ..core.locks import hold
from ..core.model_entry import ModelEntry
from ..core.ranks import is_main_process, launched, main_first_begin, main_first_end, wait_for_everyone
from ..modeling import adaptation
from ..modeling.hub import pinned_model_revision
from ..modeling.loading import load_model, load_tokenizer, model_source
from ..planning.finetune_job import FinetuneJob
from . import tracking
from .checkpoints import (
    checkpoint_bytes,
    find_resume_point,
    guard_run_identity,
    prune_resume_state,
    read_ckpt_manifest,
    saves_that_fit,
    verify_checkpoint,
    weights_digest,
    write_ckpt_manifest,
    writing,
)
from .prepare_dataset import balanced_sample

log = logging.getLogger(__name__)


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or inf: the run diverged, and no later checkpoint is saved."""


def _make_trainer_classes():
    import torch  # torch stack: planning and the CLI never import it
    from transformers import Trainer, TrainerCallback  # torch stack: planning and the CLI never import it

    class LabelTrainer(Trainer):
        """The Trainer with :func:`training_loss`, stopped by a loss that is not finite."""

        # our loss is a per-batch mean: Trainer must divide it by the accumulation steps
        loss_is_scaled_for_ga = False

        def __init__(self, *a, method=None, extra=None, loss="verbalisers", schedule=(), **kw):
            super().__init__(*a, **kw)
            self.method = method
            self.extra = extra or {}
            self.loss_kind = loss
            self.schedule = tuple(schedule)  # the steps saved, for the divergence message

        def _save_checkpoint(self, model, trial):
            with writing(Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"):
                return super()._save_checkpoint(model, trial)

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
            where = "the weights are finite: the scores overflowed" if weights_ok else "the weights hold NaN or inf"
            raise NonFiniteLoss(
                f"the training loss is {loss} at step {step} of {self.args.max_steps} ({where}): the run diverged "
                f"(checkpoints up to step {saved[-1] if saved else 0} are kept). Lower finetune.learning_rate (now "
                f"{self.args.learning_rate}) or finetune.max_grad_norm, or train in float32, and run again"
            )

    class ScheduleCallback(TrainerCallback):
        """Save exactly at the scheduled steps; write a manifest after each save."""

        def __init__(self, steps, ckpt_root):
            self.steps = set(steps)
            self.ckpt_root = ckpt_root

        def on_step_end(self, args, state, control, **kw):
            control.should_save = state.global_step in self.steps
            return control

        def on_save(self, args, state, control, **kw):
            wait_for_everyone()  # each rank writes its own RNG state: all are whole before rank 0 records them
            if not state.is_world_process_zero:  # several processes (oodcorr.jobs.multi_gpu): rank 0 writes
                return control
            d = self.ckpt_root / f"checkpoint-{state.global_step}"
            write_ckpt_manifest(d, state.global_step, resumable=True)
            prune_resume_state(self.ckpt_root, keep=d)
            return control

    return LabelTrainer, ScheduleCallback


LOSSES = ("verbalisers", "vocabulary")


def training_loss(method, model, inputs: dict, extra: dict, loss: str = "verbalisers"):
    """(mean cross-entropy of a batch, the logits it is computed over)."""
    import torch  # torch stack: planning and the CLI never import it

    labels = inputs["labels"]
    if loss == "vocabulary":  # (the schema allows only LOSSES)
        if not hasattr(method, "vocab_logits"):
            raise ConfigError(f"finetune.loss: vocabulary needs the pattern method, not {method.name!r}")
        logits = method.vocab_logits(model, inputs["input_ids"], inputs["attention_mask"], extra)
        target = torch.as_tensor(extra["verbaliser_ids"], device=logits.device)[labels.to(logits.device)]
    else:
        logits = method.label_logits(model, inputs["input_ids"], inputs["attention_mask"], extra)
        target = labels.to(logits.device)
    return torch.nn.functional.cross_entropy(logits, target), logits


def _collate(pad_id, feats):
    import torch  # torch stack: planning and the CLI never import it

    from ..modeling.prompting import pad_batch  # prompting imports torch: kept out of planning

    ids, mask = pad_batch([f["input_ids"] for f in feats], pad_id, side="right")
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": torch.tensor([f["labels"] for f in feats], dtype=torch.long),
    }


def apply_lora(model, lora: dict, task_type: str = "CAUSAL_LM"):
    """LoRA adapters; for a classification head (``SEQ_CLS``) peft also trains and saves the head."""
    from peft import LoraConfig, get_peft_model  # torch stack: planning and the CLI never import it

    cfg = LoraConfig(
        r=int(lora["r"]),
        lora_alpha=float(lora["alpha"]),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=lora.get("target_modules") or None,
        task_type=task_type,
        bias="none",
    )
    return get_peft_model(model, cfg)


def base_weights_fingerprint(model_entry: ModelEntry, built_model_dir: str | None) -> str:
    """What identifies the starting weights: a hub revision, or the local files' sizes and times."""
    if model_entry.hub:
        # under a hub lock the commit the branch or tag resolved to (the same string for a commit)
        return f"hub:{model_entry.hub}@{pinned_model_revision(model_entry) or 'unpinned'}"

    d = Path(model_source(model_entry, built_model_dir)[0])
    files = sorted(d.glob("*.safetensors")) + sorted(d.glob("*.bin"))
    return sha256_json([[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files])


def finetune(job: FinetuneJob) -> dict:
    """Train one run into its ``run_dir``, holding its lock; the job's manifest (rank 0), else ``{}``."""
    import torch  # torch stack: planning and the CLI never import it

    t0 = time.time()
    torch.set_num_threads(job.threads)
    main_first_begin()  # several processes: the others wait while rank 0 checks and repairs the run folder
    identity = run_identity(job)
    method = adaptation.get(job.model_entry.method)
    # the balanced sample of n_train examples for the seed, encoded (a bad verbaliser fails here)
    tok = load_tokenizer(job.model_entry, job.built_model_dir)
    labels = list(job.labels)
    sample = balanced_sample(read_jsonl(job.train_path), job.n_train, labels, job.seed)
    ids, n_trunc, extra = method.encode(
        tok, sample, labels=labels, prompt=job.prompt, max_length=job.training.max_length, model_name=job.name
    )
    label_idx = {lab: i for i, lab in enumerate(labels)}
    examples = [{"input_ids": x, "labels": label_idx[r["label"]]} for x, r in zip(ids, sample)]
    with contextlib.ExitStack() as held:
        # only now, with the inputs known good, is run_dir read and written: by one process at a time
        if is_main_process():
            held.enter_context(hold(job.run_dir))
        model, done, resume = _prepare_run_folder(job, identity, method, tok.pad_token_id)
        main_first_end()
        history: list[dict] = []
        if done:
            log.info("all %d scheduled checkpoints exist in %s; not training again", len(job.steps), _ckpt_root(job))
        else:
            history = _train(job, method, model, examples, extra, tok.pad_token_id, resume)
        if not is_main_process():  # rank 0 verifies the checkpoints and writes the manifest
            return {}
        # every scheduled checkpoint verified, the last optimizer state dropped, the job's manifest written
        ckpt_root = _ckpt_root(job)
        missing = []
        entries = []
        for step in job.steps:
            d = ckpt_root / f"checkpoint-{step}"
            ok, why = verify_checkpoint(d, full=True)  # hashed when saved: cached, not hashed again
            if not ok:
                missing.append(why)
            # what evaluation checks a checkpoint against before scoring it (oodcorr.jobs.evaluate)
            libraries = (read_ckpt_manifest(d) or {}).get("libraries")
            entries.append(
                {"step": step, "path": str(d), "weights": weights_digest(d) if ok else None, "libraries": libraries}
            )
        if missing:
            raise RuntimeError("finetune finished but scheduled checkpoints are not complete: " + "; ".join(missing))
        prune_resume_state(ckpt_root, keep=None)
        info = {
            "model": job.name,
            "method": method.name,
            "loss": job.training.loss,
            "n_train": job.n_train,
            "seed": job.seed,
            "max_steps": job.max_steps,
            "checkpoints": entries,
            "resumed_from": str(resume) if resume else None,
            "trained": not done,
            "n_truncated_prompts": n_trunc,
            "train_loss": sum(h["loss"] for h in history) / len(history) if history else None,
            "loss_history": history,
            "lora": job.finetune.get("lora"),
            "seconds": round(time.time() - t0, 2),
            "device": str(job.device),
        }
        write_json_atomic(job.manifest_path, info)
        return info


def _ckpt_root(job: FinetuneJob) -> Path:
    return job.run_dir / "checkpoints"


def run_identity(job: FinetuneJob) -> dict:
    """What shapes the trained weights: checkpoints of another identity are never resumed from."""
    return {
        "model": dict(job.model_spec),  # the params as planned (a key they may not hold is refused: ModelEntry)
        "base_weights": base_weights_fingerprint(job.model_entry, job.built_model_dir),
        "finetune": {k: v for k, v in job.finetune.items() if k not in ("n_train", "seeds")},
        "prompt": job.prompt,
        "labels": list(job.labels),
        "n_train": job.n_train,
        "seed": job.seed,
        "steps": list(job.steps),
        "max_steps": job.max_steps,
        "train_sha256": sha256_file(job.train_path),
    }


def _prepare_run_folder(job: FinetuneJob, identity: dict, method, pad_id: int):
    """Under the lock: set aside another identity's checkpoints, load the model, save step 0; (model, done, resume)."""
    from transformers import set_seed  # torch stack: planning and the CLI never import it

    ckpt_root = _ckpt_root(job)
    guard_run_identity(job.run_dir, identity)
    ckpt_root.mkdir(parents=True, exist_ok=True)

    set_seed(job.seed)
    # several processes: every rank loads on the CPU and FSDP/DeepSpeed places the shards
    model = load_model(
        job.model_entry,
        job.built_model_dir,
        "cpu" if launched() else job.device,
        list(job.labels),
        pad_id,
    )
    if job.training.lora:
        model = apply_lora(model, job.training.lora, method.peft_task)

    # step 0: the model before any update (for LoRA: the fresh adapter, equal to the base model)
    c0 = ckpt_root / "checkpoint-0"
    if not verify_checkpoint(c0)[0]:
        shutil.rmtree(c0, ignore_errors=True)
        weights, _ = checkpoint_bytes(model, job.training.lora)
        check_room(ckpt_root, weights, f"the checkpoint of step 0 ({c0})")
        with saves_that_fit(ckpt_root, weights):
            with writing(c0):
                model.save_pretrained(c0)
            write_ckpt_manifest(c0, 0, resumable=False)

    # sha256 too, not sizes only: a checkpoint damaged in place with its size intact must be trained again
    done = all(verify_checkpoint(ckpt_root / f"checkpoint-{s}", full=True)[0] for s in job.steps)
    return model, done, None if done else find_resume_point(ckpt_root, list(job.steps))


def _train(
    job: FinetuneJob, method, model, examples: list, extra: dict, pad_id: int, resume: Path | None
) -> list[dict]:
    """Train to ``max_steps`` from ``resume``, saving the scheduled checkpoints; return the loss history."""
    from transformers import TrainingArguments  # torch stack: planning and the CLI never import it

    weights, optimizer = checkpoint_bytes(model, job.training.lora)
    # refused when the checkpoints still to save (and the newest one's optimizer state) cannot fit
    if is_main_process():
        done_to = int(resume.name.split("-", 1)[1]) if resume is not None else 0
        todo = [s for s in job.steps if s > done_to]
        needed = len(todo) * weights + optimizer * (1 if resume is not None else min(2, len(todo)))
        check_room(
            _ckpt_root(job),
            needed,
            f"the {len(todo)} checkpoint(s) still to save for run {job.run_dir} (steps {todo[0]}..{todo[-1]}, "
            f"{human_bytes(weights)} of weights each, {human_bytes(optimizer)} of optimizer state)"
            if todo
            else f"run {job.run_dir}",
        )
    if resume is not None:
        log.info("resuming from %s", resume)
    LabelTrainer, ScheduleCallback = _make_trainer_classes()
    # finetune.report_to: each tracker checked before any step is trained, and pointed at the run's own runs
    report = trackers.named(job.report_to)
    trackers.check(report, tracking.root_of_run_dir(job.run_dir))
    tracking.for_trainer(report, job.run_dir)
    steps = list(job.steps)
    t = job.training
    ident = tracking.RunIdentity.of_run_dir(job.run_dir)  # the run's name as the scores' runs have it
    args = TrainingArguments(
        output_dir=str(_ckpt_root(job)),
        max_steps=job.max_steps,
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        warmup_steps=t.warmup_steps(job.max_steps),
        lr_scheduler_type=t.lr_scheduler,
        max_grad_norm=t.max_grad_norm,
        seed=job.seed,
        data_seed=job.seed,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=max(1, job.max_steps // 20),
        report_to=report or "none",
        disable_tqdm=True,
        run_name=ident.name if ident else f"{job.name}/n{job.n_train}/seed{job.seed}",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        use_cpu=(job.device == "cpu"),
        bf16=job.bf16 and job.device != "cpu",
    )
    trainer = LabelTrainer(
        model=model,
        args=args,
        train_dataset=examples,
        data_collator=partial(_collate, pad_id),
        method=method,
        extra=extra,
        loss=job.training.loss,
        schedule=steps,
        callbacks=[ScheduleCallback([s for s in steps if s > 0], _ckpt_root(job))],
    )
    for cb in trainer.callback_handler.callbacks:  # TensorBoard logs in the run's folder, not the checkpoints'
        if type(cb).__name__ == "TensorBoardCallback":
            cb.logging_dir = str(job.run_dir / "tensorboard")
    with saves_that_fit(_ckpt_root(job), weights + optimizer):
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
