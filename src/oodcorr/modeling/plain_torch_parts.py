"""What the lean architectures share (:mod:`oodcorr.modeling.plain_torch`): reading a config.json, the
layers built without initialising their weights, attention (sdpa, as transformers 5.24 computes
it), and :class:`LeanCausalLM`, the base every architecture's model extends."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

# keys of any config.json that change nothing in an inference forward pass (ids, training-only
# settings, bookkeeping); every other key must be one an architecture reads (its module's ``*_KEYS``)
HARMLESS = {
    "_name_or_path",
    "architectures",
    "model_type",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "initializer_range",
    "init_std",
    "dropout",
    "attention_dropout",
    "layerdrop",
    "prefix",
    "id2label",
    "label2id",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "torchscript",
    "tokenizer_class",
    "task_specific_params",
    "finetuning_task",
    "problem_type",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# each applied to a tensor nothing else holds, so in place where torch has it (no new buffer; the
# same values); sums and products below are written in place too, as a + b == b + a exactly
ACTIVATIONS = {
    "relu": lambda x: F.relu(x, inplace=True),
    "silu": lambda x: F.silu(x, inplace=True),
    "swish": lambda x: F.silu(x, inplace=True),
    "gelu": F.gelu,
}


class Unsupported(Exception):
    """The lean path does not apply; the message says why (the caller loads with from_pretrained)."""


def _uninitialised(cls: type[nn.Module]) -> type[nn.Module]:
    """``cls`` built without initialising its weights (they are read from the checkpoint; on the meta
    device, torch's random initialisers would import torch._dynamo, seconds of imports)."""
    return type(cls.__name__, (cls,), {"reset_parameters": lambda self: None})


Linear, Embedding, LayerNorm = (_uninitialised(c) for c in (nn.Linear, nn.Embedding, nn.LayerNorm))


def read_settings(cfg: dict, known: dict, where: str) -> SimpleNamespace:
    """The config's values of ``known`` keys (their transformers defaults where absent); raises
    Unsupported for any key neither known nor harmless."""
    unknown = sorted(k for k in cfg if k not in known and k not in HARMLESS)
    if unknown:
        raise Unsupported(f"{where}: config.json key(s) {unknown} not known to the lean loader")
    out = {}
    for key, default in known.items():
        value = cfg.get(key, default)
        if value is REQUIRED:
            raise Unsupported(f"{where}: config.json lacks {key}")
        out[key] = value
    return SimpleNamespace(**out)


REQUIRED = object()


def activation(name, where: str):
    if name not in ACTIVATIONS:
        raise Unsupported(f"{where}: activation {name!r} not known to the lean loader")
    return ACTIVATIONS[name]


def rope_theta(c: SimpleNamespace, where: str) -> float:
    """The base of a default (unscaled) rotary embedding; any other rope is not lean."""
    rp = c.rope_parameters
    if rp is not None:
        if c.rope_theta is not None or c.rope_scaling is not None:
            raise Unsupported(f"{where}: both rope_parameters and legacy rope keys")
        if set(rp) - {"rope_type", "rope_theta"} or rp.get("rope_type", "default") != "default":
            raise Unsupported(f"{where}: rope_parameters {rp} (only the default rope is lean)")
        theta = rp.get("rope_theta")
    else:
        if c.rope_scaling is not None:
            raise Unsupported(f"{where}: rope_scaling {c.rope_scaling} (only the default rope is lean)")
        theta = c.rope_theta
    if theta is None:
        raise Unsupported(f"{where}: no rope_theta")
    return float(theta)


def causal_mask(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor | None:
    """The attention mask transformers' ``create_causal_mask`` builds for sdpa without a cache: None
    when no position is padded (sdpa then runs with ``is_causal``), else a boolean
    (batch, 1, length, length) mask, True where a query may read a key."""
    if attention_mask is None:
        return None
    pad = attention_mask.to(device=device, dtype=torch.bool)
    if pad.sum() == pad.numel():
        return None
    q = torch.arange(length, device=device)
    causal = q[None, None, None, :] <= q[None, None, :, None]
    mask = torch.ones((), dtype=torch.bool, device=device) & causal & pad[:, None, None, :]
    return mask.expand(batch, -1, length, length)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, heads, length, dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, heads, n_rep, length, dim).reshape(b, heads * n_rep, length, dim)


def sdpa(query, key, value, mask, scaling: float, kv_groups: int = 1) -> torch.Tensor:
    """transformers' ``sdpa_attention_forward`` without a cache, dropout or position bias:
    (batch, length, heads, head_dim), contiguous."""
    extra = {}
    q_length = query.shape[2]
    if kv_groups > 1:
        if os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0") == "1" or (
            mask is None and key.shape[-1] == value.shape[-1] <= 256
        ):
            extra["enable_gqa"] = True
        elif q_length == 1:
            b, heads, _, dim = query.shape
            query = query.reshape(b, heads // kv_groups, kv_groups, dim)
        else:
            key, value = _repeat_kv(key, kv_groups), _repeat_kv(value, kv_groups)
    is_causal = q_length > 1 and mask is None
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=0.0, scale=scaling, is_causal=is_causal, **extra
    )
    out = out.reshape(out.shape[0], -1, q_length, value.shape[-1])
    return out.transpose(1, 2).contiguous()


def keep_positions(hidden: torch.Tensor, logits_to_keep) -> torch.Tensor:
    """transformers' ``slice_logits_to_keep``: the positions whose logits are computed."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.ndim == 2:
        if logits_to_keep.dtype == torch.bool:
            return hidden[logits_to_keep]
        return torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)
    if isinstance(logits_to_keep, int):
        logits_to_keep = slice(-logits_to_keep, None)
    return hidden[:, logits_to_keep, :]


class LeanCausalLM(nn.Module):
    """What the two architectures share: a ``config`` (a namespace: ``model_type``,
    ``_attn_implementation``, ``name_or_path`` and the settings read) and where the model came from."""

    lean = True
    embeddings = ""  # the token embedding a tied LM head shares its weight with

    def __init__(self, config: SimpleNamespace):
        super().__init__()
        self.config = config

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def tie(self) -> None:
        """The LM head shares the input embedding's weight where the config ties them."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.get_submodule(self.embeddings).weight

    def hidden_states(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        """The last layer's output (after the final norm), before the LM head."""
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> SimpleNamespace:
        """What scoring reads of a transformers output: ``logits``."""
        hidden = self.hidden_states(input_ids, attention_mask, position_ids)
        return SimpleNamespace(logits=self.lm_head(keep_positions(hidden, logits_to_keep)).contiguous())

    def expected_keys(self) -> set[str]:
        """The weights a checkpoint of this architecture holds (a tied LM head may be absent)."""
        keys = set(self.state_dict(keep_vars=True))
        return keys - {"lm_head.weight"} if self.config.tie_word_embeddings else keys
