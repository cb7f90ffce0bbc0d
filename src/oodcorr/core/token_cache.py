"""A tokenised testset's sidecar (``<testset>.info.json``) and whether the cache can be used, without torch."""

from __future__ import annotations

import os
from pathlib import Path

from .digests import sha256_json
from .io import json_or_none


def cache_info_path(cache_path: str | Path) -> Path:
    p = Path(cache_path)
    return p.with_name(p.name.removesuffix(".pt") + ".info.json")


TOKENIZED_FORMAT = 3  # the tokenised testset's format: 3 records its model, and its sidecar a digest of its bytes


# what decides a tokenised testset's content: rule tokenize_testset's params (planning.plan.Plan.tokenize_params)
TOKENIZE_SETTINGS = ("model_spec", "built_model_dir", "prompt", "labels", "coarse", "max_length")


def tokenize_settings_digest(settings: dict) -> str:
    return sha256_json({k: settings.get(k) for k in TOKENIZE_SETTINGS})


def rebuild_hint(path: str | os.PathLike) -> str:
    return f"delete it and {cache_info_path(path)} and run again: rule tokenize_testset makes it again"


def read_cache_info(path: str | os.PathLike) -> tuple[dict | None, str | None]:
    """A tokenised testset's sidecar, and why it cannot vouch for the cache (None when it can)."""
    info_path = cache_info_path(path)
    info = json_or_none(info_path)
    if not isinstance(info, dict):
        return (
            None,
            f"{path}: the tokenised testset's sidecar {info_path} is missing or unreadable, so it cannot be checked",
        )
    if info.get("format") != TOKENIZED_FORMAT or not isinstance(info.get("sha256"), str):
        return info, (
            f"{path}: the tokenised testset was made before its sidecar recorded its tokenizer and the digest of its "
            "content, so neither can be checked"
        )
    return info, None


def cache_problem(
    path: str | os.PathLike, tokenizer: str | None, testset: str | None = None, model: str | None = None
) -> str | None:
    """Why the tokenised testset at ``path`` cannot be used, without torch or hashing; None when it looks whole."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:  # a zip: whole when it ends with its central directory's end record
            head = fh.read(4)
            fh.seek(max(0, size - (1 << 16) - 22))
            tail = fh.read()
    except OSError as e:
        return f"{path}: the tokenised testset cannot be read ({e.strerror or e})"
    if head != b"PK\x03\x04" or b"PK\x05\x06" not in tail:
        return f"{path}: the tokenised testset is cut short or damaged (not a whole torch.save file)"
    info, why = read_cache_info(path)
    if why:
        return why
    if info.get("size") != size:
        return (
            f"{path}: the tokenised testset is {size} bytes, but {info.get('size')} bytes were written (its sidecar "
            f"{cache_info_path(path)}): cut short, or another file copied over it"
        )
    return not_made_for(path, info, tokenizer, testset, model)


def not_made_for(path, made: dict, tokenizer: str | None, testset: str | None, model: str | None) -> str | None:
    """Why a tokenised testset recorded as ``made`` is not that of ``testset``, ``model``, ``tokenizer`` (None: any)."""
    holds = (made.get("testset"), made.get("model"))
    if (testset and holds[0] != testset) or (model and holds[1] != model):
        return (
            f"{path}: the tokenised testset holds testset {holds[0]!r} of model {holds[1]!r}, but sits where testset "
            f"{testset or holds[0]!r} of model {model or holds[1]!r} belongs (copied over it, or two caches swapped?)"
        )
    made_by = made.get("tokenizer")
    if not tokenizer or made_by == tokenizer:
        return None
    if not made_by:
        return (
            f"{path}: the tokenised testset does not record the tokenizer that made it, so it cannot be checked "
            f"against this model's ({tokenizer[:12]}...)"
        )
    return (
        f"{path}: the tokenised testset was made by another tokenizer (files sha256 {made_by[:12]}...) than this "
        f"model's ({tokenizer[:12]}...): another model's cache, or made before its tokenizer files changed"
    )
