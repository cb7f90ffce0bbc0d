"""Reading the scores a verb names (``analyse``, ``design --pilot``) by its layout flags into the analysis'
canonical long table, or a folder of lm-evaluation-harness results (``--format lm-eval``)."""

from __future__ import annotations

import glob
import logging
import re
from pathlib import Path

import pandas as pd

from ..analysis.items import shared_items
from ..analysis.readers import lmeval, score_ranges, tables, workflow_scores
from ..analysis.readers.lmeval import compile_pattern
from ..core import table_files
from ..core.defaults import ANALYSIS
from ..core.errors import DataError
from ..core.limits import analysis_cells, analysis_too_large

log = logging.getLogger("oodcorr")


def metric_flag(words, fmt: str) -> tuple[str, dict[str, str]]:
    """``--metric``'s words -> (the default metric, {column or glob: metric}); in long format the one word
    names the score column too (``NAME`` or ``COLUMN=METRIC``)."""
    bare = [w for w in words if "=" not in w]
    pairs = {}
    for w in words:
        if "=" in w:
            column, _, metric = w.rpartition("=")
            if not column or not metric.strip():
                raise DataError(f"--metric {w!r}: give METRIC or COLUMN=METRIC, e.g. acc or 'eval/*_loss=loss'")
            pairs[column] = metric.strip()
    if fmt == "lm-eval":
        if pairs or len(bare) > 1:
            raise DataError(
                f"--metric {' '.join(words)}: with --format lm-eval, give the one metric analysed (acc, ...; "
                "NAME,FILTER for a filter)"
            )
        return (bare[0] if bare else "acc"), {}  # lm-eval's default metric
    if len(bare) > 1:
        raise DataError(f"--metric {' '.join(bare)}: give one METRIC, and COLUMN=METRIC for the columns of others")
    for m in [*bare, *pairs.values()]:
        score_ranges.check_known(m)
    if fmt == "long" and len(bare) + len(pairs) > 1:
        raise DataError(
            f"--metric {' '.join(words)}: a long table has one score column: name it after its metric (--metric "
            "NAME) or say its metric (--metric COLUMN=METRIC)"
        )
    if fmt == "long" and pairs:
        return next(iter(pairs.values())), pairs
    return (bare[0] if bare else "accuracy"), pairs


def input_files(words, fmt: str) -> list[str]:
    """The inputs named (paths or globs), in order, each once; lm-eval results are one folder."""
    files: list[str] = []
    for w in words:
        if any(ch in w for ch in "*?[") and not Path(w).exists():
            hits = sorted(glob.glob(w, recursive=True))
            if not hits:
                raise DataError(f"{w}: no file matches this pattern")
            files += hits
        else:
            files.append(w)
    files = list(dict.fromkeys(files))
    if not files:
        raise DataError(
            "no input: give a table (or several, or a glob such as 'exports/*.csv'), or --from settings.json"
        )
    if fmt == "lm-eval" and len(files) != 1:
        raise DataError(f"--format lm-eval reads one folder of results; got {len(files)} inputs: {files[:5]}")
    return files


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    return next((name[: -len(s)] for s in table_files.SCORES_SUFFIXES if name.endswith(s)), name)


def _identities(files: list[str], pattern: str | None) -> list[dict[str, str]]:
    """What each file's path says of its model and run: by ``--path-pattern`` (matched against the path's
    end), else, with several files, its name (``file``: the run where the table has no run column)."""
    if not pattern:
        if len(files) == 1:
            return [{}]
        stems = [_stem(f) for f in files]
        if len(set(stems)) < len(stems):
            stems = [str(Path(f).with_name(s)) for f, s in zip(files, stems)]
        return [{"file": s} for s in stems]  # the run's name where the table has no run column
    if "{step}" in pattern:
        raise DataError(f"--path-pattern {pattern!r}: a table's step is a column (--unit); name {{model}} and {{run}}")
    rx = re.compile(f"(?:^|/)(?:{compile_pattern(pattern).pattern})")  # the path's end, from a folder's name on
    found = [rx.search(Path(f).as_posix()) for f in files]
    unmatched = [f for f, m in zip(files, found) if m is None]
    if unmatched:
        raise DataError(
            f"--path-pattern {pattern!r}: {len(unmatched)} file(s) do not match it: {unmatched[:5]}; it is matched "
            "against each path's end"
        )
    return [m.groupdict() for m in found]


