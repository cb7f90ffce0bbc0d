"""Local model folders (oodcorr.core.model_dirs): weights that are not what they claim are refused, naming the file."""

from __future__ import annotations

import re

import pytest

from oodcorr.core.errors import ConfigError


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
    for spec in ({"name": "m"}, {"name": "m", "allow_pickle_weights": True}):
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
    check_local_weights(str(folder), {"name": "m", "allow_pickle_weights": True})


def test_a_safetensors_file_cut_short_or_a_junk_config_json_is_refused(tmp_path, tiny_models):
    import shutil

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    w = folder / "model.safetensors"
    whole = w.read_bytes()
    w.write_bytes(whole[:-100])
    with pytest.raises(ConfigError, match=r"lies past the end of the file \(cut short\?\)\); it is damaged or not "):
        check_local_weights(str(folder), {"name": "m"})
    w.write_bytes(whole)
    (folder / "config.json").write_text('{"model_type": "op')
    with pytest.raises(ConfigError, match=r"config\.json is not readable JSON \(JSONDecodeError: .*\); copy or "):
        check_local_weights(str(folder), {"name": "m"})
