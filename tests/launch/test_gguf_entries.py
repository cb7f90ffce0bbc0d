"""Model entries that name a GGUF file: planned as one convert_gguf job whose folder every later
job loads, and a hostile or damaged file refused while planning, with the file named, before any
job runs (its header read by oodcorr.core.gguf, not by a loader)."""

from __future__ import annotations

import copy
import json
import struct
import sys
from pathlib import Path

import pytest
import yaml

from oodcorr.core.errors import ConfigError
from oodcorr.launch.budget import job_counts
from oodcorr.launch.disk_checks import check_inputs_exist
from oodcorr.modeling.loading import model_source
from oodcorr.planning import plan as plan_mod

from helpers import REPO, smk, tiny_llama_gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_gguf import gguf_bytes  # noqa: E402  (the GGUF byte writer of the header tests)


class WC(dict):
    __getattr__ = dict.__getitem__

    def keys(self):
        return super().keys()


def _config(gguf: Path, **entry) -> dict:
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg["models"] = [{"name": "lm", "path": str(gguf), **entry}]
    return cfg


def test_a_gguf_entry_is_converted_once_and_every_job_loads_the_folder(tmp_path):
    f = tiny_llama_gguf(tmp_path / "m.gguf")
    plan = plan_mod.load(_config(f), REPO)
    spec = plan.models["lm"]
    assert spec.model_entry.is_gguf and not spec.model_entry.is_tiny
    folder = plan.built_model_dir("lm")
    assert folder.endswith("/models/gguf/lm")
    assert plan.model_input(WC(model="lm")) == [folder]
    assert plan.gguf_input(WC(model="lm")) == [str(f)]
    assert job_counts(plan)["convert_gguf"] == 1
    check_inputs_exist(plan.exp)  # a readable header passes
    # the jobs load the converted folder, never the file
    assert model_source(spec.model_entry, folder) == (folder, {})
    with pytest.raises(ConfigError, match="needs its converted folder"):
        model_source(spec.model_entry, None)


@pytest.mark.parametrize(
    "raw, words",
    [
        (gguf_bytes(n_tensors=2**40), "claims 1,099,511,627,776 tensors"),
        (gguf_bytes(tensors=[("token_embd.weight", (256, 8), 0)])[:-200], "past the end of the file"),
        (gguf_bytes(arch="rwkv6"), "transformers does not read"),
        (gguf_bytes([struct.pack("<Q", 12) + b"general.name" + struct.pack("<IQ", 8, 2**34)]), "over the limit"),
        (b"<html>404 Not Found</html>" + b"\0" * 40, "not a GGUF file"),
        # a tensor left out: before, planned and converted, and transformers started it from random values
        ({"leave_out": ["blk.0.attn_k.weight"]}, "holds no blk.0.attn_k.weight"),
        # before, the finetune stopped on a token id past the embeddings
        ({"rows": 12}, "its tokenizer has 16 tokens but token_embd.weight only 12 rows"),
    ],
)
def test_a_hostile_or_damaged_file_is_refused_when_planning(tmp_path, raw, words):
    """``raw``: the file's bytes, or what tiny_llama_gguf leaves out of a valid one."""
    f = tmp_path / "m.gguf"
    if isinstance(raw, bytes):
        f.write_bytes(raw)
    else:
        tiny_llama_gguf(f, **raw)
    plan = plan_mod.load(_config(f), REPO)
    with pytest.raises(ConfigError) as e:
        check_inputs_exist(plan.exp)
    assert "models[lm]" in str(e.value) and str(f) in str(e.value) and words in str(e.value)


def test_a_gguf_entry_naming_a_folder_or_nothing(tmp_path):
    (tmp_path / "d.gguf").mkdir()
    with pytest.raises(ConfigError, match=r"models\[lm\].path: .*d.gguf is not a file"):
        check_inputs_exist(plan_mod.load(_config(tmp_path / "d.gguf"), REPO).exp)
    cfg = _config(tmp_path / "x.gguf")
    cfg["models"][0] = {"name": "lm", "package": "oodcorr/no-such.gguf"}
    with pytest.raises(ConfigError, match=r"models\[lm\].package: .*no-such.gguf does not exist"):
        check_inputs_exist(plan_mod.load(cfg, REPO).exp)


@pytest.mark.slow
def test_the_convert_gguf_rule_writes_the_folder_every_job_loads(tmp_path):
    """The rule itself, through Snakemake (its script, params and output), on a tiny file: what
    `make check-real` runs on the real one (tests/workflow/test_real_lm.py), in seconds."""
    f = tiny_llama_gguf(tmp_path / "m.gguf")
    cfg = _config(f)
    configfile = tmp_path / "gguf.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    folder = plan_mod.load(copy.deepcopy(cfg), REPO, sources=[configfile]).built_model_dir("lm")
    res = smk(tmp_path / "wd", configfile, folder)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "wd" / folder
    record = json.loads((out / "gguf_conversion.json").read_text())
    assert record["probe_logits_equal"] is True and record["architecture"] == "llama"
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.gguf"))
