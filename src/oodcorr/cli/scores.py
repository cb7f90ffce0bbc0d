"""Reading the scores table a verb names (``oodcorr analyse TABLE``, ``oodcorr design --pilot``)
by its layout flags into the analysis' canonical long table (:mod:`oodcorr.analysis.tables`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..analysis import tables
from ..core.errors import DataError

log = logging.getLogger("oodcorr")


def read_scores(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...]]:
    """(canonical long table, examples or None, run information, columns to pool by) of the table
    ``args.table`` read by ``oodcorr analyse``'s input-layout flags in ``args``."""
    df, where = tables.read_table(args.table, args.encoding)
    src = str(args.table)
    model = args.model or ("model" if "model" in df.columns else None)
    run = args.run or next((c for c in ("run_id", "run") if c in df.columns and c != args.unit), None)
    if args.pool_by is None:
        pool_by = ("n_train",) if "n_train" in df.columns and "n_train" != args.unit else ()
    else:
        pool_by = tuple(args.pool_by)
    labels = tables.SUMMARY_LABELS | set(args.summary_label)
    exclude = tuple(args.exclude) + (pool_by if args.format == "wide" else ())
    common = dict(
        source=src,
        where=where,
        model=model,
        run=run,
        model_name=args.model_name or Path(args.table).stem,
        testsets=args.testsets,
        exclude=exclude,
        summary_labels=labels,
    )
    # run information: the columns to pool by, and (long tables) the workflow's n_train and seed
    info_cols = [
        c for c in ("n_train", "seed") if args.format == "long" and c in df.columns and c not in (args.unit, model, run)
    ]
    info_cols = list(dict.fromkeys(list(pool_by) + info_cols))
    body = tables.drop_summary_rows(df, args.unit, src, where, labels, quiet=True) if info_cols else df
    info = tables.run_info(body, info_cols, source=src, model=model, run=run, model_name=common["model_name"])
    if args.format == "wide":
        long = tables.from_wide(df, unit=args.unit, in_domain=args.in_domain, **common)
    else:
        long = tables.from_long(
            df, unit=args.unit, testset=args.testset_column, score=args.score, in_domain=args.in_domain, **common
        )
    log.info(
        "%s: %d models, %d runs, %d units, %d testsets (in-domain: %s)",
        src,
        long["model"].nunique(),
        long.groupby(["model", "run"]).ngroups,
        long["unit"].nunique(),
        long["testset"].nunique(),
        args.in_domain,
    )
    if not pd.api.types.is_numeric_dtype(long["unit"]) or pd.api.types.is_bool_dtype(long["unit"]):
        shown = ", ".join(repr(str(u)) for u in list(dict.fromkeys(long["unit"]))[:3])
        log.info(
            "%s: the units in column %r are not numbers (%s, ...), so they are treated as exchangeable: in no "
            "order, with no autocorrelation between them allowed for, and no learning curves; give a numeric "
            "--unit (a training step) for ordered units",
            src,
            args.unit,
            shown,
        )
    examples = None
    if args.examples and not tables.example_bootstrap_applies(args.score):
        raise DataError(
            f"--examples: the example-level bootstrap resamples correctness, which gives accuracy, "
            f"not --score {args.score}; leave --examples out"
        )
    if args.examples:
        ex, _ = tables.read_table(args.examples, args.encoding)
        examples = tables.from_examples_table(
            ex,
            unit=args.unit,
            testset=args.testset_column,
            example="example",
            correct="correct",
            model=model if model in ex.columns else None,
            run=run if run in ex.columns else None,
            model_name=common["model_name"],
            source=str(args.examples),
        )
    return long, examples, info, pool_by
