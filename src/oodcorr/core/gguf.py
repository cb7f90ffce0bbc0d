"""A GGUF file's header (llama.cpp's one-file model format, ggml's docs/gguf.md) read and checked before
anything loads it: the gguf package and transformers take its counts as given and spend memory on them,
so a file that claims more than it holds, is cut short, or goes beyond the limits below is refused here.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

VERSIONS = (2, 3)  # what the gguf package reads; version 1 had 32-bit counts
MAX_METADATA_BYTES = 64 * 2**20
MAX_METADATA_ITEMS = 2_000_000
MAX_STRING_BYTES = 2**20
MAX_KEY_BYTES = 1024
MAX_TENSORS = 200_000
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 3

# the GGUF architectures transformers reads (its GGUF_CONFIG_MAPPING; tests/core/test_gguf.py checks
# that the two agree) and llama.cpp's names for some of them, which transformers renames
TRANSFORMERS_ARCHITECTURES = frozenset(
    "bloom deci falcon gemma2 gemma3 gemma4 gpt2 gpt_oss lfm2 llama mamba minimax_m2 mistral nemotron "
    "phi3 qwen2 qwen2_moe qwen3 qwen3_moe stablelm starcoder2 t5 umt5".split()
)
ARCHITECTURE_ALIASES = frozenset({"qwen2moe", "qwen3moe", "gpt-oss", "minimax-m2", "t5encoder"})

# metadata value types: code -> (struct format, bytes); strings (8) and arrays (9) have their own layout
_SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
STRING, ARRAY = 8, 9


class GGUFError(ValueError):
    """A GGUF file refused before it is loaded; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    type: str  # GGML type name: F32, Q4_1, ...
    offset: int  # from the start of the data section
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    size: int
    version: int
    architecture: str
    metadata: dict = field(repr=False)  # key -> scalar, string (<= 256 bytes) or ("array", item type, count)
    tensors: tuple[Tensor, ...] = field(repr=False)
    data_offset: int = 0
    chat_template_chars: int = 0  # 0: the file has no chat template

    @property
    def tensor_types(self) -> dict[str, int]:
        return dict(Counter(t.type for t in self.tensors))


class _Cursor:
    """Reads little-endian values off a buffer, refusing any read past its end."""

    def __init__(self, buf, path: Path, size: int):
        self.buf, self.path, self.size, self.pos = buf, path, size, 0

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if start + n > self.size:  # n is a count read unsigned, or one times a size: never below 0
            raise GGUFError(
                f"{self.path}: {what} needs {n} bytes at byte {start}, past the end of the file ({self.size} bytes); "
                "it is not a whole GGUF file (cut short or damaged): copy it again"
            )
        self.pos = start + n
        return start

    def unpack(self, fmt: str, n: int, what: str):
        return struct.unpack_from(fmt, self.buf, self.take(n, what))[0]

    def string(self, what: str, limit: int, keep: int = 0) -> str | int:
        """A GGUF string: its text when at most ``keep`` bytes, else its length (its bytes skipped)."""
        n = self.unpack("<Q", 8, f"the length of {what}")
        if n > limit:
            raise GGUFError(f"{self.path}: {what} is {n:,} bytes long, over the limit of {limit:,}; refusing the file")
        start = self.take(n, what)
        if n > keep:
            return int(n)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{self.path}: {what} is not UTF-8 text; it is not a GGUF file a loader reads") from None


