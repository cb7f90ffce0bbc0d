"""Property-based tests (Hypothesis) of every reader a user's file goes through.

Two properties, for the dataset readers (``oodcorr.jobs.prepare_dataset.prepare`` on a local file, hence
``rows_to_records`` and ``map_labels``) and for ``oodcorr analyse``'s table reader
(``tables.read_table`` with ``from_long`` / ``from_wide``):

* round trip: known records written in any supported form (format, compression, encoding,
  byte-order mark, line ends) read back equal;
* anything else, from random bytes to a valid file with bytes flipped, cut or inserted,
  either reads (into well-formed records / a canonical table, every row accounted for) or
  raises ``DataError`` naming the file; never another exception.

`make test` runs the "quick" profile (tests/conftest.py: a few dozen examples each, the same
every time); `make fuzz` the "fuzz" profile (thousands each, random; OODCORR_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from oodcorr.analysis.readers import tables
from oodcorr.core.errors import DataError
from oodcorr.jobs.prepare_dataset import prepare, rows_to_records

from helpers import BINARY

LABELS3 = ["entailment", "neutral", "contradiction"]
COMPRESS = {"gzip": (gzip.compress, ".gz"), "bzip2": (bz2.compress, ".bz2"), "xz": (lzma.compress, ".xz")}
# (codec the bytes are in, encoding declared in the entry / on the command line)
ENCODINGS = [
    ("utf-8", None),
    ("utf-8-sig", None),
    ("utf-16", None),
    ("utf-16-le", "utf-16-le"),
    ("latin-1", "latin-1"),
    ("cp1252", "cp1252"),
]


def _workdir() -> Path:
    # Hypothesis runs many examples per test; pytest's tmp_path is one folder per test
    return Path(tempfile.mkdtemp(prefix="oodcorr-fuzz-"))


def texts(codec: str = "utf-8", min_size: int = 1):
    chars = st.characters(codec=codec, exclude_categories=("Cs",), exclude_characters="\x00")
    return st.text(chars, min_size=min_size, max_size=24).filter(lambda s: s.strip())


# ---- writing known data in every supported form ---------------------------------------------


def _encode(text: str, codec: str) -> bytes:
    return text.encode(codec)


def _quoting(text: str) -> int:
    # Python's csv writer (and pandas') quotes a field with a line end only when that line end is
    # part of its lineterminator: a lone CR in a field written with LF line ends would come out bare
    # and split the row. Writers that quote everything (spreadsheets do) are the form that holds it.
    return csv.QUOTE_ALL if "\r" in text or "\\r" in text else csv.QUOTE_MINIMAL


def _dataset_bytes(rows: list[dict], fmt: str, codec: str, eol: str, ascii_json: bool) -> bytes:
    if fmt == "parquet":
        buf = io.BytesIO()
        pd.DataFrame(rows, columns=["premise", "hypothesis", "label"]).to_parquet(buf)
        return buf.getvalue()
    if fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=ascii_json) + eol for r in rows)
    else:
        buf = io.StringIO(newline="")
        w = csv.DictWriter(
            buf,
            ["premise", "hypothesis", "label"],
            delimiter="," if fmt == "csv" else "\t",
            lineterminator=eol,
            quoting=_quoting(str(rows)),
        )
        w.writeheader()
        w.writerows(rows)
        text = buf.getvalue()
    return _encode(text, codec)


@st.composite
def dataset_files(draw):
    """(bytes, file name, registry entry extras, the rows written) of a valid dataset file."""
    fmt = draw(st.sampled_from(["jsonl", "csv", "tsv", "parquet"]))
    codec, declared = draw(st.sampled_from(ENCODINGS)) if fmt != "parquet" else ("utf-8", None)
    numeric = draw(st.booleans())  # raw labels 0/1/2 through a label_map, or the words
    rows = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "premise": texts(codec),
                    "hypothesis": texts(codec),
                    "label": st.sampled_from([0, 1, 2] if numeric else LABELS3),
                }
            ),
            min_size=1,
            max_size=8,
        )
    )
    if fmt in ("csv", "tsv") and numeric:
        rows = [dict(r, label=str(r["label"])) for r in rows]
    data = _dataset_bytes(
        rows,
        fmt,
        codec,
        draw(st.sampled_from(["\n", "\r\n", "\r"] if fmt == "jsonl" else ["\n", "\r\n"])),
        draw(st.booleans()),
    )
    name = f"d.{fmt}"
    comp = draw(st.sampled_from([None, *COMPRESS]))
    if comp:
        fn, suffix = COMPRESS[comp]
        data = fn(data)
        if draw(st.booleans()):  # named for it, or not: the first bytes tell
            name += suffix
    extra = {"encoding": declared} if declared else {}
    if numeric:
        extra["label_map"] = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    return data, name, extra, rows


def _binary(label) -> str | None:
    word = LABELS3[int(label)] if str(label).isdigit() else label
    return {"entailment": "entailment", "neutral": None, "contradiction": "non-entailment"}[word]


def _check_records(recs: list[dict], prov: dict) -> None:
    """Well-formed output, every row read accounted for (a record, or dropped for a counted reason)."""
    for i, r in enumerate(recs):
        assert isinstance(r["premise"], str) and r["premise"].strip()
        assert isinstance(r["hypothesis"], str) and r["hypothesis"].strip()
        assert r["label"] in BINARY["labels"]
        assert r["meta"]["index"] == i and r["meta"]["dataset"] == "x"
    dropped = sum(v if isinstance(v, int) else sum(v.values()) for v in prov["dropped"].values())
    assert prov["n_rows"] == prov["n_before_cap"] + dropped
    assert prov["n"] == len(recs) == sum(prov["label_counts"].values())


@pytest.mark.slow
@given(dataset_files())
def test_dataset_files_round_trip(f):
    data, name, extra, rows = f
    path = _workdir() / name
    path.write_bytes(data)
    want = [(r["premise"], r["hypothesis"], _binary(r["label"])) for r in rows if _binary(r["label"])]
    try:
        recs, prov = prepare("x", {"source": "local", "path": str(path), **extra}, BINARY)
    except DataError as e:  # only when label mapping leaves nothing
        assert not want and "no examples left" in str(e), e
        return
    assert [(r["premise"], r["hypothesis"], r["label"]) for r in recs] == want
    n_neutral = sum(_binary(r["label"]) is None for r in rows)
    assert prov["n_rows"] == len(rows) and prov["dropped"].get("label_mode", {}).get("neutral", 0) == n_neutral
    lines = [r["meta"]["line"] for r in recs]
    assert lines == sorted(set(lines)) and all(isinstance(x, int) and x >= 1 for x in lines)
    _check_records(recs, prov)


# ---- anything else: a read, or a DataError naming the file ------------------------------------


@st.composite
def mutated(draw, valid):
    """A valid file's bytes with a few bytes flipped, cut, inserted or deleted."""
    data = bytearray(draw(valid)[0])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[i] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[i : i + draw(st.integers(1, 16))]
    return bytes(data)


