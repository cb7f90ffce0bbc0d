"""``oodcorr analyse TABLE --in-domain NAME [...]``: the same analysis as the workflow's rules on any
scores table (CSV, TSV or parquet; long or wide) or a folder of lm-evaluation-harness results
(``--format lm-eval``); the tables and figures go into ``--out``. Its flags: :mod:`.analyse_flags`."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from pathlib import Path

from ..analysis import Options, agreement, analyse
from ..analysis.cell.residualise import GamSettings
from ..analysis.results import summarise, write_tables
from ..core.answer import answer_lines
from ..core.errors import DataError
from ..core.io import sha256_file, write_json_atomic
from ..core.locks import EXPERIMENT, hold
from ..core.provenance import table_provenance
from ..jobs import figure_set
from ..jobs.explorer import EXPLORER_FILE
from ..launch.experiment import experiment_folder
from . import analyse_flags, out_record
from .scores import check_analysis_size, input_files, metric_flag, parse_groups, read_lmeval, read_scores

log = logging.getLogger("oodcorr")
_NOT_RECORDED = ("argv", "from_settings", "command")


def add_parser(sub, help: str) -> None:
    """The verb's parser (:func:`.analyse_flags.add_parser`)."""
    analyse_flags.add_parser(sub, help)


# what may be given beside --from (where and how to write; the analysis is the one recorded)
_BESIDE_FROM = ("out", "force", "workers", "quiet", "from_settings", "argv")


