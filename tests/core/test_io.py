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


def test_a_short_tag_is_the_sha256_prefix_the_lock_and_record_names_have_always_carried():
    # lock files and refusal records made by an earlier run are found again only if the tag is the same
    from oodcorr.core.digests import short_tag

    assert short_tag("/data/exp", 16) == "eaa6811d41d4bc2e"  # sha256(b"/data/exp")[:16]
    assert short_tag("/data/exp", 20).startswith(short_tag("/data/exp", 16))
    assert short_tag("/data/exp2", 16) != short_tag("/data/exp", 16)


def test_the_files_digest_covers_each_files_name_and_bytes_in_the_order_given(tmp_path):
    import hashlib

    from oodcorr.core.digests import sha256_files

    (tmp_path / "a").write_bytes(b"one")
    (tmp_path / "b").write_bytes(b"two")
    both = [("a", tmp_path / "a"), ("b", tmp_path / "b")]
    assert sha256_files(both) == hashlib.sha256(b"a\0oneb\0two").hexdigest()
    assert sha256_files(both[::-1]) != sha256_files(both)
    assert sha256_files([("renamed", tmp_path / "a"), both[1]]) != sha256_files(both)
    (tmp_path / "b").write_bytes(b"twO")
    assert sha256_files(both) != hashlib.sha256(b"a\0oneb\0two").hexdigest()
