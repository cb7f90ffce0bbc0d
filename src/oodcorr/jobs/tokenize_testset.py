"""Tokenising a testset: its prompts as token ids, cached once per tokenizer x testset.

What rule ``tokenize_testset`` runs (workflow/scripts/tokenize_testset.py); every checkpoint's
evaluation (:mod:`oodcorr.jobs.evaluate`) reads the cache. :data:`CACHE_FORMAT` is the cache's
format; its sidecar (:func:`oodcorr.core.records.cache_info_path`) is readable without torch.
"""

from __future__ import annotations

from ..core.io import atomic_path, read_json, read_jsonl, write_json_atomic
from ..core.records import cache_info_path
from ..modeling import adaptation
from ..modeling.loading import load_tokenizer

CACHE_FORMAT = 2


def tokenize_testset(
    *,
    model_spec: dict,
    tiny_dir: str | None,
    testset: str,
    data_path: str,
    data_meta: str,
    labels: list[str],
    prompt: dict | None,
    max_length: int,
    out_path: str,
    coarse: dict | None = None,
) -> dict:
    """Tokenise a prepared testset once per tokenizer; every checkpoint's evaluation reuses it.

    ``labels`` are what the model predicts; ``coarse`` (from the label mode) names
    gold labels it cannot predict and the predictions that count as right for them.
    """
    import torch  # torch stack: planning and the CLI never import it

    from ..planning.config import changed_reading  # planning's config: an evaluation job does not need it

    method = adaptation.get(model_spec.get("method"))
    tok = load_tokenizer(model_spec, tiny_dir)
    recs = read_jsonl(data_path)
    ids, n_trunc, extra = method.encode(
        tok, recs, labels=labels, prompt=prompt, max_length=max_length, model_name=model_spec["name"]
    )
    gold_names = list(labels) + [c for c in (coarse or {}) if c not in labels]
    lab = {name: i for i, name in enumerate(gold_names)}
    meta = read_json(
        data_meta, "the prepared dataset's description", "delete it and run again: the dataset is prepared again"
    )
    cache = {
        "format": CACHE_FORMAT,
        "testset": testset,
        "method": method.name,
        "input_ids": ids,
        "labels": [lab[r["label"]] for r in recs],
        "label_names": list(labels),
        "gold_names": gold_names,
        "coarse": dict(coarse or {}),
        "extra": extra,
        "pad_id": int(tok.pad_token_id),
        "n_truncated": n_trunc,
        "fingerprint": meta["fingerprint"],
        "records_sha256": meta.get("records_sha256"),
        "template": prompt["template"] if prompt else None,
        "verbalisers": [prompt["verbalisers"][name] for name in labels] if prompt else None,
        # the prompt switches that differ from the defaults (empty for the defaults and for head models)
        "reading": changed_reading(prompt),
    }
    info = {
        "testset": testset,
        "model": model_spec["name"],
        "n": len(ids),
        "n_truncated": n_trunc,
        "max_length": max_length,
        "fingerprint": meta["fingerprint"],
    }
    # beside the cache, readable without torch (planning warns about truncation from it); written first,
    # so a cache never lacks its sidecar
    write_json_atomic(cache_info_path(out_path), info)
    with atomic_path(out_path) as tmp:
        torch.save(cache, tmp)
    return {"n": len(ids), "n_truncated": n_trunc}
