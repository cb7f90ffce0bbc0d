"""Reading score tables into the canonical long form the analysis uses."""

from __future__ import annotations

import csv
import fnmatch
import io
import itertools
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES  # what a score cell may say for "no value"

from ...core import table_files
from ...core.errors import DataError, did_you_mean
from ...core.io import delimiter_mismatch, format_suffix, read_bytes, read_text
from .score_ranges import check_columns, guess_metric

log = logging.getLogger(__name__)

SUMMARY_LABELS = frozenset(
    {
        "mean",
        "average",
        "avg",
        "median",
        "mode",
        "std",
        "sd",
        "stdev",
        "std dev",
        "std. dev",
        "standard deviation",
        "var",
        "variance",
        "se",
        "sem",
        "standard error",
        "min",
        "minimum",
        "max",
        "maximum",
        "range",
        "iqr",
        "sum",
        "total",
        "count",
        "q1",
        "q3",
    }
)


ENCODING_FIX = "pass --encoding {encoding}"
PARQUET_REMEDY = (
    "cut short or not parquet. If the workflow made it (results/<experiment>/scores.parquet, or "
    ".staging/scores.parquet), delete it and run the workflow again: rule aggregate_scores makes it again from "
    "the evaluation results, nothing is evaluated again; otherwise write or copy the file again"
)


def read_table(path: str | Path, encoding: str | None = None) -> tuple[pd.DataFrame, str]:
    """The table and how to name its rows in messages (``line`` for text, ``row`` for parquet)."""
    path = Path(path)
    fmt = table_files.suffix_format(path, table_files.SCORES_SUFFIXES)
    if fmt == "parquet":
        raw = read_bytes(path)
        try:
            df = pd.read_parquet(io.BytesIO(raw))
        except Exception as e:  # pyarrow raises several types for a file that is not parquet
            raise table_files.unreadable_parquet(path, e, PARQUET_REMEDY) from None
        if df.empty:
            raise table_files.columns_without_rows(path, df.columns)
        df.index = pd.RangeIndex(1, len(df) + 1)
        df.columns = [str(c).strip() for c in df.columns]
        return df, "row"
    if fmt is None:
        raise DataError(f"{path}: unknown table format {format_suffix(path)!r}; give a .csv, .tsv or .parquet file")
    text = read_text(path, encoding, ENCODING_FIX)
    sep = table_files.DELIMITERS[fmt]
    if not text.strip():
        raise table_files.empty(path)
    misnamed = delimiter_mismatch(path, text, sep)
    if misnamed:
        raise DataError(misnamed)
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline=""), delimiter=sep))]
        df = pd.read_csv(
            io.StringIO(text, newline=""),
            sep=sep,
            skip_blank_lines=False,
            dtype=str,
            keep_default_na=False,
            na_values=[""],
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, csv.Error, ValueError, OverflowError) as e:
        raise DataError(f"{path}: cannot be read as a table ({str(e).strip()})") from None
    table_files.check_header(path, header, 1)
    if df.empty:
        raise table_files.header_without_rows(path, header)
    df.index = pd.RangeIndex(2, len(df) + 2)  # line 1 is the header
    df.columns = [str(c).strip() for c in df.columns]
    df = df.apply(lambda col: col.str.strip().replace("", np.nan))
    return df, "line"


# the columns a step is found in where --unit is not given: this project's, W&B's, Hugging Face's, Lightning's
UNIT_COLUMNS = ("step", "_step", "global_step", "trainer/global_step")


def find_unit(columns, source: str) -> tuple[str, str]:
    """(the unit column, what to say of it): ``step``, else the one of :data:`UNIT_COLUMNS` the table has."""
    columns = list(columns)
    if "step" in columns:
        return "step", ""
    found = [c for c in UNIT_COLUMNS if c in columns]
    if len(found) == 1:
        return found[0], f"{source}: the unit is column {found[0]!r} (no column 'step'; --unit names another)"
    if found:
        raise DataError(
            f"{source}: no column 'step', and several that may hold the step: {found}; name one with --unit"
        )
    raise DataError(
        f"{source}: no unit column: none of {list(UNIT_COLUMNS)}; name the column of the unit (the training step, "
        f"or a run label) with --unit; columns are {columns}"
    )


