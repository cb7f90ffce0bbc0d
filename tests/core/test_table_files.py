"""Local table files (oodcorr.core.table_files): the workflow's datasets and oodcorr analyse's scores
tables are refused with the same sentence for the same fault."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oodcorr.analysis.readers.tables import read_table
from oodcorr.core.errors import DataError
from oodcorr.jobs.prepare_dataset import _read_table, file_format


def _write(path, content):
    if isinstance(content, pa.Table):
        pq.write_table(content, path)
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("empty.csv", b"", "the file is empty (no header, no rows)"),
        ("blank.tsv", b"\n\n", "the file is empty (no header, no rows)"),
        ("twice.csv", b"premise,label,premise\np,x,q\n", ":1: the header names column(s) ['premise'] more than once"),
        ("header.tsv", b"premise\tlabel\n", "has a header (premise, label) but no rows"),
        ("garbage.parquet", b"PAR1 not parquet", "not a readable parquet file (ArrowInvalid"),
        ("columns.parquet", pa.table({"premise": pa.array([], pa.string())}), "has columns (premise) but no rows"),
    ],
)
def test_the_dataset_and_the_scores_table_readers_refuse_a_fault_in_the_same_words(tmp_path, name, content, says):
    path = _write(tmp_path / name, content)
    with pytest.raises(DataError) as dataset:
        _read_table(path, file_format(path))
    with pytest.raises(DataError) as scores:
        read_table(path)
    assert str(dataset.value).startswith(f"{path}") and says in str(dataset.value)
    # the scores table's reader says the same, and for a parquet file what remakes it
    assert str(scores.value).startswith(str(dataset.value))
    if name == "garbage.parquet":
        assert "rule aggregate_scores makes it again" in str(scores.value)
    else:
        assert str(scores.value) == str(dataset.value)


@pytest.mark.parametrize(
    "name, scores, dataset",
    [
        ("s.csv", "csv", "csv"),
        ("s.tsv.gz", "tsv", "tsv"),
        ("s.parquet", "parquet", "parquet"),
        ("s.jsonl", None, "jsonl"),
        # oodcorr analyse also reads a scores table saved as .txt (comma-separated) or .pq; a dataset
        # file so named needs `format:` on its entry
        ("s.txt", "csv", None),
        ("s.PQ", "parquet", None),
        ("s.xlsx", None, None),
    ],
)
def test_each_reader_takes_its_own_suffixes_from_the_one_map(tmp_path, name, scores, dataset):
    from oodcorr.core.table_files import DATASET_SUFFIXES, SCORES_SUFFIXES, suffix_format

    assert suffix_format(name, SCORES_SUFFIXES) == scores
    assert suffix_format(name, DATASET_SUFFIXES) == dataset
    if dataset is None:
        with pytest.raises(DataError, match=r"unknown format .*set `format:` on the dataset entry"):
            file_format(tmp_path / name)
    else:
        assert file_format(tmp_path / name) == dataset
    if scores == "csv":  # read as comma-separated text, whatever the name
        rows, _ = read_table(_write(tmp_path / name.removesuffix(".gz"), b"a,b\n1,2\n"))
        assert list(rows.columns) == ["a", "b"]
    elif scores is None:
        with pytest.raises(DataError, match=r"unknown table format"):
            read_table(_write(tmp_path / name, b"a,b\n1,2\n"))