# text includes unpaired surrogates ("\ud83d": half an emoji), which JSON can carry escaped
TEXT = st.text(max_size=8) | st.sampled_from(["\ud83d", "a\udfff", "\ufeff", "\u2028", "\x85", " "])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(["premise", "hypothesis", "label", "meta", "round", "_line"]) | st.text(max_size=4)


ANY_VALUE = JSON_VALUES | st.binary(max_size=6) | st.datetimes()
LABEL_VALUES = st.sampled_from(
    [
        "entailment",
        "neutral",
        "contradiction",
        "non-entailment",
        " entailment ",
        "-1",
        "",
        "0",
        "1",
        0,
        1,
        True,
        None,
        float("nan"),
    ]
)


def row_dicts(values=JSON_VALUES):
    """Rows that are mostly usable (so that they get far into the pipeline), with odd values mixed in:
    any key, any value, a text field of another type, a label of any kind, a meta of any shape."""
    text = st.one_of(texts(), texts(), texts(), TEXT, values)
    row = st.fixed_dictionaries(
        {"premise": text, "hypothesis": text, "label": LABEL_VALUES | values},
        optional={
            "meta": st.dictionaries(st.text(max_size=4), values, max_size=3) | values,
            "round": values,
            "_line": values,
        },
    )
    extra = st.dictionaries(FIELDS, values, max_size=2)
    return st.tuples(row, extra).map(lambda r: {**r[1], **r[0]}) | st.dictionaries(FIELDS, values, max_size=6)


