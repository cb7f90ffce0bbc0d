"""Which files of a model repository a job loads (oodcorr.modeling.weights); what the weights hold is
checked against the fake hub in test_hub.py and against peft in tests/launch/test_sizing.py."""

from __future__ import annotations

from dataclasses import replace

from oodcorr.core.model_entry import ModelEntry
from oodcorr.modeling.weights import model_patterns


def test_model_files_follow_the_entry_opt_ins():
    files = [
        "config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "modeling_x.py",
        "tokenizer.model",
        "onnx/model.onnx",
        "original/consolidated.pth",
        "flax_model.msgpack",
    ]
    base = ModelEntry(name="m", hub="o/m")
    assert model_patterns(base, files) == ["config.json", "model.safetensors", "tokenizer.model"]
    # safetensors win even with the pickle opt-in; code only with trust_remote_code
    assert model_patterns(replace(base, allow_pickle_weights=True, trust_remote_code=True), files) == [
        "config.json",
        "model.safetensors",
        "modeling_x.py",
        "tokenizer.model",
    ]