def read_scores(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...]]:
    """(canonical long table, examples or None, run information, columns to pool by) of ``args.table``."""
    files = list(args.table)
    metric, named = metric_flag(args.metric, args.format)
    idents = _identities(files, args.path_pattern)
    if args.examples and len(files) > 1:
        raise DataError(f"--examples: read with one table; got {len(files)}")
    parts, infos, unit = [], [], args.unit
    for path, ident in zip(files, idents):
        long, info, unit, pool_by, names = _read_one(args, path, ident, (metric, named), unit)
        parts.append(long)
        infos.append(info)
    long = pd.concat(parts, ignore_index=True)
    info = pd.concat(infos, ignore_index=True)
    twice = info.duplicated(["model", "run"], keep=False)
    if len(files) > 1 and twice.any():
        m, r = info.loc[twice, ["model", "run"]].iloc[0]
        raise DataError(
            f"model {m!r}, run {r!r} is in more than one of the files read; name each file's model and run with "
            "--path-pattern or --model, --run"
        )
    src = files[0] if len(files) == 1 else f"{len(files)} files ({files[0]}, ...)"
    args.unit = unit
    if args.format == "wide":
        metrics, guessed = tables.column_metrics(sorted(set(long["testset"])), named, metric)
        if guessed:
            by = {m: [c for c, g in guessed.items() if g == m] for m in dict.fromkeys(guessed.values())}
            log.info(
                "%s: metrics read from the column names: %s (--metric COLUMN=METRIC says otherwise)",
                src,
                "; ".join(f"{m}: {', '.join(cs)}" for m, cs in by.items()),
            )
    else:
        metrics = dict.fromkeys(set(long["testset"]), metric)
    items: dict[str, float] = {}  # --items' words: {testset: items}, "*" for a bare number
    for word in args.items:
        name, sep, num = word.rpartition("=")
        try:
            items[name if sep else "*"] = float(num)
        except ValueError:
            raise DataError(
                f"--items {word!r}: give N or TESTSET=N, N the items behind that testset's scores"
            ) from None
    long = tables.with_sizes(long, items, src)
    if "n" in long:
        shares = {t for t, m in metrics.items() if score_ranges.is_item_share(m)}
        others = sorted(set(metrics) - shares)
        if others:
            log.warning(
                "%s: the sizes (--n-column, --items) bound the item noise of an accuracy; the metric of %s is not "
                "one, so their item noise is unknown",
                src,
                others,
            )
            long.loc[long["testset"].isin(others), "n"] = float("nan")
        percent = [t for t in sorted(shares) if long.loc[long["testset"] == t, "score"].median() > 1]
        if percent:  # the bound is on shares
            rows = long["testset"].isin(percent)
            long.loc[rows, "score"] = long.loc[rows, "score"] / 100
            log.info("%s: the scores of %s in percent read as shares (/100)", src, percent)
        if long["n"].isna().all():
            long = long.drop(columns="n")
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
    if args.examples and not workflow_scores.example_bootstrap_applies(metric):
        raise DataError(f"--examples: resamples correctness, which gives accuracy, not --metric {metric}; leave it out")
    if args.examples:
        ex, _ = tables.read_table(args.examples, args.encoding)
        examples = tables.from_examples_table(
            ex,
            unit=args.unit,
            testset=args.testset_column,
            model=names["model"] if names["model"] in ex.columns else None,
            run=names["run"] if names["run"] in ex.columns else None,
            model_name=names["model_name"],
            source=str(args.examples),
        )
    return long, examples, info, pool_by


def _read_one(args, path: str, ident: dict, metrics: tuple[str, dict], unit: str | None):
    """(long table, run information, unit column, columns to pool by, model/run columns and model name) of one
    table; ``ident``'s model and run win."""
    df, where = tables.read_table(path, args.encoding)
    if unit is None:
        unit, said = tables.find_unit(df.columns, path)
        if said:
            log.info("%s", said)
    model = args.model or ("model" if "model" in df.columns else None)
    run = args.run or next((c for c in ("run_id", "run") if c in df.columns and c != unit), None)
    if "model" in ident and args.model or "run" in ident and args.run:
        raise DataError(f"{path}: --path-pattern and --model/--run both name the model or the run: give one")
    model, run = (None if k in ident else c for k, c in (("model", model), ("run", run)))  # the path wins
    if args.pool_by is None:
        pool_by = ("n_train",) if "n_train" in df.columns and "n_train" != unit else ()
    else:
        pool_by = tuple(args.pool_by)
    labels = tables.SUMMARY_LABELS | set(args.summary_label)
    exclude = tuple(args.exclude) + (pool_by if args.format == "wide" else ())
    default_name = Path(path).parent.name if len(args.table) > 1 else Path(path).stem
    model_name = ident.get("model") or args.model_name or default_name
    layout = tables.Layout(
        unit,
        args.in_domain,
        source=path,
        where=where,
        model=model,
        run=run,
        model_name=model_name,
        testsets=args.testsets,
        exclude=exclude,
        summary_labels=labels,
    )
    # run information: the columns to pool by, and (long tables) the workflow's n_train and seed
    info_cols = [
        c for c in ("n_train", "seed") if args.format == "long" and c in df.columns and c not in (unit, model, run)
    ]
    info_cols = list(dict.fromkeys(list(pool_by) + info_cols))
    df = tables.drop_summary_rows(df, unit, path, where, labels)  # said here: the readers below find none
    info = tables.run_info(df, info_cols, layout)
    metric, named = metrics
    if args.format == "wide":
        if args.n_column:
            raise DataError("--n-column: a wide table has no column of sizes; give them with --items [TESTSET=]N")
        long = tables.from_wide(df, layout, metrics=named, default_metric=metric)
    else:
        long = tables.from_long(
            df,
            layout,
            testset=args.testset_column,
            score=next(iter(named), metric),
            metric=metric,
            n_column=args.n_column,
        )
    if "run" in ident or ("file" in ident and run is None):
        long["run"] = info["run"] = ident.get("run", ident.get("file"))
    return long, info, unit, pool_by, {"model": model, "run": run, "model_name": model_name}


