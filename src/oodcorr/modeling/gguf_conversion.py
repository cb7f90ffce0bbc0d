"""A GGUF model file converted once into an ordinary safetensors folder (rule ``convert_gguf``)."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from ..core.atomic_write import follow_umask, write_json_atomic
from ..core.digests import sha256_file
from ..core.errors import ConfigError
from ..core.gguf import GGUFError, missing_tensors, read_header
from ..core.model_dirs import gguf_file
from ..core.model_entry import ModelEntry
from .loading import check_loaded_whole

log = logging.getLogger(__name__)

MANIFEST = "gguf_conversion.json"
PROBE = "The capital of France is Paris. Premise: A man plays a guitar. Question: Is a person making music?"


def checked_header(model_entry: ModelEntry):
    """The entry's GGUF header, read and holding every tensor its architecture needs; else a ConfigError."""
    path = gguf_file(model_entry)
    try:
        header = read_header(path)
    except GGUFError as e:
        raise ConfigError(f"{model_entry.where}: {e}") from None
    problem = missing_tensors(header)
    if problem:
        raise ConfigError(f"{model_entry.where}: {problem}")
    return header


def convert(model_spec: Mapping, out_dir: str | Path, threads: int | None = None) -> dict:
    """The entry's GGUF file (rule convert_gguf's params) converted into the safetensors folder ``out_dir``."""
    model_entry = ModelEntry.from_params(model_spec)
    import torch  # torch stack: planning and the CLI never import it
    import transformers  # torch stack: planning and the CLI never import it

    if threads:
        torch.set_num_threads(int(threads))
    out_dir = Path(out_dir)
    header = checked_header(model_entry)
    src = header.path
    dtype_name = model_entry.dtype
    if dtype_name == "auto":
        raise ConfigError(f"{model_entry.where}.dtype: 'auto' for a GGUF file: name float32, bfloat16 or float16")
    dtype = getattr(torch, dtype_name)
    started = time.monotonic()
    digest = sha256_file(src)
    kw = {"gguf_file": src.name}
    log.info(
        "%s: reading %s (%s, %d tensors: %s)",
        model_entry.name,
        src,
        header.architecture,
        len(header.tensors),
        header.tensor_types,
    )
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        str(src.parent), dtype=dtype, output_loading_info=True, **kw
    )
    # a tensor the header check did not know to need: transformers would start it from random values,
    # and the saved folder would reproduce them, so the logits check below could not tell
    check_loaded_whole(model, info.get("missing_keys") or [], model_entry, str(src), "pattern")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(src.parent), **kw)
    ids = torch.tensor([tokenizer(PROBE, add_special_tokens=True)["input_ids"]])
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    chat = model_entry.gguf_chat_template
    if not chat:
        tokenizer.chat_template = None
    # the tensors in memory are plain ones, dequantised: only transformers' marker says "gguf"
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if not chat:
            for leftover in tmp.glob("chat_template*"):
                leftover.unlink()
        follow_umask(tmp)  # safetensors writes 0600 whatever the umask
        del model
        again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp), dtype=dtype, use_safetensors=True)
        with torch.no_grad():
            reloaded = again(input_ids=ids).logits
        if not torch.equal(reference, reloaded):
            diff = float((reference - reloaded).abs().max())
            raise RuntimeError(
                f"{model_entry.where}: the saved folder's logits differ from the GGUF load's (max {diff:.3g}); "
                "nothing was converted"
            )
        record = {
            "gguf_file": str(src),
            "sha256": digest,
            "bytes": header.size,
            "gguf_version": header.version,
            "architecture": header.architecture,
            "tensor_types": header.tensor_types,
            "dtype": dtype_name,
            "chat_template": "kept" if chat else ("dropped" if header.chat_template_chars else "none in the file"),
            "probe_tokens": int(ids.shape[1]),
            "probe_logits_equal": True,
            "transformers": transformers.__version__,
            "seconds": round(time.monotonic() - started, 1),
        }
        write_json_atomic(tmp / MANIFEST, record)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record
