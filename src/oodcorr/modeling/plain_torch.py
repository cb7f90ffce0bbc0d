"""Scoring models without transformers' import graph: OPT and OLMo2 causal LMs in plain torch.

The forward pass is transformers' (default ``sdpa`` attention) op for op, so the logits are the same
bit for bit; modules are named as transformers names them. :func:`lean_model` returns ``None`` (and
says why) for anything it does not know, and the caller loads with ``from_pretrained`` instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import DataError
from ..core.model_entry import ModelEntry

# keys of any config.json that change nothing in an inference forward pass (ids, training-only
# settings, bookkeeping); every other key must be one an architecture reads (its module's ``*_KEYS``)
_HARMLESS = {
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
_ACTIVATIONS = {
    "relu": lambda x: F.relu(x, inplace=True),
    "silu": lambda x: F.silu(x, inplace=True),
    "swish": lambda x: F.silu(x, inplace=True),
    "gelu": F.gelu,
}


class Unsupported(Exception):
    """The lean path does not apply; the message says why (the caller loads with from_pretrained)."""


# built without initialising their weights (they are read from the checkpoint; on the meta device,
# torch's random initialisers would import torch._dynamo, seconds of imports)
Linear, Embedding, LayerNorm = (
    type(c.__name__, (c,), {"reset_parameters": lambda self: None}) for c in (nn.Linear, nn.Embedding, nn.LayerNorm)
)


def _read_settings(cfg: dict, known: dict, where: str) -> SimpleNamespace:
    """The config's values of ``known`` keys (their transformers defaults where absent); raises
    Unsupported for any key neither known nor harmless."""
    unknown = sorted(k for k in cfg if k not in known and k not in _HARMLESS)
    if unknown:
        raise Unsupported(f"{where}: config.json key(s) {unknown} not known to the lean loader")
    lacking = [key for key, default in known.items() if default is _REQUIRED and key not in cfg]
    if lacking:
        raise Unsupported(f"{where}: config.json lacks {lacking[0]}")
    return SimpleNamespace(**{key: cfg.get(key, default) for key, default in known.items()})


_REQUIRED = object()


def _activation(name, where: str):
    if name not in _ACTIVATIONS:
        raise Unsupported(f"{where}: activation {name!r} not known to the lean loader")
    return _ACTIVATIONS[name]


def _causal_mask(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor | None:
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


def _sdpa(query, key, value, mask, scaling: float, kv_groups: int = 1) -> torch.Tensor:
    """transformers' ``sdpa_attention_forward`` without a cache, dropout or position bias:
    (batch, length, heads, head_dim), contiguous."""
    extra = {}
    q_length = query.shape[2]
    if kv_groups > 1:
        if os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0") == "1" or (
            mask is None and key.shape[-1] == value.shape[-1] <= 256
        ):
            extra["enable_gqa"] = True
        else:
            key, value = key.repeat_interleave(kv_groups, dim=1), value.repeat_interleave(kv_groups, dim=1)
    is_causal = q_length > 1 and mask is None
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=0.0, scale=scaling, is_causal=is_causal, **extra
    )
    out = out.reshape(out.shape[0], -1, q_length, value.shape[-1])
    return out.transpose(1, 2).contiguous()


def _heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(batch, length, heads * head_dim) as (batch, heads, length, head_dim)."""
    return x.view(*x.shape[:-1], -1, head_dim).transpose(1, 2)


class LeanCausalLM(nn.Module):
    """What the two architectures share: a ``config`` (a namespace: ``model_type``,
    ``_attn_implementation``, ``name_or_path`` and the settings read) and the LM head over
    ``hidden_states``, the last layer's output (after the final norm)."""

    lean = True
    embeddings = ""  # the token embedding a tied LM head shares its weight with

    def __init__(self, config: SimpleNamespace):
        super().__init__()
        self.config = config

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> SimpleNamespace:
        """What scoring reads of a transformers output: ``logits``, at the positions ``logits_to_keep`` names
        (transformers' ``slice_logits_to_keep``): a (batch, 1) index per row, or the last N (0: all)."""
        hidden = self.hidden_states(input_ids, attention_mask, position_ids)
        if isinstance(logits_to_keep, torch.Tensor):
            hidden = torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)
        else:
            hidden = hidden[:, -logits_to_keep:, :]
        return SimpleNamespace(logits=self.lm_head(hidden).contiguous())


# ---- OPT: ``OPTForCausalLM``'s forward pass (no cache), as transformers 5.24 computes it
_OPT_KEYS = {
    "vocab_size": _REQUIRED,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "ffn_dim": 3072,
    "max_position_embeddings": 2048,
    "do_layer_norm_before": True,
    "_remove_final_layer_norm": False,
    "word_embed_proj_dim": None,
    "num_attention_heads": 12,
    "activation_function": "relu",
    "enable_bias": True,
    "layer_norm_elementwise_affine": True,
    "tie_word_embeddings": True,
}


