"""Scoring a checkpoint on a testset: one forward pass per example, length-sorted batches."""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from .io import atomic_path, read_jsonl, write_json_atomic

CACHE_FORMAT = 2


def tokenize_testset(*, model_spec: dict, tiny_dir: str | None, testset: str, data_path: str, data_meta: str,
                     labels: list[str], prompt: dict | None, max_length: int, out_path: str,
                     coarse: dict | None = None) -> dict:
    """Tokenise a prepared testset once per tokenizer; every checkpoint's evaluation reuses it.

    ``labels`` are what the model predicts; ``coarse`` (from the label mode) names
    gold labels it cannot predict and the predictions that count as right for them.
    """
    import torch

    from . import methods
    from .models import load_tokenizer

    method = methods.get(model_spec.get("method"))
    tok = load_tokenizer(model_spec, tiny_dir)
    recs = read_jsonl(data_path)
    ids, n_trunc, extra = method.encode(tok, recs, labels=labels, prompt=prompt, max_length=max_length,
                                        model_name=model_spec["name"])
    gold_names = list(labels) + [c for c in (coarse or {}) if c not in labels]
    lab = {l: i for i, l in enumerate(gold_names)}
    meta = json.loads(Path(data_meta).read_text())
    cache = {"format": CACHE_FORMAT, "testset": testset, "method": method.name, "input_ids": ids,
             "labels": [lab[r["label"]] for r in recs], "label_names": list(labels), "gold_names": gold_names,
             "coarse": dict(coarse or {}), "extra": extra, "pad_id": int(tok.pad_token_id), "n_truncated": n_trunc,
             "fingerprint": meta["fingerprint"], "records_sha256": meta.get("records_sha256"),
             "template": prompt["template"] if prompt else None,
             "verbalisers": [prompt["verbalisers"][l] for l in labels] if prompt else None}
    with atomic_path(out_path) as tmp:
        torch.save(cache, tmp)
    return {"n": len(ids), "n_truncated": n_trunc}


def length_batches(lengths: list[int], max_tokens: int, max_batch: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (sorted), bounded by padded tokens and size."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, cur, cur_max = [], [], 0
    for i in order:
        new_max = max(cur_max, lengths[i])
        if cur and (new_max * (len(cur) + 1) > max_tokens or len(cur) >= max_batch):
            batches.append(cur)
            cur, new_max = [], lengths[i]
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def score(model, cache: dict, batch_size: int, max_tokens: int, device: str = "cpu"):
    """One score per label for every example of a tokenised testset, in the cache's order."""
    import torch

    from . import methods
    from .prompting import pad_batch

    method = methods.get(cache["method"])
    ids = cache["input_ids"]
    out = torch.empty((len(ids), len(cache["label_names"])), dtype=torch.float32)
    with torch.inference_mode():
        for batch in length_batches([len(x) for x in ids], max_tokens, batch_size):
            inp, mask = pad_batch([ids[i] for i in batch], cache["pad_id"], side="right")
            logits = method.label_logits(model, inp.to(device), mask.to(device), cache["extra"])
            out[torch.tensor(batch)] = logits.cpu()
    return out


def evaluate(*, model_spec: dict, tiny_dir: str | None, checkpoint: str, step: int, tokenized: str,
             batch_size: int, max_tokens: int, out_json: str, out_predictions: str, provenance: dict,
             device: str = "cpu", threads: int = 1) -> dict:
    import pandas as pd
    import torch

    from .finetune import verify_checkpoint
    from .methods import correct_mask
    from .models import load_checkpoint

    t0 = time.time()
    torch.set_num_threads(threads)
    ok, why = verify_checkpoint(Path(checkpoint), full=False)
    if not ok:
        raise RuntimeError(f"checkpoint not usable: {why}")
    cache = torch.load(tokenized, weights_only=True)
    t_load = time.time()
    model = load_checkpoint(model_spec, checkpoint, tiny_dir, device, cache["label_names"], cache["pad_id"])
    t_model = time.time()
    logits = score(model, cache, batch_size, max_tokens, device)
    t_fwd = time.time()
    pred = logits.argmax(-1)
    gold = torch.tensor(cache["labels"])
    correct = correct_mask(pred, gold, cache["gold_names"], cache["coarse"])
    names = cache["gold_names"]
    n = len(gold)
    result = {
        "accuracy": int(correct.sum()) / n if n else float("nan"), "n": n,
        "n_correct": int(correct.sum()),
        "gold_counts": {names[k]: v for k, v in sorted(Counter(gold.tolist()).items())},
        "pred_counts": {names[k]: v for k, v in sorted(Counter(pred.tolist()).items())},
        "step": step, "testset": cache["testset"], "fingerprint": cache["fingerprint"],
        "records_sha256": cache["records_sha256"], "method": cache["method"],
        "n_truncated": cache["n_truncated"], "template": cache["template"], "verbalisers": cache["verbalisers"],
        "checkpoint": str(checkpoint),
        "timing_s": {"cache": round(t_load - t0, 3), "model": round(t_model - t_load, 3),
                     "forward": round(t_fwd - t_model, 3)},
        **provenance,
    }
    df = pd.DataFrame({"index": range(n), "label": [names[g] for g in gold.tolist()],
                       "pred": [names[p] for p in pred.tolist()], "correct": correct.numpy()})
    for j, name in enumerate(cache["label_names"]):
        df[f"logit_{name}"] = logits[:, j].numpy()
    with atomic_path(out_predictions) as tmp:
        df.to_parquet(tmp, index=False)
    write_json_atomic(out_json, result)
    return result