def _norm_label(v) -> str:
    s = re.sub(r"\s+", " ", str(v)).strip().lower()
    s = re.sub(r"\s*\(.*\)\s*$", "", s)
    return s.rstrip(":.").strip()


def drop_summary_rows(
    df: pd.DataFrame, unit: str, source: str, where: str = "line", labels=SUMMARY_LABELS
) -> pd.DataFrame:
    """Drop empty rows and summary-statistic rows (logged); error on unlabelled data rows."""
    if unit not in df.columns:
        raise DataError(f"{source}: no unit column {unit!r}; columns are {list(df.columns)}")
    others = [c for c in df.columns if c != unit]
    empty = df.isna().all(axis=1) | (df[unit].isna() & df[others].isna().all(axis=1))
    if empty.any():  # their line numbers as runs of consecutive ones: ``3, 5-7``
        idx = sorted(int(i) for i in df.index[empty])
        runs = [[v for _, v in g] for _, g in itertools.groupby(enumerate(idx), lambda p: p[1] - p[0])]
        said = ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
        log.warning("%s: excluded %d empty row(s) (%s %s)", source, int(empty.sum()), where, said)
    df = df[~empty]
    no_label = df[unit].isna() | (df[unit].astype(str).str.strip() == "")
    if no_label.any():
        raise DataError(
            f"{source}: {where} {df.index[no_label][0]} has scores but no value in the unit column {unit!r}"
        )
    labels = {_norm_label(x) for x in labels}
    summary = df[unit].map(lambda v: isinstance(v, str) and _norm_label(v) in labels)
    for idx, v in df.loc[summary, unit].items():
        log.warning("%s: excluded %s %s, unit %r: a summary row, not a unit of observation", source, where, idx, v)
    df = df[~summary]
    if df.empty:
        raise DataError(f"{source}: no rows left once empty rows and summary rows (mean, std, ...) are excluded")
    return df


def _names(df: pd.DataFrame, col: str, what: str, source: str, where: str) -> pd.Series:
    """A column of names (model, run, testset) as text; an empty cell is an error naming its row."""
    missing = df[col].isna()
    if missing.any():
        raise DataError(f"{source}: {where} {df.index[missing][0]} has no {what} (column {col!r} is empty there)")
    return df[col].astype(str)


def _numeric_units(s: pd.Series) -> pd.Series:
    """Units as numbers when every one parses as a number (then they are ordered)."""
    num = pd.to_numeric(s, errors="coerce")
    return num if num.notna().all() else s.astype(str)


def _as_numbers(df: pd.DataFrame, col: str) -> tuple[pd.Series, pd.Series]:
    """(``col`` as numbers, where it holds text that is no number): pandas' missing-value words
    (``NA``, ``nan``, ...) and empty cells are missing, not text."""
    s = df[col]
    if s.dtype == object or pd.api.types.is_string_dtype(s):
        s = s.astype(object).map(lambda v: np.nan if isinstance(v, str) and v.strip() in STR_NA_VALUES else v)
    v = pd.to_numeric(s, errors="coerce")
    return v, v.isna() & s.notna()


def _numeric(df: pd.DataFrame, col: str, source: str, where: str) -> pd.Series:
    """A score column as floats; missing-value words and empty cells are missing, other text an error."""
    v, bad = _as_numbers(df, col)
    if bad.any():
        i = df.index[bad][0]
        raise DataError(
            f"{source}: column {col!r} is not numeric ({where} {i}: {df.at[i, col]!r}); "
            "exclude it or name it as the model/run column"
        )
    inf = np.isinf(v.astype(float))
    if inf.any():  # no score is infinite: said, then left out as missing (the statistics drop it)
        lines = [int(i) if isinstance(i, (int, np.integer)) else i for i in df.index[inf][:5]]
        log.warning(
            "%s: column %r holds %d infinite score(s) (%s %s%s); each is left out, as a missing score, of "
            "every cell that uses it: fix the table if they stand for real values",
            source,
            col,
            int(inf.sum()),
            where,
            ", ".join(map(str, lines)),
            ", ..." if inf.sum() > 5 else "",
        )
    return v.astype(float)