class _OPTAttention(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.head_dim = c.hidden_size // c.num_attention_heads
        self.scaling = self.head_dim**-0.5
        for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
            setattr(self, name, Linear(c.hidden_size, c.hidden_size, bias=c.enable_bias))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        q = _heads(self.q_proj(hidden) * self.scaling, self.head_dim)
        k = _heads(self.k_proj(hidden), self.head_dim)
        v = _heads(self.v_proj(hidden), self.head_dim)
        out = _sdpa(q, k, v, mask, scaling=1.0)
        out = out.reshape(*hidden.shape[:-1], -1).contiguous()
        return self.out_proj(out)


class _OPTLayer(nn.Module):
    def __init__(self, c: SimpleNamespace, act):
        super().__init__()
        self.pre = c.do_layer_norm_before
        self.act = act
        self.self_attn = _OPTAttention(c)
        self.self_attn_layer_norm = LayerNorm(c.hidden_size, elementwise_affine=c.layer_norm_elementwise_affine)
        self.fc1 = Linear(c.hidden_size, c.ffn_dim, bias=c.enable_bias)
        self.fc2 = Linear(c.ffn_dim, c.hidden_size, bias=c.enable_bias)
        self.final_layer_norm = LayerNorm(c.hidden_size, elementwise_affine=c.layer_norm_elementwise_affine)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        residual = hidden
        if self.pre:
            hidden = self.self_attn_layer_norm(hidden)
        hidden = self.self_attn(hidden, mask).add_(residual)
        if not self.pre:
            hidden = self.self_attn_layer_norm(hidden)
        shape = hidden.shape
        hidden = hidden.reshape(-1, hidden.size(-1))
        residual = hidden
        if self.pre:
            hidden = self.final_layer_norm(hidden)
        hidden = self.fc2(self.act(self.fc1(hidden)))
        hidden = hidden.add_(residual).view(shape)
        if not self.pre:
            hidden = self.final_layer_norm(hidden)
        return hidden


_OPT_POSITIONS_FROM = 2  # OPT's learned positions start at row 2


class LeanOPT(LeanCausalLM):
    """``OPTForCausalLM``'s forward pass (no cache), modules named as transformers names them."""

    embeddings = "model.decoder.embed_tokens"

    def __init__(self, c: SimpleNamespace):
        super().__init__(c)
        act = _activation(c.activation_function, c.name_or_path)
        self.model = nn.Module()
        dec = self.model.decoder = nn.Module()
        dec.embed_tokens = Embedding(c.vocab_size, c.word_embed_proj_dim)
        dec.embed_positions = Embedding(c.max_position_embeddings + _OPT_POSITIONS_FROM, c.hidden_size)
        projected = c.word_embed_proj_dim != c.hidden_size
        dec.project_out = Linear(c.hidden_size, c.word_embed_proj_dim, bias=False) if projected else None
        dec.project_in = Linear(c.word_embed_proj_dim, c.hidden_size, bias=False) if projected else None
        final = c.do_layer_norm_before and not c._remove_final_layer_norm
        dec.final_layer_norm = (
            LayerNorm(c.hidden_size, elementwise_affine=c.layer_norm_elementwise_affine) if final else None
        )
        dec.layers = nn.ModuleList([_OPTLayer(c, act) for _ in range(c.num_hidden_layers)])
        self.lm_head = Linear(c.word_embed_proj_dim, c.vocab_size, bias=False)

    @classmethod
    def settings(cls, cfg: dict, where: str) -> SimpleNamespace:
        c = _read_settings(cfg, _OPT_KEYS, where)
        if c.word_embed_proj_dim is None:
            c.word_embed_proj_dim = c.hidden_size
        if c.hidden_size % c.num_attention_heads:
            raise Unsupported(f"{where}: hidden_size not divisible by num_attention_heads")
        return c

    def hidden_states(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        dec = self.model.decoder
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        embeds = dec.embed_tokens(input_ids)
        bsz, length = embeds.shape[:2]
        pos_mask = attention_mask
        if pos_mask is None:
            pos_mask = torch.ones(bsz, length, device=embeds.device)
        if position_ids is None:
            position_ids = torch.cumsum(pos_mask, dim=1)
            position_ids = (position_ids * pos_mask - 1).long()
        mask = _causal_mask(attention_mask, bsz, length, embeds.device)
        pos = dec.embed_positions(position_ids + _OPT_POSITIONS_FROM)
        if dec.project_in is not None:
            embeds = dec.project_in(embeds)
        hidden = embeds + pos.to(embeds.device)
        for layer in dec.layers:
            hidden = layer(hidden, mask)
        if dec.final_layer_norm is not None:
            hidden = dec.final_layer_norm(hidden)
        if dec.project_out is not None:
            hidden = dec.project_out(hidden)
        return hidden


# ---- OLMo2: ``Olmo2ForCausalLM``'s forward pass (no cache), as transformers 5.24 computes it
_OLMO2_KEYS = {
    "vocab_size": _REQUIRED,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "head_dim": None,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rope_parameters": None,
    "rope_theta": None,
    "rope_scaling": None,
    "attention_bias": False,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.eps = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + self.eps)
        return (self.weight * hidden).to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class _OlmoAttention(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.head_dim = c.head_dim
        self.kv_groups = c.num_attention_heads // c.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        heads, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.q_proj = Linear(c.hidden_size, heads, bias=c.attention_bias)
        self.k_proj = Linear(c.hidden_size, kv, bias=c.attention_bias)
        self.v_proj = Linear(c.hidden_size, kv, bias=c.attention_bias)
        self.o_proj = Linear(heads, c.hidden_size, bias=c.attention_bias)
        self.q_norm = _RMSNorm(heads, c.rms_norm_eps)
        self.k_norm = _RMSNorm(kv, c.rms_norm_eps)

    def forward(self, hidden, cos, sin, mask):
        q = _heads(self.q_norm(self.q_proj(hidden)), self.head_dim)
        k = _heads(self.k_norm(self.k_proj(hidden)), self.head_dim)
        v = _heads(self.v_proj(hidden), self.head_dim)
        q_type, k_type = q.dtype, k.dtype
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = ((q * cos) + (_rotate_half(q) * sin)).to(q_type)
        k = ((k * cos) + (_rotate_half(k) * sin)).to(k_type)
        out = _sdpa(q, k, v, mask, scaling=self.scaling, kv_groups=self.kv_groups)
        out = out.reshape(*hidden.shape[:-1], -1).contiguous()
        return self.o_proj(out)


class _OlmoMLP(nn.Module):
    def __init__(self, c: SimpleNamespace, act):
        super().__init__()
        self.act = act
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)).mul_(self.up_proj(x)))


