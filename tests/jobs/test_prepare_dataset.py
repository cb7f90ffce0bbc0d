import json
from collections import Counter

import pandas as pd
import pytest

from oodcorr.core.atomic_write import write_jsonl_atomic
from oodcorr.core.errors import DataError
from oodcorr.core.io import read_jsonl
from oodcorr.jobs.prepare_dataset import balanced_sample, prepare, stratified_sample

from helpers import BINARY, LABELS


def _recs(n_e, n_n):
    return [{"premise": f"p{i}", "hypothesis": "h", "label": "entailment"} for i in range(n_e)] + [
        {"premise": f"q{i}", "hypothesis": "h", "label": "non-entailment"} for i in range(n_n)
    ]


def test_synthetic_source_and_fingerprint():
    spec = {"source": "synthetic", "shift": "negation", "n": 50, "seed": 1}
    recs, prov = prepare("neg", spec, BINARY)
    recs2, prov2 = prepare("neg", spec, BINARY)
    assert recs == recs2 and prov["fingerprint"] == prov2["fingerprint"]
    _, prov3 = prepare("neg", dict(spec, seed=2), BINARY)
    assert prov3["fingerprint"] != prov["fingerprint"]
    assert prov["label_counts"] == {"entailment": 25, "non-entailment": 25}
    assert all(set(r) == {"premise", "hypothesis", "label", "meta"} for r in recs)


def test_synthetic_where_keeps_one_half_of_the_stream():
    """`where` selects from a synthetic stream as from a file: the entailed half of n examples, the
    same records as the stream's own entailed ones, and the fingerprint of what was kept."""
    spec = {"source": "synthetic", "shift": "in-domain", "n": 40, "seed": 1}
    whole, prov_whole = prepare("all", spec, BINARY)
    yes, prov = prepare("yes", dict(spec, where={"label": "entailment"}), BINARY)

    def key(r):
        return r["premise"], r["hypothesis"], r["label"], r["meta"]["idx"]  # (meta also names the dataset)

    assert [key(r) for r in yes] == [key(r) for r in whole if r["label"] == "entailment"] and len(yes) == 20
    assert prov["label_counts"] == {"entailment": 20} and prov["where"] == {"label": "entailment"}
    assert prov["n_rows"] == 40 and prov["fingerprint"] != prov_whole["fingerprint"]
    assert "warning" not in prov  # one class, as `where` asked: no 'single class' warning (a file's would have one)
    assert "where" not in prov_whole  # a stream without `where` is described as before
    no, _ = prepare("no", dict(spec, where={"meta.kind": "change-verb"}), BINARY)
    assert no and all(r["meta"]["kind"] == "change-verb" for r in no)
    with pytest.raises(DataError, match=r"`where` names 'colour'"):
        prepare("x", dict(spec, where={"colour": "red"}), BINARY)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv", "parquet"])
