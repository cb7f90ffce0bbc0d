"""Tokenising a testset: its prompts as token ids, cached once per tokenizer x testset."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping
from pathlib import Path

from ..core.atomic_write import atomic_path, write_json_atomic
from ..core.errors import ResultError
from ..core.io import read_json, read_jsonl
from ..core.model_entry import ModelEntry
from ..core.token_cache import (
    TOKENIZED_FORMAT,
    cache_info_path,
    not_made_for,
    read_cache_info,
    rebuild_hint,
    tokenize_settings_digest,
)
from ..modeling import adaptation
from ..modeling.loading import load_tokenizer, tokenizer_fingerprint


def tokenize_testset(
    *,
    model_spec: Mapping,
    built_model_dir: str | None,
    testset: str,
    data_path: str,
    data_meta: str,
    labels: list[str],
    prompt: dict | None,
    max_length: int,
    out_path: str,
    coarse: dict | None = None,
) -> dict:
    """Tokenise a prepared testset once per tokenizer; every checkpoint's evaluation reuses it."""
    model_entry = ModelEntry.from_params(model_spec)
    import torch  # torch stack: planning and the CLI never import it

    from ..planning.config import changed_reading  # planning's config: an evaluation job does not need it

    method = adaptation.get(model_entry.method)
    tok = load_tokenizer(model_entry, built_model_dir)
    recs = read_jsonl(data_path)
    ids, n_trunc, extra = method.encode(
        tok, recs, labels=labels, prompt=prompt, max_length=max_length, model_name=model_entry.name
    )
    gold_names = list(labels) + [c for c in (coarse or {}) if c not in labels]
    lab = {name: i for i, name in enumerate(gold_names)}
    meta = read_json(
        data_meta, "the prepared dataset's description", "delete it and run again: the dataset is prepared again"
    )
    cache = {
        "format": TOKENIZED_FORMAT,
        "testset": testset,
        "model": model_entry.name,
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
        "tokenizer": tokenizer_fingerprint(model_entry, built_model_dir),
    }
    buf = io.BytesIO()
    torch.save(cache, buf)
    data = buf.getvalue()
    settings = dict(
        model_spec=model_spec,
        built_model_dir=built_model_dir,
        prompt=prompt,
        labels=list(labels),
        coarse=coarse,
        max_length=max_length,
    )
    info = {
        **{k: cache[k] for k in ("format", "testset", "model", "n_truncated", "fingerprint", "tokenizer")},
        "n": len(ids),
        "max_length": max_length,
        # what the reader checks the cache's bytes against, and what planning compares with its config's settings
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "settings": tokenize_settings_digest(settings),
    }
    # beside the cache, readable without torch; written first, so a cache never lacks its sidecar
    write_json_atomic(cache_info_path(out_path), info)
    with atomic_path(out_path, size=len(data), what=f"the tokenised testset {out_path}") as tmp:
        Path(tmp).write_bytes(data)
    return {"n": len(ids), "n_truncated": n_trunc}


def read_tokenized(
    path: str | os.PathLike, tokenizer: str | None = None, *, testset: str | None = None, model: str | None = None
) -> dict:
    """The tokenised testset at ``path``, checked (sha256, format, ``testset``, ``model``, ``tokenizer``), else a
    :class:`~oodcorr.core.errors.ResultError` naming it."""
    import torch  # torch stack: planning and the CLI never import it

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ResultError(f"{path}: tokenised testset missing; run again: rule tokenize_testset makes it") from None
    except OSError as e:
        raise ResultError(f"{path}: unreadable tokenised testset ({e.strerror or e}); {rebuild_hint(path)}") from None
    info, why = read_cache_info(path)
    if why:
        raise ResultError(f"{why}; {rebuild_hint(path)}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != info["sha256"]:
        raise ResultError(
            f"{path}: the tokenised testset changed after it was written (its bytes' sha256 is {digest[:12]}..., "
            f"{info['sha256'][:12]}... when written, as {cache_info_path(path)} records); {rebuild_hint(path)}"
        )
    try:
        cache = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001 -- torch raises several types for a file cut short or not its own
        raise ResultError(
            f"{path}: the tokenised testset is unreadable (cut short or damaged: {type(e).__name__}: "
            f"{str(e)[:160]}); {rebuild_hint(path)}"
        ) from None
    if not isinstance(cache, dict) or cache.get("format") != TOKENIZED_FORMAT:
        got = cache.get("format") if isinstance(cache, dict) else type(cache).__name__
        why = f"{path}: not a tokenised testset of format {TOKENIZED_FORMAT} (it is {got!r})"
    elif not isinstance(cache.get("input_ids"), list) or len(cache["input_ids"]) != len(cache.get("labels") or ()):
        n_ids, n_labels = len(cache.get("input_ids") or ()), len(cache.get("labels") or ())
        why = f"{path}: the tokenised testset holds {n_ids} prompts but {n_labels} labels"
    else:
        why = not_made_for(path, cache, tokenizer, testset, model)
    if why:
        raise ResultError(f"{why}; {rebuild_hint(path)}")
    return cache