@st.composite
def odd_jsonl(draw):
    """JSON lines whose values have any shape: text, numbers, NaN, nulls, lists, nested objects."""
    lines = draw(st.lists(row_dicts() | JSON_VALUES, max_size=8))
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


SPECS = st.fixed_dictionaries(
    {},
    optional={
        "fields": st.sampled_from([{"premise": "meta.p"}, {"label": "round"}, {"hypothesis": "premise"}]),
        "where": st.sampled_from([{"round": "R3"}, {"meta.round": 1}, {"label": "entailment"}]),
        "label_map": st.sampled_from([{"-1": None, "": None}, {"0": "entailment", "1": "neutral"}, {"True": None}]),
        "max_examples": st.integers(1, 5),
        "encoding": st.sampled_from(["latin-1", "utf-16", "cp1252"]),
    },
)


COLUMN_VALUES = [
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    TEXT,
    st.binary(max_size=6),
    st.datetimes(),
    st.lists(st.integers(0, 9), max_size=3),
    st.fixed_dictionaries({"round": TEXT, "raw": st.binary(max_size=3)}),
]


@st.composite
def odd_parquet(draw):
    """Parquet files whose columns hold any type: bytes, dates, lists, structs, nulls; the usual
    columns usually hold text."""
    columns = ["premise", "hypothesis", "label"] + draw(st.lists(FIELDS, max_size=3, unique=True))
    n = draw(st.integers(0, 5))
    values = {}
    for c in dict.fromkeys(columns):
        kind = (
            draw(st.sampled_from([texts(), texts(), *COLUMN_VALUES]))
            if c != "label"
            else draw(st.sampled_from([LABEL_VALUES.filter(lambda v: isinstance(v, str)), *COLUMN_VALUES]))
        )
        values[c] = draw(st.lists(kind, min_size=n, max_size=n))
    buf = io.BytesIO()
    try:
        pd.DataFrame(values).to_parquet(buf)
    except Exception:  # a mix (or an unpaired surrogate) pyarrow cannot store: not a file anyone has
        assume(False)
    return buf.getvalue()


def _as_written(recs: list[dict], prov: dict) -> None:
    """What the workflow then does with them: hash, and write as UTF-8 JSON lines."""
    from oodcorr.core.digests import sha256_json

    sha256_json(recs)
    for r in recs:
        json.dumps(r, ensure_ascii=False, sort_keys=True).encode("utf-8")
    json.dumps(prov, sort_keys=True)


@given(
    data=st.one_of(st.binary(max_size=600), mutated(dataset_files()), odd_jsonl(), odd_parquet()),
    name=st.sampled_from(["d.jsonl", "d.csv", "d.tsv", "d.parquet", "d.jsonl.gz", "d.csv.bz2"]),
    spec=SPECS.map(lambda s: dict(s, meta_fields=["round", "meta", "_line"])),
)
def test_any_dataset_file_reads_or_raises_a_data_error_naming_it(data, name, spec):
    path = _workdir() / name
    path.write_bytes(data)
    try:
        recs, prov = prepare("x", {"source": "local", "path": str(path), **spec}, BINARY)
    except DataError as e:
        assert str(path) in str(e), e
        return
    _check_records(recs, prov)
    _as_written(recs, prov)


