"""Tiny pretrained causal LMs built offline: tokenizer, architecture, short pretraining."""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path

from ..core.atomic_write import follow_umask

log = logging.getLogger(__name__)

SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def train_tokenizer(lines: list[str], vocab_size: int, out_dir: Path):
    """A byte-level BPE tokenizer (GPT-2 style, as OPT and OLMo2 use) trained on ``lines``."""
    # tokenizers: only when the tiny model is built
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast  # torch stack: planning and the CLI never import it

    tok = Tokenizer(models.BPE(unk_token=SPECIALS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    bos = SPECIALS["bos_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIALS)
    fast.save_pretrained(out_dir)
    return fast


def build_model(spec: dict, tokenizer, seed: int):
    """A freshly initialised causal LM from ``spec = {"model_type": ..., "config": {...}}``."""
    import torch  # torch stack: planning and the CLI never import it
    from transformers import AutoConfig, AutoModelForCausalLM  # torch stack: planning and the CLI never import it

    torch.manual_seed(seed)
    kwargs = dict(spec.get("config") or {})
    kwargs.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    cfg = AutoConfig.for_model(spec["model_type"], **kwargs)
    return AutoModelForCausalLM.from_config(cfg)


def pretrain(
    model, tokenizer, lines: list[str], steps: int, batch_size: int, lr: float, seed: int, max_length: int = 64
) -> list[float]:
    """Plain causal-LM pretraining on ``lines``; returns the loss every step."""
    import torch  # torch stack: planning and the CLI never import it

    from .prompting import pad_batch  # prompting imports torch: kept out of planning

    rng = random.Random(seed)
    torch.manual_seed(seed)
    enc = tokenizer(lines, add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    model.train()
    losses = []
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch_size:
            order += rng.sample(range(len(enc)), len(enc))
        batch, order = [enc[i] for i in order[:batch_size]], order[batch_size:]
        ids, mask = pad_batch(batch, tokenizer.pad_token_id)
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


def build_pretrained(name: str, spec: dict, corpus: list[str], out_dir: Path, seed: int) -> dict:
    """Tokenizer + model + pretraining, saved with ``save_pretrained`` (safetensors)."""
    import torch  # torch stack: planning and the CLI never import it

    t0 = time.time()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(spec.get("threads", 1)))
    tokenizer = train_tokenizer(corpus, int(spec.get("vocab_size", 1000)), out_dir)
    model = build_model(spec, tokenizer, seed)
    pt = spec.get("pretrain") or {}
    losses = pretrain(
        model,
        tokenizer,
        corpus,
        steps=int(pt.get("steps", 300)),
        batch_size=int(pt.get("batch_size", 32)),
        lr=float(pt.get("learning_rate", 3e-3)),
        seed=seed,
        max_length=int(pt.get("max_length", 64)),
    )
    model.save_pretrained(out_dir)
    follow_umask(out_dir)  # safetensors leaves its weights 0600; every other result follows the umask
    info = {
        "name": name,
        "model_type": spec["model_type"],
        "n_params": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "pretrain_steps": len(losses),
        "loss_first": losses[0] if losses else None,
        "loss_last10": sum(losses[-10:]) / max(1, len(losses[-10:])) if losses else None,
        "seconds": round(time.time() - t0, 2),
    }
    (out_dir / "oodcorr_build.json").write_text(json.dumps(info, indent=2))
    log.info("built %s: %s", name, info)
    return info
