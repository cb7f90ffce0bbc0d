"""Local table files, CSV/TSV or parquet, with one set of checks wherever they are read."""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path

from .errors import DataError
from .io import delimiter_mismatch, format_suffix, read_bytes

# the format a file's name says (its suffix past a compression suffix, :func:`.io.format_suffix`)
SUFFIX_FORMATS = {
    ".csv": "csv",
    ".txt": "csv",  # comma-separated text
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
}
DELIMITERS = {"csv": ",", "tsv": "\t"}  # of the delimited formats
# the suffixes ``oodcorr analyse``'s scores table and a workflow dataset's local file are read by
SCORES_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq")
DATASET_SUFFIXES = (".jsonl", ".csv", ".tsv", ".parquet")


def suffix_format(path: str | Path, accepted: tuple[str, ...]) -> str | None:
    suffix = format_suffix(path)
    return SUFFIX_FORMATS[suffix] if suffix in accepted else None


def empty(path: Path) -> DataError:
    return DataError(f"{path}: the file is empty (no header, no rows)")


def check_header(path: Path, header: list[str], line: int) -> None:
    dup = sorted(h for h, k in Counter(header).items() if k > 1)
    if dup:
        raise DataError(f"{path}:{line}: the header names column(s) {dup} more than once")


def header_without_rows(path: Path, header) -> DataError:
    return DataError(f"{path}: has a header ({', '.join(header)}) but no rows")


def columns_without_rows(path: Path, columns) -> DataError:
    return DataError(f"{path}: has columns ({', '.join(map(str, columns))}) but no rows")


def unreadable_parquet(path: Path, e: Exception, remedy: str = "") -> DataError:
    said = f"{path}: not a readable parquet file ({type(e).__name__}: {str(e)[:200]})"
    return DataError(f"{said}: {remedy}" if remedy else said)


def delimited_rows(path: Path, text: str, fmt: str, fix: str | None = None) -> list[dict]:
    """CSV/TSV text -> rows keyed by the header, each with ``_line`` (the line it starts on).
    ``fix``: as :func:`oodcorr.core.io.delimiter_mismatch`'s."""
    delim = DELIMITERS[fmt]
    name = "comma" if fmt == "csv" else "tab"
    misnamed = delimiter_mismatch(path, text, delim, fix)
    if misnamed:
        raise DataError(misnamed)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    rows: list[dict] = []
    header = None
    start = 1
    try:
        for fields in reader:
            line, start = start, reader.line_num + 1
            if not fields:  # a blank line
                continue
            if header is None:
                header = [h.strip() for h in fields]
                check_header(path, header, line)
                continue
            if len(fields) != len(header):
                raise DataError(
                    f"{path}:{line}: {len(fields)} field(s), but the header has {len(header)}; "
                    f"a field that holds a {name} must be quoted"
                )
            rows.append(dict(zip(header, fields), _line=line))
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: not readable as {fmt.upper()} ({e})") from None
    if header is None:
        raise empty(path)
    if not rows:
        raise header_without_rows(path, header)
    return rows


def parquet_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    raw = read_bytes(path)
    try:
        table = pq.read_table(io.BytesIO(raw))
        rows = table.to_pylist()
    except Exception as e:  # pyarrow raises several types for a file that is not parquet
        raise unreadable_parquet(path, e) from None
    if not rows:
        raise columns_without_rows(path, table.column_names)
    return [dict(r, _line=i + 1) for i, r in enumerate(rows)]
