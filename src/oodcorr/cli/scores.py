"""Reading the scores table a verb names (``oodcorr analyse TABLE``, ``oodcorr design --pilot``)
by its layout flags into the analysis' canonical long table (:mod:`oodcorr.analysis.tables`), or a
folder of lm-evaluation-harness results (``--format lm-eval``, :mod:`oodcorr.analysis.lmeval`), and
how many cells its analysis will compute (:func:`check_analysis_size`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..analysis import lmeval, tables
from ..core.defaults import ANALYSIS
from ..core.errors import DataError
from ..core.limits import analysis_cells, analysis_too_large

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


def read_lmeval(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...], str]:
    """--format lm-eval: (canonical long table, examples or None, run information, columns to pool
    by, the digest of the files read) from a folder of lm-evaluation-harness results."""
    for flag, given in (
        ("--model", args.model),
        ("--run", args.run),
        ("--examples", args.examples),
        ("--encoding", args.encoding),
        ("--pool-by", args.pool_by),
    ):
        if given:
            raise DataError(
                f"{flag}: not read with --format lm-eval (model, run and step come from each results file's "
                "config.model_args or from --path-pattern; per-example data from the --log_samples files beside them)"
            )
    tasks = None
    if args.tasks:
        tasks = list(dict.fromkeys(t.strip() for t in args.tasks.split(",") if t.strip()))
    read = lmeval.read_folder(
        args.table,
        metric=args.metric,
        tasks=tasks,
        in_domain=args.in_domain,
        path_pattern=args.path_pattern,
        samples=not args.no_samples,
        max_files=args.max_files,
        max_bytes=int(args.max_file_mb * 2**20),
    )
    long = read.long(args.in_domain)
    if args.testsets:
        long = long[long["testset"].isin(set(args.testsets) | {args.in_domain})]
    if args.exclude:
        long = long[~long["testset"].isin(set(args.exclude) - {args.in_domain})]
    info = long[["model", "run"]].drop_duplicates().reset_index(drop=True)
    log.info(
        "%s: %d models, %d runs, %d checkpoints, %d tasks (in-domain: %s), metric %s%s",
        args.table,
        long["model"].nunique(),
        len(info),
        long["unit"].nunique(),
        long["testset"].nunique(),
        args.in_domain,
        args.metric,
        f", per-example samples from {len(read.samples_files)} files" if read.examples is not None else "",
    )
    return long, read.examples, info, (), read.digest


def check_analysis_size(long: pd.DataFrame, methods, residualisers, max_cells: int, source: str = "this table") -> int:
    """The cells the analysis will compute (each run's OOD pairs x methods x residualisers), said
    before it starts; above ``--max-cells`` a DataError gives the count and the flag that allows it."""
    ood = [len(set(g["testset"]) - set(g["in_domain"])) for _, g in long.groupby(["model", "run"], sort=False)]
    cells, detail = analysis_cells(ood, len(methods), len(residualisers))
    if cells > max_cells:
        raise DataError(
            analysis_too_large(
                cells,
                detail,
                max_cells,
                what=f"the analysis of {source}",
                limit_name="--max-cells" + (" (its default)" if max_cells == ANALYSIS["max_cells"] else ""),
                fewer="--testsets, --exclude, --methods or --residualisers",
                allow=f"pass --max-cells {cells}",
            )
        )
    log.info("analysing %s cells (%s)", f"{cells:,}", detail)
    return cells
