"""OLMo2 in plain torch: ``Olmo2ForCausalLM``'s forward pass (no cache), as transformers 5.24 computes it."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from .plain_torch_parts import (
    REQUIRED,
    Embedding,
    LeanCausalLM,
    Linear,
    Unsupported,
    activation,
    causal_mask,
    read_settings,
    rope_theta,
    sdpa,
)

OLMO2_KEYS = {
    "vocab_size": REQUIRED,
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
        input_shape = hidden.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_norm(self.q_proj(hidden))
        k = self.k_norm(self.k_proj(hidden))
        v = self.v_proj(hidden)
        q = q.view(hidden_shape).transpose(1, 2)
        k = k.view(hidden_shape).transpose(1, 2)
        v = v.view(hidden_shape).transpose(1, 2)
        q_type, k_type = q.dtype, k.dtype
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = ((q * cos) + (_rotate_half(q) * sin)).to(q_type)
        k = ((k * cos) + (_rotate_half(k) * sin)).to(k_type)
        out = sdpa(q, k, v, mask, scaling=self.scaling, kv_groups=self.kv_groups)
        out = out.reshape(*input_shape, -1).contiguous()
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
        act = activation(c.hidden_act, c.name_or_path)
        self.model = nn.Module()
        self.model.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.model.layers = nn.ModuleList([_OlmoLayer(c, act) for _ in range(c.num_hidden_layers)])
        self.model.norm = _RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = Linear(c.hidden_size, c.vocab_size, bias=False)

    @classmethod
    def settings(cls, cfg: dict, where: str) -> SimpleNamespace:
        c = read_settings(cfg, OLMO2_KEYS, where)
        c.theta = rope_theta(c, where)
        if c.num_key_value_heads is None:
            c.num_key_value_heads = c.num_attention_heads
        if c.head_dim is None:
            c.head_dim = c.hidden_size // c.num_attention_heads
        if c.num_attention_heads % c.num_key_value_heads:
            raise Unsupported(f"{where}: num_attention_heads not a multiple of num_key_value_heads")
        return c

    def init_buffers(self, device) -> None:
        """The rotary embedding's inverse frequencies, as transformers computes them (float32)."""
        dim = self.config.head_dim
        base = self.config.theta
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.inv_freq = self.inv_freq.to(device)

    def hidden_states(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        hidden = self.model.embed_tokens(input_ids)
        bsz, length = hidden.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(length, device=hidden.device).unsqueeze(0)
        elif attention_mask is None:
            # transformers reads position ids that restart as packed sequences (not lean)
            diff = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
            if bool((diff != 1).any()):
                raise NotImplementedError("packed sequences (position ids that restart) need an attention mask")
        mask = causal_mask(attention_mask, bsz, length, hidden.device)
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=hidden.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * 1.0, emb.sin() * 1.0
        for layer in self.model.layers:
            hidden = layer(hidden, cos, sin, mask)
        return self.model.norm(hidden)
