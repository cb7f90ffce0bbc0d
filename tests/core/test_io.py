"""Reading JSON from outside (oodcorr.core.io): a key given twice is refused, not its last value taken."""

from __future__ import annotations

import pytest


def test_a_json_line_naming_a_key_twice_is_refused_naming_file_and_line(tmp_path):
    """Python's json keeps the last of two values of one key: a dataset line with its label (or its
    hypothesis) twice was read as the last, in silence (issue 41)."""
    from oodcorr.core.errors import DataError
    from oodcorr.core.io import read_jsonl

    p = tmp_path / "d.jsonl"
    p.write_text(
        '{"premise": "a", "hypothesis": "b", "label": "entailment"}\n'
        '{"premise": "a", "hypothesis": "b", "label": "entailment", "label": "contradiction"}\n'
    )
    with pytest.raises(DataError, match=r"d\.jsonl:2: key 'label' appears twice in one object"):
        read_jsonl(p)
    from oodcorr.core.io import loads_json

    assert loads_json('{"a": {"b": 1}, "c": [{"b": 2}]}') == {"a": {"b": 1}, "c": [{"b": 2}]}  # once each: fine