def _recorded(path: str, defaults: dict) -> argparse.Namespace:
    """The flags of the analysis a settings.json records (over ``defaults``: a flag added since keeps its
    default), its inputs checked to be the bytes it read."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        recorded = doc["command"]["args"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"--from {path}: not the settings.json of an oodcorr analyse that records its command ({e}); "
            "give the settings.json an analysis wrote"
        ) from None
    for item in doc.get("inputs", []):
        if doc.get("format") != "lm-eval" and (
            not Path(item["path"]).is_file() or sha256_file(item["path"]) != item["sha256"]
        ):
            raise DataError(
                f"--from {path}: the input {item['path']} is missing or not the bytes analysed then (sha256 "
                f"{item['sha256'][:12]}...); rerunning on other data would not give the same tables"
            )
    unknown = sorted(set(recorded) - set(defaults))
    if unknown:
        raise DataError(f"--from {path}: records flags this version of oodcorr analyse lacks: {unknown}")
    return argparse.Namespace(**{**defaults, **recorded})


def _from_settings(args) -> argparse.Namespace:
    """``args`` for ``--from SETTINGS``: the recorded flags, with --out, --force, --workers and -q as given;
    any other flag given beside it is refused (it would change what the record says)."""
    from . import build_parser  # the package imports this module lazily: a top-level import would be a cycle

    defaults = vars(build_parser(["analyse"]).parse_args(["analyse"]))
    given = [k for k, v in vars(args).items() if k in defaults and k not in _BESIDE_FROM and v != defaults[k]]
    if given:
        flags = sorted("INPUT" if k == "table" else "--" + k.replace("_", "-") for k in given)
        raise DataError(
            f"--from reruns the analysis its settings.json records; {', '.join(flags)} given beside it would "
            "change that: give only --out, --force, --workers or -q with --from"
        )
    ns = _recorded(args.from_settings, {k: v for k, v in defaults.items() if k not in _NOT_RECORDED})
    for k in ("out", "force", "workers", "quiet"):
        if getattr(args, k) != defaults[k]:
            setattr(ns, k, getattr(args, k))
    ns.argv, ns.from_settings = args.argv, args.from_settings
    return ns


def run(args) -> int:
    if args.from_settings:
        args = _from_settings(args)
    if not args.in_domain:
        raise DataError("--in-domain: name the in-domain testset (a column of a wide table, a testset of a long one)")
    args.table = [os.path.abspath(f) for f in input_files(args.table, args.format)]
    if args.examples:
        args.examples = os.path.abspath(args.examples)
    out = Path(args.out or "analysis")
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: is an existing file; give a folder (it is created if missing)")
    experiment = experiment_folder(out)
    if experiment is not None and not args.force:
        raise DataError(
            f"--out {out}: is inside the experiment folder {experiment}, whose tables and figures the workflow "
            "publishes; writing there would replace them (and could mix with a run publishing now). Give another "
            "--out (e.g. --out my-analysis), or pass --force to write there anyway (the next run of the workflow "
            "publishes its own set again and keeps yours aside)"
        )
    with contextlib.ExitStack() as held:
        if experiment is not None:  # --force: not while a run of the workflow writes that experiment
            held.enter_context(hold(experiment, EXPERIMENT, extra={"config": f"oodcorr analyse --out {out}"}))
        return _analyse_into(args, out, out_record.snapshot(out))


def _analyse_into(args, out: Path, before: dict) -> int:
    command = {"argv": list(args.argv), "args": {k: v for k, v in vars(args).items() if k not in _NOT_RECORDED}}
    if args.format == "lm-eval":
        long, examples, info, pool_by, digest, task_groups = read_lmeval(args)
        inputs = [{"path": args.table[0], "sha256": digest}]
    else:
        task_groups = None
        if args.tasks:
            raise DataError(
                "--tasks: reads lm-evaluation-harness results (--format lm-eval); for a table, --testsets and "
                "--exclude choose the testsets"
            )
        long, examples, info, pool_by = read_scores(args)
        inputs = [{"path": f, "sha256": sha256_file(f)} for f in args.table]
    source = args.table[0] if len(args.table) == 1 else f"{len(args.table)} files in {Path(args.table[0]).parent}"
    same = ("inference", "level", "correction", "agreement_correction", "alpha", "min_n_eff", "near_zero")
    same += ("pool_two_runs", "drop_step0")
    same += ("seed", "n_boot", "n_perm", "interval", "block_length", "example_boot")
    opts = Options(
        methods=tuple(args.methods),
        residualisers=tuple(args.residualisers),
        pool_by=pool_by,
        step0_check=not args.no_step0_check,
        gam=GamSettings(n_splines=args.gam_n_splines, min_points=args.gam_min_points),
        **{k: getattr(args, k) for k in same},
    )
    check_analysis_size(long, opts.methods, opts.residualisers, args.max_cells, source)
    if not args.no_plots:
        figure_set.check_figure_names(long, source)
    task_groups = parse_groups(args.group, task_groups)
    workers = args.workers or figure_set.default_workers()
    pc = analyse(long, opts, examples, run_info=info, workers=workers, task_groups=task_groups)
    agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    settings = {
        "inputs": inputs,
        "format": args.format,
        "unit": "step" if args.format == "lm-eval" else args.unit,
        "metric": metric_flag(args.metric, args.format)[0],
        "in_domain": args.in_domain,
        "options": opts.describe(),
        "command": command,  # every flag as given: --from reruns it
        # never part of the results: a new commit changes none
        "provenance": table_provenance(inputs[0]["path"], inputs[0]["sha256"]),
    }
    method = args.plot_method or opts.methods[0]
    res = args.plot_residualiser or opts.residualisers[0]
    if not args.no_plots and (method not in opts.methods or res not in opts.residualisers):
        raise ValueError(f"--plot-method/--plot-residualiser ({method}, {res}) must be among the ones analysed")
    rows = agree.astype(object).where(agree.notna(), "").astype(str).to_dict("records")
    choice = pool = None
    if not args.no_plots:
        choice = figure_set.choose(
            pc, agree, long, out, method, res, args.forest_max, args.forest_pairs, args.all_figures
        )
    lines = answer_lines(
        rows, method, res, out, consensus_sets=choice.consensus_sets if choice else [], file_name=figure_set.safe_name
    )
    if choice is not None:  # the page and the figures in other processes, while this one writes the tables
        title = f"oodcorr: {Path(source).name}, in-domain {args.in_domain}"
        page = figure_set.explorer_page(out, title, {"input": source, **opts.describe()}, lines, (method, res))
        held = dict(pc=pc, agree=agree, agreement=agree, long=long, opts=opts)
        pool = figure_set.FigurePool([page, *choice.figures], workers, **held)
    write_tables(pc, agree, out)
    write_json_atomic(out / "settings.json", settings)
    log.info("wrote %s (%d rows) and %s", out / "partial_correlations.csv", len(pc), out / "agreement.csv")
    summarise(pc, agree, opts, log)
    if pool is not None:
        written = pool.wait()[0]
        for line in choice.left_out:
            log.info("%s", line)
        log.info("wrote figures under %s", out)
        lines.append(
            f"every pair, explored in a browser (one file, offline): {out / EXPLORER_FILE} "
            f"({written['pairs']} pairs, {written['bytes'] / 2**20:.1f} MB)"
        )
    for line in out_record.settle(out, before):  # the earlier analysis's outputs this one did not write
        log.warning("%s", line)
    for line in lines:
        log.info("%s", line)
    return 0
