"""GGUF headers read and checked before any loader (oodcorr.core.gguf): hostile and damaged files
are refused with a sentence naming the file, before the gguf package or transformers spend memory.

The files are written here byte by byte (:func:`gguf_bytes`, the layout of ggml's docs/gguf.md),
and one by the gguf package's own writer to check the reader against it.
"""

from __future__ import annotations

import struct

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from oodcorr.core import gguf as G
from oodcorr.core.gguf import GGUFError, missing_tensors, read_header

U32, STR, ARR, F32 = 4, 8, 9, 6


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, value) -> bytes:
    out = s(key) + struct.pack("<I", kind)
    if kind == U32:
        return out + struct.pack("<I", value)
    if kind == STR:
        return out + s(value)
    if kind == ARR:
        item, items = value
        out += struct.pack("<IQ", item, len(items))
        return out + b"".join(s(x) if item == STR else struct.pack("<I", x) for x in items)
    raise AssertionError(kind)


def gguf_bytes(
    keys: list[bytes] | None = None,
    tensors: list[tuple[str, tuple[int, ...], int]] | None = None,
    *,
    version: int = 3,
    n_tensors: int | None = None,
    n_keys: int | None = None,
    arch: str = "llama",
    offsets: list[int] | None = None,
) -> bytes:
    """A GGUF file: ``keys`` (from :func:`kv`) after general.architecture, then F32 ``tensors``
    (name, shape, ggml type) laid out at 32-byte alignment with zero data."""
    keys = [kv("general.architecture", STR, arch), *(keys or [])]
    tensors = [("token_embd.weight", (32, 4), 0)] if tensors is None else tensors
    head = b"GGUF" + struct.pack(
        "<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(keys) if n_keys is None else n_keys
    )
    infos, data, pos = b"", b"", 0
    for i, (name, shape, code) in enumerate(tensors):
        block, per = GGML_QUANT_SIZES[GGMLQuantizationType(code)]
        n = 1
        for d in shape:
            n *= d
        nbytes = n // block * per
        off = pos if offsets is None else offsets[i]
        infos += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        infos += struct.pack("<IQ", code, off)
        data += b"\0" * nbytes + b"\0" * (-nbytes % 32)
        pos += nbytes + (-nbytes % 32)
    body = head + b"".join(keys) + infos
    return body + b"\0" * (-len(body) % 32) + data


def write(tmp_path, raw: bytes, name="m.gguf"):
    p = tmp_path / name
    p.write_bytes(raw)
    return p


def refused(tmp_path, raw: bytes, *words: str) -> str:
    p = write(tmp_path, raw)
    with pytest.raises(GGUFError) as e:
        read_header(p)
    msg = str(e.value)
    assert str(p) in msg, msg  # the sentence names the file
    for w in words:
        assert w in msg, msg
    return msg


def test_a_whole_file_is_read(tmp_path):
    raw = gguf_bytes(
        [kv("tokenizer.chat_template", STR, "{{ messages }}"), kv("llama.block_count", U32, 2)],
        [("token_embd.weight", (32, 4), 0), ("blk.0.attn_q.weight", (64, 2), 3)],
    )
    h = read_header(write(tmp_path, raw))
    assert (h.version, h.architecture) == (3, "llama")
    assert [(t.name, t.shape, t.type, t.nbytes) for t in h.tensors] == [
        ("token_embd.weight", (32, 4), "F32", 512),
        ("blk.0.attn_q.weight", (64, 2), "Q4_1", 80),
    ]
    assert h.metadata["llama.block_count"] == 2
    assert h.chat_template_chars == len("{{ messages }}")
    assert h.tensor_types == {"F32": 1, "Q4_1": 1}


