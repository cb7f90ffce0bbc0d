"""Tokenising a testset (oodcorr.jobs.tokenize_testset): a damaged input stops it with a sentence."""

from __future__ import annotations

import json
import re

import pytest

from helpers import truncated_json


def test_a_truncated_dataset_meta_file_stops_tokenising_with_a_sentence(tmp_path, tiny_models):
    from oodcorr.core.errors import ResultError
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    from helpers import LABELS, PROMPT

    data = tmp_path / "data/t.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps({"premise": "a cat", "hypothesis": "an animal", "label": "entailment"}) + "\n")
    meta = truncated_json(tmp_path / "data/t.meta.json", {"name": "t", "n": 1, "fingerprint": "sha256:" + "0" * 64})
    with pytest.raises(ResultError, match=rf"^{re.escape(str(meta))}: the prepared dataset's description is "):
        tokenize_testset(
            model_spec={"name": "m", "path": str(tiny_models["opt"])},
            built_model_dir=None,
            testset="t",
            data_path=str(data),
            data_meta=str(meta),
            labels=LABELS,
            prompt=PROMPT,
            max_length=64,
            coarse=None,
            out_path=str(tmp_path / "cache/t.pt"),
        )