def _require_columns(df: pd.DataFrame, columns, source: str, what: str = "") -> None:
    for c in columns:
        if c not in df.columns:
            raise DataError(f"{source}: no column {c!r}{what}; columns are {list(df.columns)}")


def with_sizes(long: pd.DataFrame, sizes: dict[str, float] | None, source: str) -> pd.DataFrame:
    """``long`` with a column ``n`` of items from ``sizes``: testset -> items, ``*`` for the testsets not named."""
    if not sizes:
        return long
    names = set(long["testset"])
    unknown = [k for k in sizes if k != "*" and k not in names]
    if unknown:
        raise DataError(
            f"{source}: --items names {unknown}, which are no testsets of the table; testsets are {sorted(names)}"
        )
    for k, v in sizes.items():
        if not (isinstance(v, (int, float)) and v >= 1 and float(v).is_integer()):
            raise DataError(f"{source}: --items {k}={v!r}: the items behind a score are a whole number of 1 or more")
    n = long["testset"].map(lambda t: sizes.get(t, sizes.get("*", math.nan))).astype(float)
    return long.assign(n=n)


def matching(names, patterns, flag: str) -> list[str]:
    """The names (in their order) that ``patterns`` name: each an exact name, else a case-sensitive glob."""
    names = list(names)
    chosen: set[str] = set()
    unmatched = []
    for p in patterns or ():
        hit = {p} if p in names else {n for n in names if fnmatch.fnmatchcase(n, p)}
        if not hit:
            unmatched.append(p)
        chosen |= hit
    if unmatched:
        near = "".join(did_you_mean(p, names) for p in unmatched[:1])
        raise DataError(f"{flag}: nothing is named {', '.join(map(repr, unmatched))}{near}; the names are {names}")
    return [n for n in names if n in chosen]


def column_metrics(columns, named: dict[str, str], default: str) -> tuple[dict[str, str], dict[str, str]]:
    """(column -> metric, column -> the metric guessed from its name): the metric ``named`` gives (an exact
    name first, else the globs matching it, which must agree), else the one its name says, else ``default``."""
    out, guessed = {}, {}
    for c in columns:
        if c in named:
            out[c] = named[c]
            continue
        said = {m for p, m in named.items() if fnmatch.fnmatchcase(c, p)}
        if len(said) > 1:
            raise DataError(f"--metric: column {c!r} is matched by globs naming different metrics {sorted(said)}")
        if said:
            out[c] = said.pop()
        elif (g := guess_metric(c)) is not None:
            out[c] = guessed[c] = g
        else:
            out[c] = default
    return out, guessed


@dataclass(frozen=True)
class Layout:
    """How a score table is read, the same for each reader here: its columns, its name for errors, what is kept."""

    unit: str
    in_domain: str
    source: str = "table"
    where: str = "line"
    model: str | None = None
    run: str | None = None
    model_name: str = "model"
    testsets: list[str] | None = None
    exclude: tuple[str, ...] = ()
    summary_labels: frozenset = SUMMARY_LABELS


