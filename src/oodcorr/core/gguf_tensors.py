"""Whether a GGUF header holds every tensor its architecture needs, at the shapes its metadata gives:
transformers starts a missing tensor from random values (a log line only) and stops on a wrong shape
only after the whole conversion.
"""

from __future__ import annotations

import re

from .gguf import GGUFHeader

# the architectures whose blocks are alike (every blk.<i> holds the same tensors, at the same shapes)
UNIFORM_BLOCKS = frozenset(
    "bloom falcon gemma2 gemma3 gpt2 llama mamba mistral nemotron phi3 qwen2 qwen2_moe qwen2moe qwen3 "
    "qwen3_moe qwen3moe stablelm starcoder2".split()
)
# what every block and the model around them need, in llama.cpp's names, for the architectures
# transformers reads with its llama-like code
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3"})
LLAMA_BLOCK = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
LLAMA_TOP = ("token_embd", "output_norm")
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.(.+)$")


def missing_tensors(h: GGUFHeader) -> str | None:
    """Whether the file holds every tensor its architecture needs, at the shapes its metadata gives
    (:func:`_llama_shapes`), from the header alone: None, or what is wrong, in a sentence naming the file."""
    path, arch = h.path, h.architecture
    names = {t.name: t for t in h.tensors}
    damaged = "the file is incomplete or damaged; download or convert it again"
    emb = names.get("token_embd.weight")
    if emb is None:
        return f"{path}: holds no token_embd.weight (the token embeddings); {damaged}"
    width = h.metadata.get(f"{arch}.embedding_length")
    if isinstance(width, int) and emb.shape and emb.shape[0] != width:
        return f"{path}: token_embd.weight is {emb.shape[0]} wide, but {arch}.embedding_length says {width}; {damaged}"
    tokens = h.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, tuple) and len(emb.shape) == 2 and emb.shape[1] < tokens[2]:
        return (
            f"{path}: its tokenizer has {tokens[2]:,} tokens but token_embd.weight only {emb.shape[1]:,} rows: the "
            f"ids from {emb.shape[1]:,} on have no embedding (an index error inside the finetune); {damaged}"
        )
    vocab = _count(h, f"{arch}.vocab_size")
    if vocab and len(emb.shape) == 2 and emb.shape[1] != vocab:
        return f"{path}: {arch}.vocab_size is {vocab}, but token_embd.weight has {emb.shape[1]} rows; {damaged}"
    out = names.get("output.weight")
    if out is not None and out.shape != emb.shape:
        return f"{path}: output.weight has shape {list(out.shape)}, token_embd.weight {list(emb.shape)}; {damaged}"
    blocks: dict[int, dict[str, tuple[int, ...]]] = {}
    for name, t in names.items():
        m = BLOCK_TENSOR.match(name)
        if m:
            blocks.setdefault(int(m.group(1)), {})[m.group(2)] = t.shape
    n = h.metadata.get(f"{arch}.block_count")
    if isinstance(n, int) and not isinstance(n, bool):
        absent = sorted(set(range(n)) - set(blocks))
        extra = sorted(set(blocks) - set(range(n)))
        if absent:
            return f"{path}: {arch}.block_count is {n} but it holds no tensor of block(s) {absent[:5]}; {damaged}"
        if extra:
            return f"{path}: {arch}.block_count is {n} but it holds tensors of block(s) {extra[:5]}; {damaged}"
    if arch in LLAMA_LIKE:
        for top in LLAMA_TOP:
            if f"{top}.weight" not in names:
                return f"{path}: holds no {top}.weight, which every {arch} model has; {damaged}"
        for i in sorted(blocks) or [0]:
            lack = [f"blk.{i}.{x}.weight" for x in LLAMA_BLOCK if f"{x}.weight" not in blocks.get(i, {})]
            if lack:
                return f"{path}: holds no {', '.join(lack[:3])}, which every {arch} block has; {damaged}"
        for i, b in sorted(blocks.items()):
            for name, (want, why) in _llama_shapes(h).items():
                if name in b and tuple(b[name]) != want:
                    return (
                        f"{path}: blk.{i}.{name} has shape {list(b[name])}, but its metadata gives {list(want)} "
                        f"({why}); {damaged}"
                    )
    if arch in UNIFORM_BLOCKS and blocks:
        every = sorted({x for b in blocks.values() for x in b})
        for i, b in sorted(blocks.items()):
            lack = [f"blk.{i}.{x}" for x in every if x not in b]
            if lack:
                return f"{path}: holds no {', '.join(lack[:3])}, which its other blocks have; {damaged}"
        for x in every:
            shapes = {i: b[x] for i, b in blocks.items()}
            common = max(set(shapes.values()), key=list(shapes.values()).count)
            odd = [i for i, sh in sorted(shapes.items()) if sh != common]
            if odd:
                return (
                    f"{path}: blk.{odd[0]}.{x} has shape {list(shapes[odd[0]])}, that tensor of the other blocks "
                    f"{list(common)}; {damaged}"
                )
    return None


def _count(h: GGUFHeader, key: str) -> int | None:
    """A positive whole number of the metadata (an array or another type: None, not checked)."""
    v = h.metadata.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _llama_shapes(h: GGUFHeader) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each :data:`LLAMA_LIKE` block tensor's shape as the metadata gives it (ggml's order: the input
    first), with why; a tensor whose numbers are absent (or per-layer arrays) is not in it."""
    a = h.architecture
    embd, heads, ff = (
        _count(h, f"{a}.{k}") for k in ("embedding_length", "attention.head_count", "feed_forward_length")
    )
    kv = _count(h, f"{a}.attention.head_count_kv") if f"{a}.attention.head_count_kv" in h.metadata else heads
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    if not embd:
        return out
    e = f"{a}.embedding_length {embd}"
    out.update({x: ((embd,), e) for x in ("attn_norm.weight", "ffn_norm.weight")})
    if ff:
        f = f"{a}.feed_forward_length {ff}, {e}"
        out.update(
            {"ffn_gate.weight": ((embd, ff), f), "ffn_up.weight": ((embd, ff), f), "ffn_down.weight": ((ff, embd), f)}
        )
    if not heads or not kv:
        return out
    # a head's length as transformers reads it: the key length, else (llama, mistral) the rotary
    # dimensions, else (not qwen3, whose default differs) the embedding length over the heads
    head = None
    for name in ("attention.key_length", *(("rope.dimension_count",) if a in ("llama", "mistral") else ())):
        if _count(h, f"{a}.{name}"):
            k, head = _count(h, f"{a}.{name}"), f"{a}.{name} {_count(h, f'{a}.{name}')}"
            break
    if head is None:
        if a == "qwen3" or embd % heads:
            return out
        k, head = embd // heads, f"{e} / {a}.attention.head_count {heads}"
    v = _count(h, f"{a}.attention.value_length") or k
    q_why = f"{a}.attention.head_count {heads} heads of {k}: {head}"
    kv_why = f"{a}.attention.head_count_kv {kv} heads of {k}: {head}"
    out.update(
        {
            "attn_q.weight": ((embd, heads * k), q_why),
            "attn_k.weight": ((embd, kv * k), kv_why),
            "attn_v.weight": ((embd, kv * v), kv_why),
            "attn_output.weight": ((heads * v, embd), q_why),
            "attn_q.bias": ((heads * k,), q_why),
            "attn_k.bias": ((kv * k,), kv_why),
            "attn_v.bias": ((kv * v,), kv_why),
        }
    )
    return out
