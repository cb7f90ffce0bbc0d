"""Local model folders (oodcorr.core.model_dirs): weights that are not what they claim are refused, naming the file."""

from __future__ import annotations

import re

import pytest

from oodcorr.core.errors import ConfigError
from oodcorr.core.model_entry import ModelEntry


# ---- a model folder with junk weights --------------------------------------------------------------
@pytest.mark.parametrize(
    "junk, why",
    [
        (b"<html>502 Bad Gateway</html>", r"its first 8 bytes give a header of \d+ bytes, in a file of 28"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all", r"its header is not JSON \(JSONDecodeError\)"),
        (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", r"its header is not a JSON mapping of tensor names"),
        (b"abc", r"3 bytes, too short for a safetensors file"),
    ],
)
def test_junk_model_safetensors_beside_a_pickle_is_refused_while_planning(tmp_path, tiny_models, junk, why):
    """Before: accepted (a .safetensors file is there), then the job stopped with the loader's
    HeaderTooLarge traceback, even with allow_pickle_weights (transformers prefers safetensors)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").write_bytes(junk)
    for spec in (ModelEntry(name="m"), ModelEntry(name="m", allow_pickle_weights=True)):
        with pytest.raises(ConfigError) as e:
            check_local_weights(str(folder), spec)
        assert re.fullmatch(
            rf"models\[m\]: {re.escape(str(folder))}/model\.safetensors is not a readable safetensors file \(.*"
            rf"{why}\); it is damaged or not weights at all: copy or download the model again\. A pickle file is "
            r"beside it \(pytorch_model\.bin\): to load that instead, move the \.safetensors file away and set "
            r"allow_pickle_weights: true on this model \(only for a model you trust\)\.",
            str(e.value),
        ), str(e.value)
    (folder / "model.safetensors").unlink()  # moved away: the pickle loads once opted in
    check_local_weights(str(folder), ModelEntry(name="m", allow_pickle_weights=True))


def test_a_safetensors_file_cut_short_or_a_junk_config_json_is_refused(tmp_path, tiny_models):
    import shutil

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    w = folder / "model.safetensors"
    whole = w.read_bytes()
    w.write_bytes(whole[:-100])
    with pytest.raises(ConfigError, match=r"lies past the end of the file \(cut short\?\)\); it is damaged or not "):
        check_local_weights(str(folder), ModelEntry(name="m"))
    w.write_bytes(whole)
    (folder / "config.json").write_text('{"model_type": "op')
    with pytest.raises(ConfigError, match=r"config\.json is not readable JSON \(JSONDecodeError: .*\); copy or "):
        check_local_weights(str(folder), ModelEntry(name="m"))


# ---- a model whole before it is used (issue 41) ----------------------------------------------------
def test_an_index_that_leaves_out_a_deleted_shard_is_refused(tmp_path, tiny_models):
    """Before: accepted (every shard the index names is there), then planned and finetuned on
    embeddings started from random values, said in one log line of transformers."""
    import json

    from oodcorr.core.model_dirs import check_local_weights

    from helpers import drop_shard, sharded_copy

    folder = sharded_copy(tiny_models["opt"], tmp_path / "sharded")
    check_local_weights(str(folder), ModelEntry(name="m"))  # whole: fine
    gone = drop_shard(folder)
    with pytest.raises(ConfigError) as e:
        check_local_weights(str(folder), ModelEntry(name="m"))
    msg = str(e.value)
    assert "models[m]" in msg and f"leaves out {gone}" in msg and "not in the folder either" in msg, msg
    # the shards renamed so that no name says how many there are: the index's own sums still tell
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for old in sorted(set(index["weight_map"].values())):
        new = old.replace("model-", "part-").split("-of-")[0] + ".safetensors"
        (folder / old).rename(folder / new)
        index["weight_map"] = {t: (new if s == old else s) for t, s in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        ConfigError,
        match=r"its metadata gives total_size [\d,]+ but the tensors it names hold [\d,]+ bytes \(some are left out\)",
    ):
        check_local_weights(str(folder), ModelEntry(name="m"))


def test_a_shard_in_the_folder_but_left_out_of_the_index_is_refused(tmp_path, tiny_models):
    import json

    from oodcorr.core.model_dirs import check_local_weights

    from helpers import sharded_copy

    folder = sharded_copy(tiny_models["opt"], tmp_path / "sharded")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    last = sorted(set(index["weight_map"].values()))[-1]
    index["weight_map"] = {t: s for t, s in index["weight_map"].items() if s != last}
    index_path.write_text(json.dumps(index))
    with pytest.raises(ConfigError, match=rf"leaves out {last} \({last} is in the folder, its tensors unnamed\)"):
        check_local_weights(str(folder), ModelEntry(name="m"))
    # one tensor of a named shard left out, or mapped to a shard that does not hold it
    index = json.loads(index_path.read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = last
    whole = json.loads(index_path.read_text())
    whole["weight_map"][""] = last
    for bad, says in ((index, "which does not hold it"), (whole, "which does not hold it")):
        index_path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=says):
            check_local_weights(str(folder), ModelEntry(name="m"))


def test_a_padded_or_overlapping_safetensors_file_is_refused_as_safetensors_refuses_it(tmp_path, tiny_models):
    """Before: accepted at planning (every tensor inside the file), then the job stopped with
    safetensors' MetadataIncompleteBuffer traceback."""
    import json
    import shutil
    import struct

    from safetensors import safe_open

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    w = folder / "model.safetensors"
    whole = w.read_bytes()
    w.write_bytes(whole + b"\0" * 64)
    with pytest.raises(Exception):  # noqa: B017 -- safetensors' own error type: the loader refuses it too
        safe_open(str(w), "pt")
    with pytest.raises(ConfigError, match=r"64 bytes at its end belong to no tensor \(padded"):
        check_local_weights(str(folder), ModelEntry(name="m"))
    (n,) = struct.unpack("<Q", whole[:8])
    header = json.loads(whole[8 : 8 + n])
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])
    a, b = header[names[0]], header[names[1]]
    b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + b["data_offsets"][1] - b["data_offsets"][0]]
    raw = json.dumps(header).encode()
    w.write_bytes(struct.pack("<Q", len(raw)) + raw + whole[8 + n :])
    with pytest.raises(ConfigError, match=r"the tensors do not lie one after another|needs [\d,]+ bytes"):
        check_local_weights(str(folder), ModelEntry(name="m"))