def _value(cur: _Cursor, kind: int, key: str, depth: int, budget: list[int]):
    if kind in _SCALARS:
        fmt, n = _SCALARS[kind]
        return cur.unpack(fmt, n, f"the value of {key!r}")
    if kind == STRING:
        return cur.string(f"the string value of {key!r}", MAX_STRING_BYTES, keep=256)
    if kind != ARRAY:
        raise GGUFError(f"{cur.path}: metadata key {key!r} has value type {kind}, which GGUF does not define")
    if depth >= MAX_ARRAY_DEPTH:
        raise GGUFError(f"{cur.path}: metadata key {key!r} nests arrays more than {MAX_ARRAY_DEPTH} deep; refusing")
    item = cur.unpack("<I", 4, f"the item type of {key!r}")
    count = cur.unpack("<Q", 8, f"the item count of {key!r}")
    budget[0] -= count
    if budget[0] < 0:
        raise GGUFError(
            f"{cur.path}: its metadata holds more than {MAX_METADATA_ITEMS:,} values (key {key!r} alone "
            f"claims {count:,}); refusing the file before a loader spends memory on them"
        )
    if item in _SCALARS:  # fixed-size items: checked against the file and skipped in one step
        cur.take(count * _SCALARS[item][1], f"the {count:,} items of {key!r}")
    else:
        for _ in range(count):
            _value(cur, item, key, depth + 1, budget)
    return ("array", item, int(count))


def read_header(path: str | Path) -> GGUFHeader:
    """The header of a GGUF file, checked; a :class:`GGUFError` naming the file otherwise."""
    path = Path(path)
    try:
        size = path.stat().st_size
        fh = open(path, "rb")
    except OSError as e:
        raise GGUFError(f"{path}: cannot be read ({e.strerror or e})") from None
    with fh:
        if fh.read(4) != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (it does not start with the bytes 'GGUF')")
        if size < 24:
            raise GGUFError(f"{path}: {size} bytes, too short for a GGUF header (24); cut short: copy it again")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, path, size)