def test_local_formats_with_field_and_label_mapping(tmp_path, fmt):

    df = pd.DataFrame(
        {
            "sentence1": ["a", "b", "c", "d"],
            "sentence2": ["w", "x", "y", "z"],
            "gold": ["entails", "neutral", "contradiction", "entails"],
        }
    )
    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict("records")))
    elif fmt == "parquet":
        df.to_parquet(path)
    else:
        df.to_csv(path, sep="," if fmt == "csv" else "\t", index=False)
    spec = {
        "source": "local",
        "path": str(path),
        "fields": {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold"},
        "label_map": {"entails": "entailment", "contradiction": "non-entailment", "neutral": None},
    }
    recs, prov = prepare("x", spec, BINARY)
    assert [r["premise"] for r in recs] == ["a", "c", "d"]  # neutral dropped
    assert [r["label"] for r in recs] == ["entailment", "non-entailment", "entailment"]
    assert prov["fingerprint"].startswith("sha256:") and prov["n_before_cap"] == 3


def test_unknown_label_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl_atomic(
        path,
        [
            {"premise": "a", "hypothesis": "b", "label": "entailment"},
            {"premise": "a", "hypothesis": "b", "label": "maybe"},
        ],
    )
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


def test_csv_line_numbers_survive_multiline_fields(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text('premise,hypothesis,label\n"two\nlines",h,entailment\np,h,maybe\n')
    with pytest.raises(DataError, match=r"m\.csv:4: unknown label 'maybe'"):
        prepare("m", {"source": "local", "path": str(path)}, BINARY)


def test_atomic_writes_get_the_umask_mode_not_mkstemps_private_one(tmp_path):
    import os

    from oodcorr.core.atomic_write import write_json_atomic

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


# ---- files as people have them: compression, byte-order marks, line ends, encodings -------

ROWS = [
    {"premise": "Un café à Paris.", "hypothesis": "Il y a un café.", "label": "entailment"},
    {"premise": "Ein Bär schläft.", "hypothesis": "Kein Tier schläft.", "label": "contradiction"},
    {"premise": "Smart “quotes” – and a dash.", "hypothesis": "Plain text.", "label": "neutral"},
]


def _csv_text(rows, sep=",", eol="\n"):
    import csv
    import io

    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=["premise", "hypothesis", "label"], delimiter=sep, lineterminator=eol)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _jsonl_text(rows, eol="\n"):
    return "".join(json.dumps(r, ensure_ascii=False) + eol for r in rows)


def _expected(rows):
    keep = [r for r in rows if r["label"] != "neutral"]
    return [
        (r["premise"], r["hypothesis"], "entailment" if r["label"] == "entailment" else "non-entailment") for r in keep
    ]


def _got(recs):
    return [(r["premise"], r["hypothesis"], r["label"]) for r in recs]


@pytest.mark.parametrize(
    "name, make",
    [
        ("d.jsonl.gz", lambda: __import__("gzip").compress(_jsonl_text(ROWS).encode())),
        ("d.csv.gz", lambda: __import__("gzip").compress(_csv_text(ROWS).encode())),
        ("d.tsv.bz2", lambda: __import__("bz2").compress(_csv_text(ROWS, "\t").encode())),
        ("d.jsonl.xz", lambda: __import__("lzma").compress(_jsonl_text(ROWS).encode())),
        ("d.jsonl", lambda: __import__("gzip").compress(_jsonl_text(ROWS).encode())),  # gzip under a plain name
        ("d.csv", lambda: _csv_text(ROWS).encode("utf-8-sig")),  # byte-order mark: the header's first name intact
        ("d.jsonl", lambda: _jsonl_text(ROWS).encode("utf-8-sig")),
        ("d.csv", lambda: _csv_text(ROWS, eol="\r\n").encode()),  # Windows line ends
        ("d.jsonl", lambda: _jsonl_text(ROWS, eol="\r\n").encode()),
        ("d.jsonl", lambda: _jsonl_text(ROWS, eol="\r").encode()),  # classic Mac line ends
        ("d.csv", lambda: _csv_text(ROWS).encode("utf-16")),  # UTF-16 with its byte-order mark
        ("d.tsv.gz", lambda: __import__("gzip").compress(_csv_text(ROWS, "\t", "\r\n").encode("utf-8-sig"))),
    ],
)
def test_files_people_have_are_read_as_they_are(tmp_path, name, make):
    path = tmp_path / name
    path.write_bytes(make())
    recs, prov = prepare("x", {"source": "local", "path": str(path)}, BINARY)
    assert _got(recs) == _expected(ROWS)
    assert [r["meta"]["line"] for r in recs] == ([2, 3] if ".csv" in name or ".tsv" in name else [1, 2])
    assert prov["fingerprint"] == "sha256:" + __import__("hashlib").sha256(path.read_bytes()).hexdigest()


def test_an_undeclared_8_bit_encoding_is_refused_with_the_line_byte_and_fix(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(_csv_text(ROWS).encode("latin-1", errors="replace"))
    with pytest.raises(
        DataError,
        match=r"latin\.csv:2: not UTF-8 \(byte 0xe9 at offset \d+\); if the file is in "
        r"another encoding, set `encoding: latin-1` on the dataset entry",
    ):
        prepare("x", {"source": "local", "path": str(path)}, BINARY)
    rows = [dict(r, premise=r["premise"].replace("à", "a")) for r in ROWS]
    path.write_bytes(_csv_text(rows).encode("cp1252"))  # curly quotes: bytes 0x93/0x94, only in Windows-1252
    with pytest.raises(DataError, match=r"latin\.csv:2: not UTF-8 .*set `encoding: cp1252`"):
        prepare("x", {"source": "local", "path": str(path)}, BINARY)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "utf-16-le"])