def parse_groups(values, read: dict | None = None) -> dict[str, list[str]]:
    """``--group``'s words (``GROUP=TESTSET,TESTSET``) added to the groups ``read``: group -> its testsets."""
    out = {g: list(kids) for g, kids in (read or {}).items()}
    for word in values or ():
        name, sep, kids = word.partition("=")
        parts = [k.strip() for k in kids.split(",") if k.strip()]
        if not sep or not name.strip() or not parts or name.strip() in parts:
            raise DataError(
                f"--group {word!r}: give GROUP=TESTSET,TESTSET,..., e.g. --group mmlu=mmlu_anatomy,mmlu_astronomy"
            )
        out[name.strip()] = sorted(set(out.get(name.strip(), [])) | set(parts))
    return out


def read_lmeval(args) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame, tuple[str, ...], str, dict]:
    """--format lm-eval: (long table, examples or None, run information, columns to pool by, the files'
    digest, the groups the files name with their subtasks)."""
    for k in ("model", "run", "examples", "n_column", "items", "encoding", "pool_by"):
        if getattr(args, k):
            raise DataError(
                f"--{k.replace('_', '-')}: not read with --format lm-eval (model, run and step come from the "
                "results files or --path-pattern)"
            )
    tasks = None
    if args.tasks:
        tasks = list(dict.fromkeys(t.strip() for t in args.tasks.split(",") if t.strip()))
    folder, metric = args.table[0], metric_flag(args.metric, "lm-eval")[0]
    read = lmeval.read_folder(
        folder,
        metric=metric,
        tasks=tasks,
        in_domain=args.in_domain,
        path_pattern=args.path_pattern,
        samples=not args.no_samples,
        max_files=args.max_files,
        max_bytes=int(args.max_file_mb * 2**20),
        follow_links=args.follow_links,
    )
    long = read.long(args.in_domain)
    names = sorted(set(long["testset"]))
    if args.testsets:
        long = long[long["testset"].isin(set(tables.matching(names, args.testsets, "--testsets")) | {args.in_domain})]
    if args.exclude:
        long = long[~long["testset"].isin(set(tables.matching(names, args.exclude, "--exclude")) - {args.in_domain})]
    info = long[["model", "run"]].drop_duplicates().reset_index(drop=True)
    log.info(
        "%s: %d models, %d runs, %d checkpoints, %d tasks (in-domain: %s), metric %s%s",
        folder,
        long["model"].nunique(),
        len(info),
        long["unit"].nunique(),
        long["testset"].nunique(),
        args.in_domain,
        metric,
        f", per-example samples from {len(read.samples_files)} files" if read.examples is not None else "",
    )
    ood = sorted(set(long["testset"]) - {args.in_domain})
    shared = shared_items.refusals(args.in_domain, ood, shared_items.leaves(read.groups))
    if shared:
        log.info(
            "%s: %d OOD pair(s) share items (e.g. %s and %s) or a task shares items with %s: their cells are left "
            "out, their notes say why",
            folder,
            len(shared),
            *next(iter(shared)),
            args.in_domain,
        )
    return long, read.examples, info, (), read.digest, read.groups


def check_analysis_size(long: pd.DataFrame, methods, residualisers, max_cells: int, source: str = "this table") -> int:
    """The cells the analysis will compute, said before it starts; above ``--max-cells`` a DataError."""
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
