import json
from collections import Counter

import pytest

from oodcorr.data import balanced_sample, prepare, stratified_sample
from oodcorr.io import DataError, read_jsonl, write_jsonl_atomic

from conftest import BINARY, LABELS


def _recs(n_e, n_n):
    return ([{"premise": f"p{i}", "hypothesis": "h", "label": "entailment"} for i in range(n_e)] +
            [{"premise": f"q{i}", "hypothesis": "h", "label": "non-entailment"} for i in range(n_n)])


def test_synthetic_source_and_fingerprint():
    spec = {"source": "synthetic", "shift": "negation", "n": 50, "seed": 1}
    recs, prov = prepare("neg", spec, BINARY)
    recs2, prov2 = prepare("neg", spec, BINARY)
    assert recs == recs2 and prov["fingerprint"] == prov2["fingerprint"]
    _, prov3 = prepare("neg", dict(spec, seed=2), BINARY)
    assert prov3["fingerprint"] != prov["fingerprint"]
    assert prov["label_counts"] == {"entailment": 25, "non-entailment": 25}
    assert all(set(r) == {"premise", "hypothesis", "label", "meta"} for r in recs)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv", "parquet"])
def test_local_formats_with_field_and_label_mapping(tmp_path, fmt):
    import pandas as pd

    df = pd.DataFrame({"sentence1": ["a", "b", "c", "d"], "sentence2": ["w", "x", "y", "z"],
                       "gold": ["entails", "neutral", "contradiction", "entails"]})
    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    elif fmt == "parquet":
        df.to_parquet(path)
    else:
        df.to_csv(path, sep="," if fmt == "csv" else "\t", index=False)
    spec = {"source": "local", "path": str(path),
            "fields": {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold"},
            "label_map": {"entails": "entailment", "contradiction": "non-entailment", "neutral": None}}
    recs, prov = prepare("x", spec, BINARY)
    assert [r["premise"] for r in recs] == ["a", "c", "d"]  # neutral dropped
    assert [r["label"] for r in recs] == ["entailment", "non-entailment", "entailment"]
    assert prov["fingerprint"].startswith("sha256:") and prov["n_before_cap"] == 3


def test_unknown_label_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl_atomic(path, [{"premise": "a", "hypothesis": "b", "label": "entailment"},
                              {"premise": "a", "hypothesis": "b", "label": "maybe"}])
    with pytest.raises(DataError, match=r"d\.jsonl:2: unknown label 'maybe'"):
        prepare("x", {"source": "local", "path": str(path)}, BINARY)


def test_malformed_jsonl_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"premise": "a", "hypothesis": "b", "label": "entailment"}\n{"premise": \n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: malformed JSON"):
        read_jsonl(path)


def test_missing_file_and_empty_after_mapping(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        prepare("x", {"source": "local", "path": str(tmp_path / "nope.jsonl")}, BINARY)
    path = tmp_path / "n.jsonl"
    write_jsonl_atomic(path, [{"premise": "a", "hypothesis": "b", "label": "neutral"}])
    with pytest.raises(DataError, match="no examples left"):
        prepare("x", {"source": "local", "path": str(path), "label_map": {"neutral": None}}, BINARY)


def test_single_class_is_a_warning_not_an_error(tmp_path):
    path = tmp_path / "one.jsonl"
    write_jsonl_atomic(path, [{"premise": "a", "hypothesis": "b", "label": "entailment"}] * 3)
    recs, prov = prepare("one", {"source": "local", "path": str(path)}, BINARY)
    assert len(recs) == 3 and "single class" in prov["warning"]


def test_stratified_cap_keeps_proportions_and_is_seeded():
    recs = _recs(300, 100)
    a = stratified_sample(recs, 40, seed=1)
    assert Counter(r["label"] for r in a) == {"entailment": 30, "non-entailment": 10}
    assert a == stratified_sample(recs, 40, seed=1)
    assert a != stratified_sample(recs, 40, seed=2)
    assert stratified_sample(recs, 1000, seed=1) == recs


def test_balanced_training_sample():
    recs = _recs(300, 100)
    s = balanced_sample(recs, 64, LABELS, seed=5)
    assert Counter(r["label"] for r in s) == {"entailment": 32, "non-entailment": 32}
    assert s == balanced_sample(recs, 64, LABELS, seed=5)
    assert s != balanced_sample(recs, 64, LABELS, seed=6)
    with pytest.raises(DataError, match="needs 150 examples of label 'non-entailment'"):
        balanced_sample(recs, 300, LABELS, seed=0)
    with pytest.raises(DataError, match="not divisible"):
        balanced_sample(recs, 63, LABELS, seed=0)


def test_csv_line_numbers_survive_multiline_fields_and_empty_text_is_named(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text('premise,hypothesis,label\n"two\nlines",h,entailment\np,h,maybe\n')
    with pytest.raises(DataError, match=r"m\.csv:4: unknown label 'maybe'"):
        prepare("m", {"source": "local", "path": str(path)}, BINARY)
    path.write_text("premise,hypothesis,label\np,h,entailment\n,h,entailment\n")
    with pytest.raises(DataError, match=r"m\.csv:3: field 'premise' \(premise\) is empty"):
        prepare("m", {"source": "local", "path": str(path)}, BINARY)


def test_atomic_writes_get_the_umask_mode_not_mkstemps_private_one(tmp_path):
    import os

    from oodcorr.io import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "r.json", {"a": 1})
        os.umask(0o077)
        write_json_atomic(tmp_path / "s.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "s.json").stat().st_mode & 0o777 == 0o600
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
