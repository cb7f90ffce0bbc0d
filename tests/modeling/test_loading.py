"""Model loading: local paths, hub ids with pinned revisions, and the safety defaults."""

import json
import logging
import shutil
from dataclasses import replace

import pytest
import torch

from oodcorr.core.errors import ConfigError
from oodcorr.core.model_dirs import check_local_weights
from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.finetune import finetune
from oodcorr.modeling.loading import load_checkpoint, load_model, model_source

from helpers import finetune_job


def test_local_path_entry_loads_with_safetensors(tiny_models):
    spec = ModelEntry(name="local", path=str(tiny_models["olmo2"]))
    model = load_model(spec)
    assert type(model).__name__ == "Olmo2ForCausalLM"
    assert next(model.parameters()).dtype == torch.float32


def test_hub_entry_passes_revision_and_no_remote_code(monkeypatch):
    from transformers import AutoModelForCausalLM

    seen = {}

    def fake(src, **kw):
        seen.update(src=src, **kw)
        raise RuntimeError("stop before any download")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fake)
    spec = ModelEntry(name="opt", hub="facebook/opt-125m", revision="27dcfa74d334bc871f3234de431e71c6eeba5dd6")
    assert model_source(spec) == ("facebook/opt-125m", {"revision": spec.revision})
    with pytest.raises(RuntimeError, match="stop before"):
        load_model(spec)
    assert seen["src"] == "facebook/opt-125m" and seen["revision"] == spec.revision
    assert seen["trust_remote_code"] is False and seen["use_safetensors"] is True


def test_remote_code_and_pickle_weights_are_refused_without_opt_in(tmp_path, tiny_models):
    d = tmp_path / "remote"
    shutil.copytree(tiny_models["opt"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="needs remote code.*trust_remote_code: true"):
        load_model(ModelEntry(name="remote", path=str(d)))

    p = tmp_path / "pickled"
    shutil.copytree(tiny_models["opt"], p)
    (p / "model.safetensors").unlink()
    torch.save({}, p / "pytorch_model.bin")
    with pytest.raises(ConfigError, match="only in a pickle format"):
        load_model(ModelEntry(name="pickled", path=str(p)))

    with pytest.raises(ConfigError, match="not a model directory"):
        load_model(ModelEntry(name="empty", path=str(tmp_path)))


def test_lora_checkpoint_loads_as_base_plus_adapter(tmp_path, tiny_models):
    job = finetune_job(
        tmp_path,
        tiny_models["opt"],
        "lora",
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    )
    finetune(job)
    spec = ModelEntry(name="tiny", tiny={"model_type": "opt"})
    base = load_model(spec, tiny_models["opt"]).eval()
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    ck = f"{job.run_dir}/checkpoints/checkpoint-"
    with torch.no_grad():
        ref = base(input_ids=ids).logits
        at0 = load_checkpoint(spec, ck + "0", tiny_models["opt"])(input_ids=ids).logits
        at20 = load_checkpoint(spec, ck + "20", tiny_models["opt"])(input_ids=ids).logits
    torch.testing.assert_close(at0, ref)  # a fresh LoRA adapter changes nothing
    assert (at20 - ref).abs().max() > 1e-4  # the trained one does


def test_a_model_whose_files_lack_a_parameter_is_refused_when_loaded(tmp_path, tiny_models):
    """Before: transformers started the missing weights from random values and said so in a log line
    (its "MISSING ... newly initialized"); the job went on with another model than the one named."""
    from safetensors.torch import load_file, save_file

    d = tmp_path / "model"
    shutil.copytree(tiny_models["olmo2"], d)
    state = load_file(d / "model.safetensors")
    gone = sorted(k for k in state if k.endswith("mlp.down_proj.weight"))[0]
    del state[gone]
    save_file(state, d / "model.safetensors", metadata={"format": "pt"})
    spec = ModelEntry(name="cut", path=str(d))
    check_local_weights(str(d), spec)  # one file, no index: what it lacks shows only against the architecture
    with pytest.raises(ConfigError) as e:
        load_model(spec)
    msg = str(e.value)
    assert "models[cut]" in msg and str(d) in msg and gone in msg and "Olmo2ForCausalLM" in msg, msg
    with pytest.raises(ConfigError, match=gone):  # the head method asks for a new head, not for a new MLP
        load_model(replace(spec, method="head"), labels=["a", "b"], pad_token_id=0)


def test_a_head_model_gets_its_new_head_and_nothing_else_new(tiny_models, caplog):
    caplog.set_level(logging.INFO, logger="oodcorr")
    model = load_model(
        ModelEntry(name="h", path=str(tiny_models["opt"]), method="head"), labels=["a", "b"], pad_token_id=1
    )
    assert type(model).__name__ == "OPTForSequenceClassification"
    assert "a new classification head, started from random values: score.weight" in caplog.text
