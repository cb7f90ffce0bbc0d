"""Pattern-based scoring: prompt, verbaliser tokens, and the logits at the last real token.

The score of an example is the vector of next-token logits of the label
verbalisers (e.g. " Yes" / " No") read at the last real token of the prompt.
Whatever the padding side, the position is gathered from the attention mask,
so a pad position is never read; special tokens that a tokenizer appends
(an EOS, say) are stripped from the prompt before scoring.
"""
from __future__ import annotations

import functools
import inspect

import torch

from .config import ConfigError


def format_prompt(template: str, premise: str, hypothesis: str) -> str:
    return template.format(premise=premise.strip(), hypothesis=hypothesis.strip())


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
                f"model {model_name!r}; a verbaliser must be a single token (mind the leading space)")
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise ConfigError(f"prompt.verbalisers: two labels share one token for model {model_name!r}: {verbalisers}")
    return ids


def _appended_specials(with_special: list[int], without: list[int]) -> int:
    """How many tokens ``add_special_tokens=True`` appended after the text's own tokens."""
    n = len(without)
    for start in range(len(with_special) - n + 1):
        if with_special[start:start + n] == without:
            return len(with_special) - start - n
    return 0


def encode_prompts(tokenizer, records: list[dict], template: str, max_length: int) -> tuple[list[list[int]], int]:
    """Token ids per record, left-truncated to ``max_length``.

    Only what the tokenizer itself appends (an EOS or SEP) is stripped, so the
    score is read at the prompt's own last token; a template that ends in a
    special cue token keeps it. Left truncation keeps the end of the prompt (the
    hypothesis and the question) and a leading special token (BOS).
    Returns (ids, number of truncated prompts).
    """
    texts = [format_prompt(template, r["premise"], r["hypothesis"]) for r in records]
    enc = tokenizer(texts, add_special_tokens=True)["input_ids"]
    bare = tokenizer(texts, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    out, n_trunc = [], 0
    for ids, plain in zip(enc, bare):
        ids = list(ids)
        tail = _appended_specials(ids, list(plain))
        if tail:
            ids = ids[:-tail]
        if len(ids) > max_length:
            n_trunc += 1
            head = ids[:1] if ids[0] in special else []
            ids = head + ids[len(ids) - (max_length - len(head)):]
        out.append(ids)
    return out, n_trunc


def pad_batch(seqs: list[list[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of ``seqs`` padded to the longest, built in one tensor call each."""
    if side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', not {side!r}")
    width = max(len(s) for s in seqs)
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
    if not type(base).__module__.startswith("transformers."):
        # remote code may treat logits_to_keep differently: compute every position's logits
        params.discard("logits_to_keep")
    return params


@functools.cache
def _per_row_logits_to_keep() -> bool:
    """Whether this transformers reads a (batch, 1) integer ``logits_to_keep`` as one position
    per row (``modeling_utils.slice_logits_to_keep``, transformers 5.2x). Older releases index
    every row with every row's position ([batch, batch, 1, hidden]), which is wrong here; with
    them every position's logits are computed and the last real one gathered."""
    import transformers.modeling_utils as mu

    return hasattr(mu, "slice_logits_to_keep")


# model classes whose forward takes logits_to_keep but does not keep one position per row
_SLICES_OWN_WAY: set[type] = set()


def verbaliser_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      verb_ids: list[int] | torch.Tensor) -> torch.Tensor:
    """(batch, n_labels) logits of the verbaliser tokens at each row's last real token."""
    params = _forward_params(model)
    last = last_positions(attention_mask)
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "position_ids" in params:
        # positions count real tokens only, so left padding scores like right padding
        kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = None
    kind = type(model.get_base_model() if hasattr(model, "get_base_model") else model)
    if "logits_to_keep" in params and _per_row_logits_to_keep() and kind not in _SLICES_OWN_WAY:
        # project only the gathered position onto the vocabulary
        out = model(**kwargs, logits_to_keep=last[:, None]).logits
        if out.dim() == 3 and tuple(out.shape[:2]) == (input_ids.shape[0], 1):
            logits = out[:, -1, :]
        else:  # a model class that slices logits_to_keep its own way: never ask it again
            _SLICES_OWN_WAY.add(kind)
    if logits is None:
        logits = model(**kwargs).logits
        logits = logits[torch.arange(logits.shape[0], device=logits.device), last]
    verb = torch.as_tensor(verb_ids, device=logits.device)
    return logits.index_select(-1, verb).float()