def test_the_reader_agrees_with_the_gguf_packages_writer(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package (requirements.txt) is not installed")
    import numpy as np

    p = tmp_path / "w.gguf"
    w = gguf.GGUFWriter(str(p), arch="llama")
    w.add_block_count(1)
    w.add_chat_template("{% for m in messages %}{{ m }}{% endfor %}")
    w.add_token_list(["a", "b", "<s>"])
    w.add_tensor("token_embd.weight", np.ones((3, 32), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = read_header(p)
    theirs = gguf.GGUFReader(str(p))
    assert {t.name: (t.shape, t.nbytes) for t in h.tensors} == {
        t.name: (tuple(int(x) for x in t.shape), int(t.n_bytes)) for t in theirs.tensors
    }
    assert h.data_offset == theirs.data_offset
    assert h.metadata["tokenizer.ggml.tokens"] == ("array", STR, 3)
    assert h.chat_template_chars > 0


def test_not_gguf_or_unknown_version(tmp_path):
    refused(tmp_path, b"PK\x03\x04" + b"\0" * 60, "not a GGUF file")
    refused(tmp_path, b"GGUF" + b"\0" * 10, "too short")
    raw = gguf_bytes()
    refused(tmp_path, raw[:4] + struct.pack("<I", 1) + raw[8:], "version 1")
    refused(tmp_path, raw[:4] + struct.pack("<I", 7) + raw[8:], "version 7")


def test_a_header_claiming_more_than_the_file_holds(tmp_path):
    refused(tmp_path, gguf_bytes(n_tensors=2**40), "claims 1,099,511,627,776 tensors")
    refused(tmp_path, gguf_bytes(n_keys=10**12), "claims 1,000,000,000,000 metadata keys")
    # a count the file could hold but does not: the table runs past the end
    short = gguf_bytes([kv("general.name", STR, "x" * 200)], tensors=[], n_tensors=3).rstrip(b"\0")
    refused(tmp_path, short, "the name of tensor 0", "past the end")


def test_an_array_or_string_claiming_more_than_the_file_holds(tmp_path):
    huge_array = s("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, F32, 10**6)
    refused(tmp_path, gguf_bytes([huge_array]), "past the end of the file")
    huge_strings = s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 10**9)
    refused(tmp_path, gguf_bytes([huge_strings]), "more than 2,000,000 values")
    huge_string = s("general.name") + struct.pack("<IQ", STR, 2**33)
    refused(tmp_path, gguf_bytes([huge_string]), "8,589,934,592 bytes long")


def test_a_truncated_file(tmp_path):
    raw = gguf_bytes(tensors=[("token_embd.weight", (256, 8), 0)])
    refused(tmp_path, raw[: len(raw) - 100], "token_embd.weight", "past the end of the file", "copy it again")
    refused(tmp_path, raw[:40], "past the end of the file")


def test_a_tensor_pointing_outside_the_file(tmp_path):
    raw = gguf_bytes(tensors=[("a", (32,), 0), ("b", (32,), 0)], offsets=[0, 2**40])
    refused(tmp_path, raw, "'b'", "past the end of the file")
    refused(tmp_path, gguf_bytes(tensors=[("a", (32,), 0)], offsets=[4]), "not a multiple of 32")


def test_malformed_tensor_entries(tmp_path):
    refused(tmp_path, gguf_bytes(tensors=[("a", (2, 2, 2, 2, 2), 0)]), "5 dimensions")
    refused(tmp_path, gguf_bytes(tensors=[("a", (33,), 3)]), "does not divide into blocks of 32")
    raw = gguf_bytes(tensors=[("a", (32,), 0)])
    code_at = raw.rindex(b"a" + struct.pack("<I", 1)) + 1 + 4 + 8  # the name, its dimension count, its one dimension
    refused(tmp_path, raw[:code_at] + struct.pack("<I", 77) + raw[code_at + 4 :], "ggml type 77")
    refused(tmp_path, gguf_bytes(tensors=[("a", (32,), 0), ("a", (32,), 0)]), "appears twice")


def test_an_architecture_transformers_does_not_read(tmp_path):
    msg = refused(tmp_path, gguf_bytes(arch="rwkv6"), "'rwkv6'", "transformers does not read")
    assert "llama" in msg  # says what it does read
    refused(tmp_path, gguf_bytes(arch="general"), "'general'")  # a key of transformers' table, not a model
    no_arch = gguf_bytes(arch="llama").replace(b"general.architecture", b"general.architecturX")
    refused(tmp_path, no_arch, "no general.architecture")


def test_metadata_of_megabytes(tmp_path, monkeypatch):
    refused(tmp_path, gguf_bytes([kv("general.description", STR, "x" * (G.MAX_STRING_BYTES + 1))]), "over the limit")
    # many strings, each small, over the metadata bound (lowered here: the real one is 64 MiB)
    monkeypatch.setattr(G, "MAX_METADATA_BYTES", 2**20)
    tokens = kv("tokenizer.ggml.tokens", ARR, (STR, ["t" * 100] * 12_000))
    refused(tmp_path, gguf_bytes([tokens]), "metadata is over 1 MiB")
    monkeypatch.setattr(G, "MAX_METADATA_ITEMS", 1000)
    refused(tmp_path, gguf_bytes([kv("tokenizer.ggml.tokens", ARR, (STR, ["t"] * 1001))]), "more than 1,000 values")


def test_ambiguous_or_nested_metadata(tmp_path):
    refused(tmp_path, gguf_bytes([kv("general.name", STR, "a"), kv("general.name", STR, "b")]), "appears twice")
    nested = s("x") + struct.pack("<IIQ", ARR, ARR, 1) + struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", ARR, 1)
    nested += struct.pack("<IQ", U32, 1) + struct.pack("<I", 0)
    refused(tmp_path, gguf_bytes([nested]), "nests arrays more than 3 deep")
    refused(tmp_path, gguf_bytes([s("x") + struct.pack("<I", 99)]), "value type 99")
    refused(tmp_path, gguf_bytes([kv("general.alignment", U32, 24)]), "not a power of two")


def test_the_architecture_list_is_transformers_own():
    ggml = pytest.importorskip("transformers.integrations.ggml", reason="transformers is not installed")
    models = set(ggml.GGUF_CONFIG_MAPPING) - {"general", "tokenizer"}
    assert set(G.TRANSFORMERS_ARCHITECTURES) == models


# ---- every tensor its architecture needs, at the right shapes (issue 41) ----------------------------
def test_a_whole_tiny_llama_needs_nothing_more(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package (requirements.txt) is not installed")
    from helpers import tiny_llama_gguf

    assert missing_tensors(read_header(tiny_llama_gguf(tmp_path / "m.gguf", n_blocks=2))) is None


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"leave_out": ["blk.0.attn_k.weight"]}, "holds no blk.0.attn_k.weight, which every llama block has"),
        ({"leave_out": ["blk.1.ffn_down.weight"], "n_blocks": 2}, "holds no blk.1.ffn_down.weight"),
        ({"leave_out": ["output_norm.weight"]}, "holds no output_norm.weight, which every llama model has"),
        ({"leave_out": ["token_embd.weight"]}, "holds no token_embd.weight (the token embeddings)"),
        ({"rows": 12}, "its tokenizer has 16 tokens but token_embd.weight only 12 rows"),
    ],
)
def test_a_gguf_file_without_a_tensor_its_architecture_needs(tmp_path, kw, says):
    """Before: read, converted, and the logits check passed, both loads sharing the random weights
    transformers gave the tensor left out."""
    pytest.importorskip("gguf", reason="the gguf package (requirements.txt) is not installed")
    from helpers import tiny_llama_gguf

    p = tiny_llama_gguf(tmp_path / "m.gguf", **kw)
    msg = missing_tensors(read_header(p))
    assert msg is not None and msg.startswith(str(p)) and says in msg, msg