@given(rows=st.lists(row_dicts(ANY_VALUE), max_size=8), spec=SPECS.map(lambda s: dict(s, meta_fields=["round", "x"])))
def test_any_hub_rows_become_records_or_a_data_error_naming_the_source(rows, spec):
    """What a hub dataset (or parquet) hands over: Python values of any type, bytes included."""
    from oodcorr.jobs.prepare_dataset import map_labels

    where = "hub org/set@abc (default/test)"
    rows = [dict(r, _line=i + 1) for i, r in enumerate(rows)]
    dropped: dict = {}
    try:
        recs = map_labels(rows_to_records(rows, spec, where, dropped), spec.get("label_map"), BINARY, where, dropped)
    except DataError as e:
        assert str(e).startswith(where), e
        return
    assert all(isinstance(r["premise"], str) and r["label"] in BINARY["labels"] for r in recs)
    n_dropped = sum(v if isinstance(v, int) else sum(v.values()) for v in dropped.values())
    assert len(recs) + n_dropped == len(rows)
    _as_written(recs, {"dropped": dropped})


# ---- oodcorr analyse's table reader ------------------------------------------------------------

# names a table may really hold, among them the words pandas reads as "missing" by default
NA_WORDS = [
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "<NA>",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "None",
    "n/a",
    "nan",
    "null",
]
NAMES = st.sampled_from(NA_WORDS + ["1", "001", "1e3", "Mean (all)", "a,b", 'say "hi"']) | texts().map(
    str.strip
).filter(bool)


@st.composite
def score_tables(draw):
    """(long canonical frame, the in-domain testset, whether units are numeric) of a known table."""
    models = draw(st.lists(NAMES, min_size=1, max_size=2, unique=True))
    runs = draw(st.lists(NAMES, min_size=1, max_size=2, unique=True))
    numeric_units = draw(st.booleans())
    units = (
        draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=4, unique=True))
        if numeric_units
        else [
            "u-" + u
            for u in draw(
                st.lists(texts(), min_size=1, max_size=4, unique=True).map(
                    lambda us: list(dict.fromkeys(u.strip() for u in us))
                )
            )
        ]
    )
    testsets = draw(
        st.lists(NAMES, min_size=3, max_size=4, unique=True).filter(lambda ts: not {"model", "run", "step"} & set(ts))
    )
    score = st.floats(0, 1, allow_nan=False) | st.just(float("nan"))
    rows = [
        {"model": m, "run": r, "step": u, "testset": t, "accuracy": draw(score)}
        for m in models
        for r in runs
        for u in units
        for t in testsets
    ]
    return pd.DataFrame(rows), testsets[0], numeric_units


def _table_bytes(df: pd.DataFrame, suffix: str, codec: str, eol: str) -> bytes:
    if suffix == ".parquet":
        buf = io.BytesIO()
        df.to_parquet(buf)
        return buf.getvalue()
    text = df.to_csv(
        index=False,
        sep="\t" if suffix == ".tsv" else ",",
        lineterminator=eol,
        quoting=_quoting(df.to_csv(index=False) + "".join(map(str, df.columns))),
    )
    return text.encode(codec)


def _expected(long: pd.DataFrame, in_domain: str, numeric_units: bool) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            "model": long["model"].astype(str),
            "in_domain": in_domain,
            "run": long["run"].astype(str),
            "unit": long["step"].astype("int64") if numeric_units else long["step"].astype(str),
            "testset": long["testset"].astype(str),
            "score": long["accuracy"].astype(float),
        }
    )
    return _sorted(out)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(
        model=df["model"].astype(object),
        run=df["run"].astype(object),
        testset=df["testset"].astype(object),
        in_domain=df["in_domain"].astype(object),
    )
    if df["unit"].dtype != np.int64:
        df["unit"] = df["unit"].astype(object)
    return df.sort_values(["model", "run", "unit", "testset"]).reset_index(drop=True)[
        ["model", "in_domain", "run", "unit", "testset", "score"]
    ]


@st.composite
def table_forms(draw):
    suffix = draw(st.sampled_from([".csv", ".tsv", ".parquet"]))
    codec, declared = draw(st.sampled_from(ENCODINGS)) if suffix != ".parquet" else ("utf-8", None)
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    comp = draw(st.sampled_from([None, *COMPRESS]))
    named = draw(st.booleans())
    return suffix, codec, declared, eol, comp, named