class _OlmoLayer(nn.Module):
    def __init__(self, c: SimpleNamespace, act):
        super().__init__()
        self.self_attn = _OlmoAttention(c)
        self.mlp = _OlmoMLP(c, act)
        self.post_attention_layernorm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_feedforward_layernorm = _RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, hidden, cos, sin, mask):
        hidden = self.post_attention_layernorm(self.self_attn(hidden, cos, sin, mask)).add_(hidden)
        return self.post_feedforward_layernorm(self.mlp(hidden)).add_(hidden)


class LeanOlmo2(LeanCausalLM):
    """``Olmo2ForCausalLM``'s forward pass (no cache), modules named as transformers names them."""

    embeddings = "model.embed_tokens"

    def __init__(self, c: SimpleNamespace):
        super().__init__(c)
        act = _activation(c.hidden_act, c.name_or_path)
        self.model = nn.Module()
        self.model.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.model.layers = nn.ModuleList([_OlmoLayer(c, act) for _ in range(c.num_hidden_layers)])
        self.model.norm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = Linear(c.hidden_size, c.vocab_size, bias=False)

    @classmethod
    def settings(cls, cfg: dict, where: str) -> SimpleNamespace:
        c = _read_settings(cfg, _OLMO2_KEYS, where)
        # the base of a default (unscaled) rotary embedding; any other rope is not lean
        rp = c.rope_parameters
        if rp is not None:
            if c.rope_theta is not None or c.rope_scaling is not None:
                raise Unsupported(f"{where}: both rope_parameters and legacy rope keys")
            if set(rp) - {"rope_type", "rope_theta"} or rp.get("rope_type", "default") != "default":
                raise Unsupported(f"{where}: rope_parameters {rp} (only the default rope is lean)")
            c.theta = rp.get("rope_theta")
        else:
            if c.rope_scaling is not None:
                raise Unsupported(f"{where}: rope_scaling {c.rope_scaling} (only the default rope is lean)")
            c.theta = c.rope_theta
        if c.theta is None:
            raise Unsupported(f"{where}: no rope_theta")
        c.theta = float(c.theta)
        if c.num_key_value_heads is None:
            c.num_key_value_heads = c.num_attention_heads
        if c.head_dim is None:
            c.head_dim = c.hidden_size // c.num_attention_heads
        if c.num_attention_heads % c.num_key_value_heads:
            raise Unsupported(f"{where}: num_attention_heads not a multiple of num_key_value_heads")
        return c

    def hidden_states(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        hidden = self.model.embed_tokens(input_ids)
        bsz, length = hidden.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(length, device=hidden.device).unsqueeze(0)
        mask = _causal_mask(attention_mask, bsz, length, hidden.device)
        # the rotary embedding's inverse frequencies, as transformers computes them (float32, on the CPU)
        dim = self.config.head_dim
        inv_freq = 1.0 / (self.config.theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        freqs = position_ids[..., None].float() * inv_freq.to(device=hidden.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * 1.0, emb.sin() * 1.0
        for layer in self.model.layers:
            hidden = layer(hidden, cos, sin, mask)
        return self.model.norm(hidden)


ARCHITECTURES: dict[str, tuple[str, type[LeanCausalLM]]] = {
    "opt": ("OPTForCausalLM", LeanOPT),
    "olmo2": ("Olmo2ForCausalLM", LeanOlmo2),
}


def read_safetensors(files: list[Path], device="cpu") -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # torch stack: planning and the CLI never import it

    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(str(f), device=str(device)))
        except Exception as err:  # noqa: BLE001 -- safetensors' errors do not name the file
            raise DataError(f"{f}: not a readable safetensors file ({type(err).__name__}: {err})") from None
    return state


def build(folder: str | Path, dtype: str = "float32") -> LeanCausalLM:
    """The lean model of ``folder`` (config.json + safetensors) in ``dtype`` on the CPU, in eval
    mode; raises :class:`Unsupported` (with why) where it does not apply."""
    folder = Path(folder)
    where = str(folder)
    if dtype not in DTYPES:
        raise Unsupported(f"dtype {dtype!r}: the lean loader takes {', '.join(DTYPES)}")
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise Unsupported(f"{where}/config.json: {err}") from None
    kind = ARCHITECTURES.get(cfg.get("model_type"))
    if kind is None:
        raise Unsupported(f"{where}: model_type {cfg.get('model_type')!r} has no lean architecture")
    arch, cls = kind
    if cfg.get("architectures") not in (None, [arch]):
        raise Unsupported(f"{where}: architectures {cfg.get('architectures')} (the lean loader reads {arch})")
    c = cls.settings(cfg, where)
    c.model_type, c._attn_implementation, c.name_or_path = cfg["model_type"], "sdpa", where
    with torch.device("meta"):
        model = cls(c)
    index = folder / "model.safetensors.index.json"  # the shards it names, or one file
    if index.exists():
        files = [folder / s for s in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    elif (folder / "model.safetensors").exists():
        files = [folder / "model.safetensors"]
    else:
        raise Unsupported(f"{folder}: no model.safetensors or model.safetensors.index.json")
    state = read_safetensors(files)
    own = model.state_dict(keep_vars=True)
    tied_head = c.tie_word_embeddings  # the checkpoint may then leave the LM head out
    want = set(own) - {"lm_head.weight"} if tied_head else set(own)
    if set(state) - want - {"lm_head.weight"} or want - set(state):
        extra, missing = sorted(set(state) - want), sorted(want - set(state))
        raise Unsupported(f"{where}: weights differ from {arch}'s (unexpected {extra[:3]}, missing {missing[:3]})")
    if tied_head and "lm_head.weight" in state:
        if not torch.equal(state.pop("lm_head.weight"), state[f"{model.embeddings}.weight"]):
            raise Unsupported(f"{where}: lm_head.weight differs from the embeddings it is tied to")
    wrong = [k for k, t in state.items() if tuple(t.shape) != tuple(own[k].shape)]
    if wrong:
        raise Unsupported(f"{where}: weight shapes differ from {arch}'s ({wrong[:3]})")
    state = {k: t.to(dtype=DTYPES[dtype]) for k, t in state.items()}
    model.load_state_dict(state, strict=not tied_head, assign=True)
    if tied_head:
        model.lm_head.weight = model.get_submodule(model.embeddings).weight
    return model.eval()


def lean_model(folder: str | Path, model_entry: ModelEntry, method: str) -> tuple[LeanCausalLM | None, str]:
    """(the lean model, "") for a model entry's local folder, or (None, why not: the caller loads with
    ``from_pretrained``); a model that may run its own code or read pickle weights, or a head model, is not."""
    if method != "pattern":
        return None, f"method {method!r} (a head model) loads with from_pretrained"
    if model_entry.trust_remote_code:
        return None, "trust_remote_code: the model's own code runs through from_pretrained"
    if model_entry.allow_pickle_weights:
        return None, "allow_pickle_weights: pickle weights load through from_pretrained"
    try:
        return build(folder, model_entry.dtype), ""
    except Unsupported as why:
        return None, str(why)