def from_wide(
    df: pd.DataFrame, layout: Layout, *, metrics: dict[str, str] | None = None, default_metric: str = "accuracy"
) -> pd.DataFrame:
    """One row per unit, one column per testset -> canonical long table."""
    unit, in_domain, source, where = layout.unit, layout.in_domain, layout.source, layout.where
    model, run = layout.model, layout.run
    df = drop_summary_rows(df, unit, source, where, layout.summary_labels)
    ids = [c for c in (unit, model, run) if c]
    _require_columns(df, ids[1:], source)
    names = [c for c in df.columns if c not in ids]  # the testset columns (not the unit, model or run)
    if in_domain not in df.columns:
        raise DataError(
            f"{source}: the in-domain testset {in_domain!r} is not a column{did_you_mean(in_domain, names)}; "
            f"the testset columns are {names}"
        )
    left = set(matching(names, layout.exclude, "--exclude")) - {in_domain}
    if layout.testsets:
        cols = [c for c in matching(names, layout.testsets, "--testsets") if c not in left]
    else:
        # a tracker's own (W&B's _runtime, _timestamp) or a row number without a name (to_csv's index)
        own = [c for c in names if re.match(r"_|Unnamed: \d+\Z", c) and c not in left and c != in_domain]
        if own:
            log.info(
                "%s: columns %s left out: a tracker's own (a leading '_': W&B's _runtime, _timestamp) or a row "
                "number with no name (pandas' index); --testsets keeps one",
                source,
                own,
            )
        cols = [c for c in names if c not in left and c not in own]
    if in_domain not in cols:
        cols.append(in_domain)
    if len(cols) < 3:
        raise DataError(f"{source}: need the in-domain column and at least two OOD testset columns, got {cols}")
    not_numbers = [(c, df.index[bad][0]) for c in cols if (bad := _as_numbers(df, c)[1]).any()]
    if not_numbers:
        said = ", ".join(f"column {c!r} ({where} {i}: {df.at[i, c]!r})" for c, i in not_numbers)
        raise DataError(
            f"{source}: not numeric: {said}; leave such a column out (--exclude, globs allowed) or name it as the "
            "model/run column (--model, --run)"
        )
    values = pd.DataFrame({c: _numeric(df, c, source, where) for c in cols}, index=df.index)
    empty = values.isna().all(axis=1)
    if empty.any():
        log.info("%s: %d row(s) have no score in the columns analysed: left out", source, int(empty.sum()))
        values, df = values[~empty], df[~empty]
    named = dict(metrics or {})
    matching(cols, list(named), "--metric COLUMN=METRIC")
    per_column = column_metrics(cols, named, default_metric)[0]
    check_columns(
        values,
        per_column,
        source,
        where,
        "name a column's metric as --metric 'COLUMN=METRIC' (globs allowed, e.g. --metric '*_soft=loglik'; "
        "repeatable; a loss or log-likelihood takes any number), or leave it out (--exclude)",
    )
    long = values.assign(
        unit=_numeric_units(df[unit]),
        model=_names(df, model, "model", source, where) if model else layout.model_name,
        run=_names(df, run, "run", source, where) if run else "all",
    )
    long = long.melt(id_vars=["model", "run", "unit"], var_name="testset", value_name="score")
    long["in_domain"] = in_domain
    return long[["model", "in_domain", "run", "unit", "testset", "score"]]