def _write_table(df, form) -> tuple[Path, str | None]:
    suffix, codec, declared, eol, comp, named = form
    data = _table_bytes(df, suffix, codec, eol)
    name = "t" + suffix
    if comp:
        fn, csuffix = COMPRESS[comp]
        data = fn(data)
        name += csuffix if named else ""
    path = _workdir() / name
    path.write_bytes(data)
    return path, declared


def _read_table(path: Path, encoding: str | None):
    return tables.read_table(path, encoding) if encoding else tables.read_table(path)


def _codec_holds(df: pd.DataFrame, codec: str) -> bool:
    try:
        df.to_csv(index=False).encode(codec)
        return True
    except UnicodeEncodeError:
        return False


@given(t=score_tables(), form=table_forms())
def test_long_tables_round_trip(t, form):
    long, in_domain, numeric_units = t
    assume(_codec_holds(long, form[1]))
    path, encoding = _write_table(long, form)
    df, where = _read_table(path, encoding)
    got = tables.from_long(
        df,
        tables.Layout(unit="step", in_domain=in_domain, source=str(path), where=where, model="model", run="run"),
        testset="testset",
        score="accuracy",
    )
    pd.testing.assert_frame_equal(_sorted(got), _expected(long, in_domain, numeric_units), check_dtype=False)


@given(t=score_tables(), form=table_forms())
def test_wide_tables_round_trip(t, form):
    long, in_domain, numeric_units = t
    wide = long.pivot(index=["model", "run", "step"], columns="testset", values="accuracy").reset_index()
    wide.columns.name = None
    assume(_codec_holds(wide, form[1]))
    path, encoding = _write_table(wide, form)
    df, where = _read_table(path, encoding)
    got = tables.from_wide(
        df, tables.Layout(unit="step", in_domain=in_domain, source=str(path), where=where, model="model", run="run")
    )
    want = _expected(long, in_domain, numeric_units)
    scored = want.groupby(["model", "run", "unit"])["score"].transform(lambda s: s.notna().any())
    # a row with no score in any column analysed is left out (a tracker's rows of other metrics)
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want[scored.astype(bool)]), check_dtype=False)


@st.composite
def valid_table_bytes(draw):
    long, _, _ = draw(score_tables())
    form = draw(table_forms())
    assume(_codec_holds(long, form[1]))
    suffix, codec, declared, eol, comp, named = form
    data = _table_bytes(long, suffix, codec, eol)
    return (COMPRESS[comp][0](data) if comp else data), suffix


@given(
    data=st.one_of(
        st.binary(max_size=600),
        mutated(valid_table_bytes()),
        st.text(st.sampled_from('ab1.,\t\n\r" ;NA-'), max_size=200).map(str.encode),
    ),
    suffix=st.sampled_from([".csv", ".tsv", ".parquet", ".csv.gz"]),
    wide=st.booleans(),
    encoding=st.sampled_from([None, "latin-1"]),
)
def test_any_table_reads_or_raises_a_data_error_naming_it(data, suffix, wide, encoding):
    path = _workdir() / ("t" + suffix)
    path.write_bytes(data)
    try:
        df, where = _read_table(path, encoding)
        if wide:
            got = tables.from_wide(df, tables.Layout(unit="step", in_domain="a", source=str(path), where=where))
        else:
            got = tables.from_long(
                df,
                tables.Layout(unit="step", in_domain="a", source=str(path), where=where),
                testset="testset",
                score="accuracy",
            )
    except DataError as e:
        assert str(path) in str(e), e
        return
    assert list(got.columns) == ["model", "in_domain", "run", "unit", "testset", "score"]
    assert got["score"].dtype == float and not got["unit"].isna().any()
    assert all(isinstance(x, str) for x in got["testset"]) and (got["in_domain"] == "a").all()
    assert all(isinstance(x, str) for x in got["model"]) and all(isinstance(x, str) for x in got["run"])
    assert all(math.isnan(s) or isinstance(s, float) for s in got["score"])


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