def test_a_declared_encoding_is_used(tmp_path, encoding):
    rows = (
        ROWS
        if encoding != "latin-1"
        else [dict(r, premise=r["premise"].replace("“", '"').replace("”", '"').replace("–", "-")) for r in ROWS]
    )
    path = tmp_path / "d.csv"
    path.write_bytes(_csv_text(rows).encode(encoding))
    recs, prov = prepare("x", {"source": "local", "path": str(path), "encoding": encoding}, BINARY)
    assert _got(recs) == _expected(rows) and prov["encoding"] == encoding


def test_encoding_problems_that_are_not_guessed(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(_csv_text(ROWS).encode("utf-8-sig"))
    with pytest.raises(
        DataError,
        match=r"d\.csv: starts with a UTF-8 byte-order mark, but the encoding 'latin-1' "
        r"is declared; remove the declared encoding",
    ):
        prepare("x", {"source": "local", "path": str(path), "encoding": "latin-1"}, BINARY)
    with pytest.raises(DataError, match=r"d\.csv: unknown encoding 'latin-9000'"):
        prepare("x", {"source": "local", "path": str(path), "encoding": "latin-9000"}, BINARY)
    for codec in ("utf-16-le", "utf-16-be"):
        for rows in (ROWS, [{k: "ascii" for k in r} for r in ROWS]):  # invalid UTF-8, or valid with NULs
            path.write_bytes(_csv_text(rows).encode(codec))  # no byte-order mark
            with pytest.raises(
                DataError,
                match=r"d\.csv: looks like UTF-16 without a byte-order mark \(NUL bytes "
                rf"in every other position\); set `encoding: {codec}` on the",
            ):
                prepare("x", {"source": "local", "path": str(path)}, BINARY)
    path.write_bytes(b"premise,hypothesis,label\na\x00,b,entailment\n")
    with pytest.raises(DataError, match=r"d\.csv:2: contains a NUL character, which text never holds"):
        prepare("x", {"source": "local", "path": str(path)}, BINARY)
    path.write_bytes(_csv_text(ROWS).encode("latin-1", errors="replace"))
    with pytest.raises(
        DataError,
        match=r"d\.csv:2: not valid ascii at byte \d+ \(0xe9\); the file is damaged or in "
        r"another encoding",
    ):
        prepare("x", {"source": "local", "path": str(path), "encoding": "ascii"}, BINARY)


def test_damaged_and_empty_files_say_what_is_wrong(tmp_path):
    import gzip

    def refused(name, data, rx, **spec):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(DataError, match=rx):
            prepare("x", {"source": "local", "path": str(path), **spec}, BINARY)

    gz = gzip.compress(_jsonl_text(ROWS).encode())
    refused("t.jsonl.gz", gz[: len(gz) // 2], r"t\.jsonl\.gz: a damaged or truncated gzip file")
    refused("h.csv", b"premise,hypothesis,label\n", r"h\.csv: has a header \(premise, hypothesis, label\) but no rows")
    refused("h.tsv", b"premise\thypothesis\tlabel\r\n\r\n", r"h\.tsv: has a header .* but no rows")
    refused("e.csv", b"", r"e\.csv: the file is empty \(no header, no rows\)")
    refused("e.jsonl", b"\n\n", r"e\.jsonl: the file has no records")
    refused(
        "f.csv",
        b"premise,hypothesis,label\na,b,entailment\na, b, c,entailment\n",
        r"f\.csv:3: 4 field\(s\), but the header has 3; a field that holds a comma must be quoted",
    )
    refused(
        "d.csv", b"premise,premise,label\na,b,entailment\n", r"d\.csv:1: the header names column\(s\) \['premise'\]"
    )
    refused("p.parquet", b"PAR1 not really", r"p\.parquet: not a readable parquet file")
    refused("x.xlsx", b"PK", r"x\.xlsx: unknown format 'xlsx'; name the file \.jsonl, \.csv")
    refused(
        "n.jsonl",
        b'{"premise": "a", "hypothesis": "b", "label": ' + b"9" * 5000 + b"}\n",
        r"n\.jsonl:1: unreadable JSON",
    )
    refused("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", r"deep\.jsonl:1: ")
    refused(
        "text.jsonl",
        json.dumps({"premise": 3, "hypothesis": "b", "label": "entailment"}).encode() + b"\n",
        r"text\.jsonl:1: field 'premise' \(premise\) is not text: 3",
    )


# ---- data hygiene: what is dropped, and why, is counted and said -------------------------


def test_dropped_rows_are_counted_per_reason_logged_and_recorded(tmp_path, caplog):
    rows = (
        [{"premise": f"p{i}", "hypothesis": "h", "label": "entailment"} for i in range(5)]
        + [{"premise": f"q{i}", "hypothesis": "h", "label": "neutral"} for i in range(3)]
        + [{"premise": f"r{i}", "hypothesis": "h", "label": "contradiction"} for i in range(4)]
        + [
            {"premise": "", "hypothesis": "h", "label": "entailment"},
            {"premise": "s", "hypothesis": "  ", "label": "contradiction"},
            {"premise": None, "hypothesis": "h", "label": "entailment"},
            {"premise": "t", "hypothesis": "h", "label": "-1"},
            {"premise": "u", "hypothesis": "h", "label": "-1"},
            {"premise": "v", "hypothesis": "h", "label": None},
        ]
    )
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl_text(rows))
    spec = {"source": "local", "path": str(path), "label_map": {"-1": None, "": None}}
    with caplog.at_level("INFO", logger="oodcorr.jobs.prepare_dataset"):
        recs, prov = prepare("d", spec, dict(BINARY, name="binary"))
    assert len(recs) == 9 and prov["n_rows"] == 18 and prov["n"] == 9
    assert prov["dropped"] == {"empty_text": 3, "label_map": {"-1": 2, "": 1}, "label_mode": {"neutral": 3}}
    line = next(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert line == (
        "dataset 'd': dropped 9 row(s) of 18: 3 with an empty premise or hypothesis, "
        "1 with raw label '' (mapped to null by the entry's label_map), 2 with raw label '-1' (mapped "
        "to null by the entry's label_map), 3 labelled 'neutral' (label mode 'binary' leaves it out)"
    )
    # drops are said in the log and recorded; empty texts (an export that lost a column looks like
    # this) are also repeated at the end of the run, with the conflicts; mapped-away labels are not
    assert prov["warning"] == (
        f"dataset 'd': 3 of 18 row(s) skipped because their premise or hypothesis is empty ({path}); the rest "
        "is evaluated, and the dataset's meta file counts every drop"
    )


def test_a_missing_label_is_an_error_unless_the_entry_maps_it_to_null(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("premise,hypothesis,label\na,b,entailment\nc,d,\n")
    with pytest.raises(
        DataError,
        match=r"d\.csv:3: the label is empty; to skip rows without a label, add "
        r"`'': null` to the dataset's `label_map`",
    ):
        prepare("d", {"source": "local", "path": str(path)}, BINARY)
    recs, prov = prepare("d", {"source": "local", "path": str(path), "label_map": {"": None}}, BINARY)
    assert len(recs) == 1 and prov["dropped"] == {"label_map": {"": 1}}


def test_nothing_left_says_what_took_the_rows(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        _jsonl_text(
            [
                {"premise": "a", "hypothesis": "b", "label": "neutral"},
                {"premise": " ", "hypothesis": "b", "label": "entailment"},
            ]
        )
    )
    with pytest.raises(
        DataError,
        match=r"no examples left after label mapping \(.*d\.jsonl\): 1 with an empty "
        r"premise or hypothesis, 1 labelled 'neutral'",
    ):
        prepare("d", {"source": "local", "path": str(path)}, BINARY)


def test_duplicates_are_counted_and_kept_and_conflicts_warned_loudly(tmp_path, caplog):
    rows = [
        {"premise": "a", "hypothesis": "b", "label": "entailment"},  # 1
        {"premise": "c", "hypothesis": "d", "label": "contradiction"},  # 2
        {"premise": "a", "hypothesis": "b", "label": "entailment"},  # 3: exact duplicate of 1
        {"premise": "a", "hypothesis": "b", "label": "entailment"},  # 4: and again
        {"premise": "c", "hypothesis": "d", "label": "entailment"},  # 5: conflicts with 2
        {"premise": "e", "hypothesis": "f", "label": "neutral"},  # 6: dropped (binary)
        {"premise": "e", "hypothesis": "f", "label": "entailment"},
    ]  # 7: no conflict once 6 is dropped
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl_text(rows))
    with caplog.at_level("WARNING", logger="oodcorr.jobs.prepare_dataset"):
        recs, prov = prepare("d", {"source": "local", "path": str(path)}, BINARY)
    assert len(recs) == 6  # duplicates kept: a published testset is what it is
    assert prov["duplicates"] == {
        "exact": 2,
        "exact_lines": [[1, 3, 4]],
        "conflicting": 1,
        "conflicting_rows": 2,
        "conflicting_lines": [[2, 5]],
    }
    assert prov["warning"] == (
        "dataset 'd' has 1 premise/hypothesis pair(s) that occur with different labels "
        "(2 rows, e.g. lines [2, 5]); they are kept, so no model can get all of them right"
    )
    assert "2 row(s) repeat an earlier row exactly" in caplog.text
    _, prov1 = prepare("d1", {"source": "local", "path": str(path), "max_examples": 2}, BINARY)
    assert prov1["duplicates"] == prov["duplicates"]  # counted on the whole set, before the cap


def test_single_class_and_conflicts_share_the_warning(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        _jsonl_text(
            [
                {"premise": "a", "hypothesis": "b", "label": "entailment"},
                {"premise": "a", "hypothesis": "b", "label": "neutral"},
            ]
        )
    )
    _, prov = prepare("d", {"source": "local", "path": str(path), "label_map": {"neutral": "entailment"}}, BINARY)
    assert prov["warning"].startswith("dataset 'd' has a single class (entailment)")  # exact duplicates once mapped
    assert prov["duplicates"]["exact"] == 1 and prov["duplicates"]["conflicting"] == 0


# ---- tables and datasets as people have them ------------------------------------------------------
def test_a_tab_separated_dataset_named_csv_is_named_as_such(tmp_path):
    from oodcorr.jobs.prepare_dataset import prepare

    path = tmp_path / "export.csv"
    path.write_text("premise\thypothesis\tlabel\nA cat, asleep.\tAn animal.\tentailment\n")
    with pytest.raises(DataError) as e:
        prepare("d", {"source": "local", "path": str(path)}, BINARY)
    assert str(e.value) == (
        f"{path}:1: the header holds tabs and no comma, so the file looks tab-separated, but its name says "
        "otherwise; name it .tsv (compressed: .tsv.gz), or set `format: tsv` on the dataset entry"
    )
    recs, _ = prepare("d", {"source": "local", "path": str(path), "format": "tsv"}, BINARY)  # what it says to do
    assert recs[0]["premise"] == "A cat, asleep."


def test_a_comma_separated_dataset_named_tsv_is_named_as_such(tmp_path):
    from oodcorr.jobs.prepare_dataset import prepare

    path = tmp_path / "export.tsv"
    path.write_text("premise,hypothesis,label\nA cat.,An animal.,entailment\n")
    with pytest.raises(DataError, match=r"export\.tsv:1: the header holds commas and no tab, so the file looks "):
        prepare("d", {"source": "local", "path": str(path)}, BINARY)