def test_json_that_names_a_key_twice_is_refused(tmp_path, tiny_models):
    """Python's json keeps the last of two values of a key; so would the loaders: refused instead."""
    import json
    import shutil
    import struct

    from oodcorr.core.model_dirs import check_local_weights

    from helpers import sharded_copy

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    cfg = (folder / "config.json").read_text()
    (folder / "config.json").write_text(cfg.replace('"vocab_size"', '"vocab_size": 7, "vocab_size"', 1))
    with pytest.raises(
        ConfigError, match=r"config\.json is not readable JSON \(DuplicateKey: key 'vocab_size' appears twice"
    ):
        check_local_weights(str(folder), ModelEntry(name="m"))
    (folder / "config.json").write_text(cfg)
    w = folder / "model.safetensors"
    whole = w.read_bytes()
    (n,) = struct.unpack("<Q", whole[:8])
    text = whole[8 : 8 + n].decode()
    first = next(k for k in json.loads(text) if k != "__metadata__")
    entry = json.dumps({first: json.loads(text)[first]})[1:-1]
    twice = ("{" + entry + "," + text[1:]).encode()
    w.write_bytes(struct.pack("<Q", len(twice)) + twice + whole[8 + n :])
    with pytest.raises(ConfigError, match=rf"its header is ambiguous: key '{re.escape(first)}' appears twice"):
        check_local_weights(str(folder), ModelEntry(name="m"))
    sharded = sharded_copy(tiny_models["opt"], tmp_path / "sharded")
    index = (sharded / "model.safetensors.index.json").read_text()
    (sharded / "model.safetensors.index.json").write_text(
        index.replace('"weight_map": {', '"weight_map": {"lm_head.weight": "x", ', 1).replace(
            '"metadata"', '"metadata": {}, "metadata"', 1
        )
    )
    with pytest.raises(ConfigError, match=r"index\.json: key 'metadata' appears twice in one object"):
        check_local_weights(str(sharded), ModelEntry(name="m"))
