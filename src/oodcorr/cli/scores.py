"""Reading the scores table a verb names (``oodcorr analyse TABLE``, ``oodcorr design --pilot``)
by its layout flags into the analysis' canonical long table (:mod:`oodcorr.analysis.tables`), or a
folder of lm-evaluation-harness results (``--format lm-eval``, :mod:`oodcorr.analysis.lmeval`), and
how many cells its analysis will compute (:func:`check_analysis_size`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..analysis import lmeval, score_ranges, shared_items, tables, workflow_scores
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
    metrics, each = dict(getattr(args, "column_metric", None) or []), getattr(args, "each_scale", False)
    if args.format == "wide":
        if getattr(args, "n_column", None):
            raise DataError("--n-column: a wide table has no column of sizes; give them with --items [TESTSET=]N")
        long = tables.from_wide(
            df, unit=args.unit, in_domain=args.in_domain, column_metrics=metrics, each_scale=each, **common
        )
    elif metrics or each:
        raise DataError(
            f"{'--each-scale' if each else '--column-metric'}: reads the columns of a wide table (--format wide); in "
            "long format one column holds every score: --score names it"
        )
    else:
        long = tables.from_long(
            df,
            unit=args.unit,
            testset=args.testset_column,
            score=args.score,
            in_domain=args.in_domain,
            n_column=getattr(args, "n_column", None),
            **common,
        )
    long = tables.with_sizes(long, parse_items(getattr(args, "items", None)), src)
    if "n" in long and (metrics or each):
        raise DataError(
            f"--items with {'--each-scale' if each else '--column-metric'}: the sizes bound the item noise of shares "
            "of items, read on one scale; give the table's accuracies on one scale (all shares, or all percentages) "
            "for --items, or leave --items out"
        )
    if "n" in long and not score_ranges.is_item_share("accuracy" if args.format == "wide" else args.score):
        log.warning(
            "%s: the sizes (--n-column, --items) bound item noise only for a share of items (accuracy); --score %s is "
            "not one, so its item noise is unknown",
            src,
            args.score,
        )
        long = long.drop(columns="n")
    elif "n" in long and long["score"].median() > 1:  # percentages: the bound is on shares
        long = long.assign(score=long["score"] / 100)
        log.info("%s: scores in percent read as shares (/100) for their items' binomial bound", src)
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
    if args.examples and not workflow_scores.example_bootstrap_applies(args.score):
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


def parse_items(values) -> dict[str, float]:
    """``--items``' words -> {testset: items} (``*`` for a bare number); a word that is not ``N`` or
    ``TESTSET=N`` is an error naming it."""
    out: dict[str, float] = {}
    for word in values or ():
        name, sep, num = word.rpartition("=")
        try:
            n = float(num)
        except ValueError:
            raise DataError(
                f"--items {word!r}: give N or TESTSET=N, N the items behind that testset's scores"
            ) from None
        out[name if sep else "*"] = n
    return out


def parse_groups(values, read: dict | None = None) -> dict[str, list[str]]:
    """``--group``'s words (``GROUP=TESTSET,TESTSET``) added to the groups ``read`` (an lm-eval
    folder's): group -> its testsets; a word that is not of that form is an error naming it."""
    out = {g: list(kids) for g, kids in (read or {}).items()}
    for word in values or ():
        name, sep, kids = word.partition("=")
        parts = [k.strip() for k in kids.split(",") if k.strip()]
        if not sep or not name.strip() or not parts or name.strip() in parts:
            raise DataError(
                f"--group {word!r}: give GROUP=TESTSET,TESTSET,... (a testset scored on the items of the testsets "
                "named after it), e.g. --group mmlu=mmlu_anatomy,mmlu_astronomy"
            )
        out[name.strip()] = sorted(set(out.get(name.strip(), [])) | set(parts))
    return out


def read_lmeval(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...], str, dict]:
    """--format lm-eval: (canonical long table, examples or None, run information, columns to pool
    by, the digest of the files read, the groups the files name with their subtasks) from a folder of
    lm-evaluation-harness results."""
    for flag, given in (
        ("--model", args.model),
        ("--run", args.run),
        ("--examples", args.examples),
        ("--n-column", getattr(args, "n_column", None)),
        ("--items", getattr(args, "items", None)),
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
        follow_links=args.follow_links,
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
    ood = sorted(set(long["testset"]) - {args.in_domain})
    shared = shared_items.refusals(args.in_domain, ood, shared_items.leaves(read.groups))
    if shared:
        log.info(
            "%s: %d OOD pair(s) share items (a group beside its subtasks, e.g. %s and %s) or have a task that shares "
            "items with %s: their cells are left out, their notes say why",
            args.table,
            len(shared),
            *next(iter(shared)),
            args.in_domain,
        )
    return long, read.examples, info, (), read.digest, read.groups


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