def _parse(buf, path: Path, size: int) -> GGUFHeader:
    cur = _Cursor(buf, path, size)
    cur.pos = 4
    version = cur.unpack("<I", 4, "the version")
    if version not in VERSIONS:
        raise GGUFError(f"{path}: GGUF version {version}; the gguf package reads versions {VERSIONS[0]}-{VERSIONS[-1]}")
    n_tensors = cur.unpack("<Q", 8, "the tensor count")
    n_keys = cur.unpack("<Q", 8, "the key count")
    # the smallest key is 13 bytes (empty name, type, one byte); the smallest tensor entry 24
    if n_keys * 13 > size or n_keys > MAX_METADATA_ITEMS:
        raise GGUFError(f"{path}: its header claims {n_keys:,} metadata keys, more than a file of {size:,} bytes holds")
    if n_tensors * 24 > size or n_tensors > MAX_TENSORS:
        raise GGUFError(
            f"{path}: its header claims {n_tensors:,} tensors, more than a file of {size:,} bytes holds (or over "
            f"the limit of {MAX_TENSORS:,})"
        )
    metadata: dict = {}
    budget = [MAX_METADATA_ITEMS - n_keys]
    chat_chars = 0
    for i in range(n_keys):
        key = cur.string(f"metadata key {i}", MAX_KEY_BYTES, keep=MAX_KEY_BYTES)
        if key in metadata:
            raise GGUFError(f"{path}: metadata key {key!r} appears twice; refusing an ambiguous file")
        kind = cur.unpack("<I", 4, f"the value type of {key!r}")
        metadata[key] = _value(cur, kind, str(key), 0, budget)
        if key == "tokenizer.chat_template" and kind == STRING:
            chat_chars = metadata[key] if isinstance(metadata[key], int) else len(metadata[key])
        if cur.pos - 24 > MAX_METADATA_BYTES:
            raise GGUFError(f"{path}: its metadata is over {MAX_METADATA_BYTES // 2**20} MiB (at key {key!r})")
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{path}: its metadata has no general.architecture string; no loader can read it")
    if arch not in TRANSFORMERS_ARCHITECTURES | ARCHITECTURE_ALIASES:
        raise GGUFError(
            f"{path}: architecture {arch!r}, which transformers does not read from a GGUF file (it reads: "
            f"{', '.join(sorted(TRANSFORMERS_ARCHITECTURES))}); convert the model to safetensors with its "
            "own tools and use a path: entry"
        )
    alignment = metadata.get("general.alignment", 32)  # GGUF's default
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{path}: general.alignment is {alignment!r}, not a power of two")
    try:  # the types as transformers' GGUF loader reads them
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        raise GGUFError(f"{path}: reading it needs the gguf package (pip install -r requirements.txt)") from None

    # code -> (type name, values per block, bytes per block)
    ggml_types = {int(t): (t.name, *map(int, size)) for t, size in GGML_QUANT_SIZES.items()}
    infos = []
    names: set[str] = set()
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}", MAX_KEY_BYTES, keep=MAX_KEY_BYTES)
        if name in names:
            raise GGUFError(f"{path}: tensor {name!r} appears twice")
        names.add(name)
        n_dims = cur.unpack("<I", 4, f"the dimensions of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise GGUFError(f"{path}: tensor {name!r} claims {n_dims} dimensions; GGUF tensors have at most {MAX_DIMS}")
        shape = tuple(cur.unpack("<Q", 8, f"a dimension of tensor {name!r}") for _ in range(n_dims))
        code = cur.unpack("<I", 4, f"the type of tensor {name!r}")
        offset = cur.unpack("<Q", 8, f"the offset of tensor {name!r}")
        if code not in ggml_types:
            raise GGUFError(f"{path}: tensor {name!r} has ggml type {code}, which no GGUF reader knows")
        kind, block, per_block = ggml_types[code]
        count = math.prod(shape)
        if count % block or (shape and shape[0] % block):
            raise GGUFError(
                f"{path}: tensor {name!r} of shape {list(shape)} does not divide into blocks of {block} ({kind})"
            )
        infos.append((name, shape, kind, offset, count // block * per_block))
    data_offset = -(-cur.pos // alignment) * alignment
    data_bytes = size - data_offset
    tensors = []
    end, before = 0, None
    for name, _shape, _kind, offset, nbytes in sorted(infos, key=lambda t: (t[3], t[4])):
        if offset < end and nbytes:
            raise GGUFError(
                f"{path}: tensor {name!r} (bytes {offset:,} to {offset + nbytes:,}) overlaps tensor {before!r} (to "
                f"{end:,}): two tensors would share their bytes; the file is damaged or hostile: copy it again"
            )
        if nbytes:
            end, before = offset + nbytes, name
    for name, shape, kind, offset, nbytes in infos:
        if offset % alignment:
            raise GGUFError(f"{path}: tensor {name!r} starts at offset {offset}, not a multiple of {alignment}")
        if offset + nbytes > data_bytes:
            raise GGUFError(
                f"{path}: tensor {name!r} ({kind}, shape {list(shape)}, {nbytes:,} bytes at offset {offset:,}) "
                f"lies past the end of the file ({max(data_bytes, 0):,} bytes of tensor data): the file is cut "
                "short or its header lies; copy it again"
            )
        tensors.append(Tensor(name, shape, kind, offset, nbytes))
    return GGUFHeader(
        path=path,
        size=size,
        version=version,
        architecture=arch,
        metadata=metadata,
        tensors=tuple(tensors),
        data_offset=data_offset,
        chat_template_chars=int(chat_chars),
    )


# ---- every tensor the architecture needs, at the shapes its metadata gives: transformers starts a
# missing tensor from random values (a log line only) and stops on a wrong shape only after converting
# the architectures whose blocks are alike (every blk.<i> holds the same tensors, at the same shapes)
UNIFORM_BLOCKS = frozenset(
    "bloom falcon gemma2 gemma3 gpt2 llama mamba mistral nemotron phi3 qwen2 qwen2_moe qwen2moe qwen3 "
    "qwen3_moe qwen3moe stablelm starcoder2".split()
)
# what every block and the model around them need, in llama.cpp's names
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3"})
LLAMA_BLOCK = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
LLAMA_TOP = ("token_embd", "output_norm")
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.(.+)$")


def missing_tensors(h: GGUFHeader) -> str | None:
    """None, or what is missing or of the wrong shape (:func:`_llama_shapes`), in a sentence naming the file."""
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
    """A positive whole number of the metadata, else None (not checked)."""
    v = h.metadata.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _llama_shapes(h: GGUFHeader) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each :data:`LLAMA_LIKE` block tensor's shape by the metadata (ggml's order: the input first), with
    why; not those whose numbers are absent (or per-layer arrays)."""
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