@pytest.mark.parametrize(
    "kw, says",
    [
        (
            {"shapes": {"blk.0.attn_k.weight": (16, 32)}},
            "blk.0.attn_k.weight has shape [32, 16], but its metadata gives [32, 32] (llama.attention.head_count_kv "
            "2 heads of 16: llama.rope.dimension_count 16)",
        ),
        (
            {"head_count_kv": 1},
            "blk.0.attn_k.weight has shape [32, 32], but its metadata gives [32, 16] (llama.attention.head_count_kv 1",
        ),
        (
            {"shapes": {"blk.0.ffn_up.weight": (48, 32)}},
            "blk.0.ffn_up.weight has shape [32, 48], but its metadata gives [32, 64] (llama.feed_forward_length 64",
        ),
        (
            {"shapes": {"blk.0.attn_output.weight": (32, 24)}},
            "blk.0.attn_output.weight has shape [24, 32], but its metadata gives [32, 32]",
        ),
        ({"vocab_size": 20}, "llama.vocab_size is 20, but token_embd.weight has 16 rows"),
    ],
)
def test_tensor_shapes_that_contradict_the_files_own_metadata(tmp_path, kw, says):
    """Before: the header check passed, the conversion ran (13 s, 425 MB for a real model), then transformers
    stopped with `You set ignore_mismatched_sizes to False`. Now named before anything is converted."""
    pytest.importorskip("gguf", reason="the gguf package (requirements.txt) is not installed")
    from helpers import tiny_llama_gguf

    p = tiny_llama_gguf(tmp_path / "m.gguf", **kw)
    msg = missing_tensors(read_header(p))
    assert msg is not None and msg.startswith(str(p)) and says in msg, msg


def test_blocks_against_the_block_count_and_each_other(tmp_path):
    blk = [("token_embd.weight", (32, 4), 0)]
    two = [(f"blk.{i}.{x}.weight", (32,), 0) for i in (0, 1) for x in ("a", "b")]
    raw = gguf_bytes([kv("qwen2.block_count", U32, 3)], blk + two, arch="qwen2")
    assert "block_count is 3 but it holds no tensor of block(s) [2]" in missing_tensors(
        read_header(write(tmp_path, raw))
    )
    raw = gguf_bytes([kv("gpt2.block_count", U32, 2)], blk + two[:3], arch="gpt2")  # blk.1.b left out
    assert "holds no blk.1.b.weight, which its other blocks have" in missing_tensors(read_header(write(tmp_path, raw)))
    three = two + [("blk.2.a.weight", (32,), 0), ("blk.2.b.weight", (64,), 0)]
    raw = gguf_bytes([kv("gpt2.block_count", U32, 3)], blk + three, arch="gpt2")
    assert "blk.2.b.weight has shape [64], that tensor of the other blocks [32]" in missing_tensors(
        read_header(write(tmp_path, raw))
    )
    # an architecture whose blocks differ by design (lfm2: convolution and attention blocks) is not held to it
    raw = gguf_bytes([kv("lfm2.block_count", U32, 2)], blk + two[:3], arch="lfm2")
    assert missing_tensors(read_header(write(tmp_path, raw))) is None


def test_overlapping_tensors_are_refused(tmp_path):
    """Before: read; two tensors shared bytes (and changing one changed the other)."""
    raw = gguf_bytes(tensors=[("a", (32,), 0), ("b", (32,), 0)], offsets=[0, 128])
    assert read_header(write(tmp_path, raw)).tensors[1].offset == 128  # one after the other: fine
    raw = gguf_bytes(tensors=[("a", (64,), 0), ("b", (32,), 0)], offsets=[0, 128])
    refused(tmp_path, raw, "tensor 'b' (bytes 128 to 256) overlaps tensor 'a' (to 256)")
