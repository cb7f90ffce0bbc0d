"""Pattern-based scoring: prompt, verbaliser tokens, and the logits at the scored position.

``scored_position: last-token`` reads the last real token (gathered from the attention mask; appended
special tokens stripped); ``padded-end`` (the authors' code) pads to ``max_length`` and reads the
last position, a pad position unless the tokenizer pads on the left.
"""

from __future__ import annotations

import functools
import inspect

import torch

from ..core.defaults import READING
from ..core.errors import ConfigError


def reading(prompt: dict | None) -> dict:
    """How a prompt is read: its switches, each at its default where the prompt does not set it."""
    return {k: (prompt or {}).get(k, v) for k, v in READING.items()}


def format_prompt(template: str, premise: str, hypothesis: str, strip_fields: bool = True) -> str:
    if strip_fields:
        premise, hypothesis = premise.strip(), hypothesis.strip()
    return template.format(premise=premise, hypothesis=hypothesis)


def verbaliser_ids(tokenizer, verbalisers: dict, labels: list[str], model_name: str = "") -> list[int]:
    """Token id per label, in ``labels`` order; each verbaliser must be exactly one token."""
    ids = []
    for lab in labels:
        word = verbalisers[lab]
        toks = tokenizer.encode(word, add_special_tokens=False)
        if len(toks) != 1:
            pieces = tokenizer.convert_ids_to_tokens(toks)
            raise ConfigError(
                f"prompt.verbalisers.{lab}: {word!r} is {len(toks)} tokens {pieces} for the tokenizer of "
                f"model {model_name!r}; a verbaliser must be a single token (mind the leading space)"
            )
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise ConfigError(f"prompt.verbalisers: two labels share one token for model {model_name!r}: {verbalisers}")
    return ids


def encode_prompts(
    tokenizer,
    records: list[dict],
    template: str,
    max_length: int,
    *,
    strip_fields: bool = True,
    truncation: str = "left",
    keep_appended: bool = False,
) -> tuple[list[list[int]], int]:
    """Token ids per record, at most ``max_length`` each; returns (ids, number of truncated prompts)."""
    texts = [format_prompt(template, r["premise"], r["hypothesis"], strip_fields) for r in records]
    enc = tokenizer(texts, add_special_tokens=True)["input_ids"]
    bare = tokenizer(texts, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    out, n_trunc = [], 0
    for ids, plain in zip(enc, bare):
        ids, plain = list(ids), list(plain)
        n = len(plain)
        # (start, end) of the text's own tokens inside its encoding with special tokens
        span = next(((s, s + n) for s in range(len(ids) - n + 1) if ids[s : s + n] == plain), None)
        if span is None:  # the encodings differ inside the text: keep a leading special token only
            span = (1 if ids and ids[0] in special else 0, len(ids))
        head_ids, body, tail_ids = ids[: span[0]], ids[span[0] : span[1]], ids[span[1] :]
        if not keep_appended:
            tail_ids = []
        budget = max_length - len(head_ids) - len(tail_ids)
        if len(body) > budget:
            n_trunc += 1
            body = body[len(body) - budget :] if truncation == "left" else body[:budget]
        out.append(head_ids + body + tail_ids)
    return out, n_trunc


def pad_batch(
    seqs: list[list[int]], pad_id: int, side: str = "right", width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of ``seqs`` padded to the longest (or to ``width``), one tensor call each."""
    width = max([len(s) for s in seqs] + [width or 0])
    if side == "right":
        rows = [list(s) + [pad_id] * (width - len(s)) for s in seqs]
        mask = [[1] * len(s) + [0] * (width - len(s)) for s in seqs]
    else:
        rows = [[pad_id] * (width - len(s)) + list(s) for s in seqs]
        mask = [[0] * (width - len(s)) + [1] * len(s) for s in seqs]
    return torch.tensor(rows, dtype=torch.long), torch.tensor(mask, dtype=torch.long)


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last non-pad position in each row (left or right padding)."""
    width = attention_mask.shape[1]
    pos = torch.arange(width, device=attention_mask.device).expand_as(attention_mask)
    return torch.where(attention_mask.bool(), pos, torch.full_like(pos, -1)).max(dim=1).values


def _forward_params(model) -> set[str]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = set(inspect.signature(base.forward).parameters)
    if not type(base).__module__.startswith(("transformers.", "oodcorr.modeling.plain_torch")):
        # remote code may treat logits_to_keep differently: compute every position's logits
        params.discard("logits_to_keep")
    return params


@functools.cache
def _per_row_logits_to_keep() -> bool:
    """Whether this transformers reads a (batch, 1) ``logits_to_keep`` as one position per row (5.2x);
    with older releases every position's logits are computed and the last real one gathered."""
    import transformers.modeling_utils as mu  # torch stack: planning and the CLI never import it

    return hasattr(mu, "slice_logits_to_keep")


# model classes whose forward takes logits_to_keep but does not keep one position per row
_SLICES_OWN_WAY: set[type] = set()


def scored_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, extra: dict | None = None):
    """(batch, vocab) logits at the scored position ``extra`` (from encoding) names: each row's last real
    token, or for ``padded-end`` the last of every prompt padded to ``pad_to`` tokens on its ``padding_side``."""
    extra = extra or {}
    if extra.get("position") != "padded-end":
        params = _forward_params(model)
        last = last_positions(attention_mask)
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "position_ids" in params:
            # positions count real tokens only, so left padding scores like right padding
            kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        kind = type(model.get_base_model() if hasattr(model, "get_base_model") else model)
        # a lean model (oodcorr.modeling.plain_torch) keeps one position per row; ask transformers of its own models
        per_row = getattr(kind, "lean", False) or _per_row_logits_to_keep()
        if "logits_to_keep" in params and per_row and kind not in _SLICES_OWN_WAY:
            out = model(**kwargs, logits_to_keep=last[:, None]).logits
            if out.dim() == 3 and tuple(out.shape[:2]) == (input_ids.shape[0], 1):
                return out[:, -1, :]
            _SLICES_OWN_WAY.add(kind)  # a model class that slices logits_to_keep its own way: never ask it again
        logits = model(**kwargs).logits
        return logits[torch.arange(logits.shape[0], device=logits.device), last]
    rows = [input_ids[i][attention_mask[i].bool()].tolist() for i in range(input_ids.shape[0])]
    ids, mask = pad_batch(rows, extra["pad_id"], extra["padding_side"], width=extra["pad_to"])
    kwargs = {"input_ids": ids.to(input_ids.device), "attention_mask": mask.to(input_ids.device)}
    if "logits_to_keep" in _forward_params(model):
        kwargs["logits_to_keep"] = 1  # an integer: the last position of every row, in every release
    return model(**kwargs).logits[:, -1, :]


def verbaliser_logits(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    verb_ids: list[int] | torch.Tensor,
    extra: dict | None = None,
) -> torch.Tensor:
    """(batch, n_labels) logits of the verbaliser tokens at each row's scored position."""
    logits = scored_logits(model, input_ids, attention_mask, extra)
    verb = torch.as_tensor(verb_ids, device=logits.device)
    return logits.index_select(-1, verb).float()