def from_long(
    df: pd.DataFrame,
    layout: Layout,
    *,
    testset: str,
    score: str,
    n_column: str | None = None,
    metric: str | None = None,
) -> pd.DataFrame:
    """One row per unit x testset -> canonical long table; with ``n_column``, its ``n`` column too."""
    unit, in_domain, source, where = layout.unit, layout.in_domain, layout.source, layout.where
    model, run = layout.model, layout.run
    df = drop_summary_rows(df, unit, source, where, layout.summary_labels)
    _require_columns(df, [testset, score] + [c for c in (model, run, n_column) if c], source)
    names = set(_names(df, testset, "testset", source, where))
    if in_domain not in names:
        raise DataError(
            f"{source}: the in-domain testset {in_domain!r} does not occur in column "
            f"{testset!r}{did_you_mean(in_domain, names)}; testsets are {sorted(names)}"
        )
    ordered = sorted(names)
    left = set(matching(ordered, layout.exclude, "--exclude")) - {in_domain}
    chosen = set(matching(ordered, layout.testsets, "--testsets")) if layout.testsets else set(ordered)
    keep = df[testset].astype(str).isin((chosen | {in_domain}) - left)
    df = df[keep]
    out = pd.DataFrame(
        {
            "model": _names(df, model, "model", source, where) if model else layout.model_name,
            "in_domain": in_domain,
            "run": _names(df, run, "run", source, where) if run else "all",
            "unit": _numeric_units(df[unit]),
            "testset": df[testset].astype(str),
            "score": _numeric(df, score, source, where),
        },
        index=df.index,
    )
    check_columns(
        out[["score"]].set_axis([score], axis=1),
        {score: metric or score},
        source,
        where,
        f"if column {score!r} holds another metric, say which: --metric {score}=METRIC",
    )
    if n_column:
        n = _numeric(df, n_column, source, where)
        bad = n.notna() & ~((n >= 1) & (n == n.round()))
        if bad.any():
            i = bad.idxmax()
            raise DataError(
                f"{source}: {where} {i}: {n_column} {df.loc[i, n_column]!r} is not a whole number of items (1 or more)"
            )
        out["n"] = n
    return out.reset_index(drop=True)


def run_info(df: pd.DataFrame, columns, layout: Layout) -> pd.DataFrame:
    """One row per (model, run) with ``columns``, each constant within a run, else an error naming it."""
    source, model, run = layout.source, layout.model, layout.run
    columns = list(columns)
    _require_columns(df, [c for c in (model, run) if c], source)
    _require_columns(df, columns, source, " to pool by")
    out = pd.DataFrame(
        {"model": df[model].astype(str) if model else layout.model_name, "run": df[run].astype(str) if run else "all"},
        index=df.index,
    )
    for c in columns:
        out[c] = df[c]
        counts = out.dropna(subset=[c]).groupby(["model", "run"])[c].nunique()
        bad = counts[counts > 1]
        if len(bad):
            m, r = bad.index[0]
            vals = sorted(out.loc[(out.model == m) & (out.run == r), c].dropna().unique().tolist())[:5]
            raise DataError(
                f"{source}: column {c!r} is not constant within run {r!r} of model {m!r} "
                f"(values {vals}); pool by a column that names one value per run"
            )
    first = out.groupby(["model", "run"], sort=True).first()
    return first.reset_index()


def from_examples_table(
    df: pd.DataFrame,
    *,
    unit: str,
    testset: str,
    model: str | None = None,
    run: str | None = None,
    model_name: str = "model",
    source: str = "predictions",
) -> pd.DataFrame:
    """A long per-example table (unit, testset, ``example``, ``correct`` 0/1, optional ``stratum``: the label a
    testset was sampled by) -> canonical, its names as categories (a suite's millions of rows repeat a few)."""
    _require_columns(df, [unit, testset, "example", "correct"] + [c for c in (model, run) if c], source)
    raw = df["correct"]
    if not (pd.api.types.is_numeric_dtype(raw) or pd.api.types.is_bool_dtype(raw)):
        raw = raw.map(lambda v: {"true": 1, "false": 0}.get(v.strip().lower(), v) if isinstance(v, str) else v)
    corr = pd.to_numeric(raw, errors="coerce")
    if (corr.isna() & raw.notna()).any() or not corr.dropna().isin([0, 1]).all():
        raise DataError(f"{source}: column 'correct' must be 0/1 or true/false")

    def names(col: str | None, default: str):
        if col is None:
            return pd.Categorical.from_codes(np.zeros(len(df), dtype=np.int8), [default])
        return pd.Categorical(df[col].astype(str))

    return pd.DataFrame(
        {
            "model": names(model, model_name),
            "run": names(run, "all"),
            "unit": _numeric_units(df[unit]).to_numpy(),
            "testset": names(testset, ""),
            "example": df["example"].to_numpy(),
            "correct": corr.to_numpy(float),
            **({"stratum": df["stratum"].astype(str).to_numpy()} if "stratum" in df.columns else {}),
        }
    )
