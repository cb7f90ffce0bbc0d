"""OPT in plain torch: ``OPTForCausalLM``'s forward pass (no cache), as transformers 5.24 computes it."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from .plain_torch_parts import (
    REQUIRED,
    Embedding,
    LayerNorm,
    LeanCausalLM,
    Linear,
    Unsupported,
    activation,
    causal_mask,
    read_settings,
    sdpa,
)

OPT_KEYS = {
    "vocab_size": REQUIRED,
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
        self.num_heads = c.num_attention_heads
        self.head_dim = c.hidden_size // c.num_attention_heads
        self.scaling = self.head_dim**-0.5
        for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
            setattr(self, name, Linear(c.hidden_size, c.hidden_size, bias=c.enable_bias))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        bsz, tgt_len, _ = hidden.size()
        q = self.q_proj(hidden) * self.scaling
        q = q.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden)
        v = self.v_proj(hidden)
        k = k.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        out = sdpa(q, k, v, mask, scaling=1.0)
        out = out.reshape(bsz, tgt_len, -1).contiguous()
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


class _OPTPositions(Embedding):
    offset = 2  # OPT's learned positions start at row 2


class _OPTDecoder(nn.Module):
    def __init__(self, c: SimpleNamespace, act):
        super().__init__()
        self.embed_tokens = Embedding(c.vocab_size, c.word_embed_proj_dim)
        self.embed_positions = _OPTPositions(c.max_position_embeddings + _OPTPositions.offset, c.hidden_size)
        projected = c.word_embed_proj_dim != c.hidden_size
        self.project_out = Linear(c.hidden_size, c.word_embed_proj_dim, bias=False) if projected else None
        self.project_in = Linear(c.word_embed_proj_dim, c.hidden_size, bias=False) if projected else None
        final = c.do_layer_norm_before and not c._remove_final_layer_norm
        self.final_layer_norm = (
            LayerNorm(c.hidden_size, elementwise_affine=c.layer_norm_elementwise_affine) if final else None
        )
        self.layers = nn.ModuleList([_OPTLayer(c, act) for _ in range(c.num_hidden_layers)])


class LeanOPT(LeanCausalLM):
    """``OPTForCausalLM``'s forward pass (no cache), modules named as transformers names them."""

    embeddings = "model.decoder.embed_tokens"

    def __init__(self, c: SimpleNamespace):
        super().__init__(c)
        act = activation(c.activation_function, c.name_or_path)
        self.model = nn.Module()
        self.model.decoder = _OPTDecoder(c, act)
        self.lm_head = Linear(c.word_embed_proj_dim, c.vocab_size, bias=False)

    @classmethod
    def settings(cls, cfg: dict, where: str) -> SimpleNamespace:
        c = read_settings(cfg, OPT_KEYS, where)
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
        mask = causal_mask(attention_mask, bsz, length, embeds.device)
        pos = dec.embed_positions(position_ids + _OPTPositions.offset)
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
