"""The command line: ``oodcorr VERB ...``, one module per verb.

``oodcorr analyse TABLE --in-domain NAME [...]`` (:mod:`.analyse`)
    The same analysis as the workflow's rules on any scores table (CSV, TSV or
    parquet; long or wide); the tables and figures go into ``--out``.
``oodcorr prefetch --configfile X`` (:mod:`.prefetch`)
    On a login node: download every hub model and dataset of a config into the
    Hugging Face cache and pin them in the lock file beside it (:mod:`oodcorr.modeling.hub`).
``oodcorr budget --configfile X [--profile DIR]`` (:mod:`.budget`)
    Jobs, GPU-hours, checkpoint disk, download size and the longest path of a config,
    printed and written as markdown and JSON (:mod:`oodcorr.launch.budget`).
``oodcorr design --configfile X [--pilot TABLE]`` (:mod:`.design`)
    What a config's grid can detect before it is paid for: the power of a per-run cell, of
    the answer's sign and of ``sign reversal`` by effect and dependence, a few changes of the grid
    with their cost, and the budget beside it (:mod:`oodcorr.analysis.design.power`).

Shared pieces: :mod:`.args` (argument types, the work flags), :mod:`.config` (the workflow
config, its plan and lock), :mod:`.scores` (reading a scores table by the layout flags).

A verb's module is imported only when that verb runs (:func:`main` builds the full parser of
the verb named and a stub of each other one), so ``oodcorr --help``, ``prefetch`` and ``budget``
import no pandas, numpy or torch: only ``analyse`` and ``design`` pay for the statistics. This
package may import every folder (tests/meta/test_layers.py).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ..core.errors import DataError, WriteFailed
from ..core.locks import FolderInUse

log = logging.getLogger("oodcorr")

# verb -> its one line in ``oodcorr --help``; the verb's module is oodcorr.cli.<verb>
VERBS = {
    "analyse": "partial correlations between OOD testsets of any scores table",
    "prefetch": "download a config's hub models and datasets and pin them in a lock file",
    "budget": "jobs, GPU-hours, checkpoint disk, download size and longest path of a config",
    "design": "the power of each verdict for a config's grid, a few changes of it and their cost",
}


def _verb(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def build_parser(verbs=None) -> argparse.ArgumentParser:
    """The parser: every verb's full parser (``verbs`` None), or those of ``verbs`` only, the
    others as stubs that show their one line in ``oodcorr --help`` (their modules not imported)."""
    p = argparse.ArgumentParser(prog="oodcorr", description="oodcorr: do OOD results generalise?")
    sub = p.add_subparsers(dest="command", required=True)
    for name, line in VERBS.items():
        if verbs is None or name in verbs:
            _verb(name).add_parser(sub, line)
        else:
            sub.add_parser(name, help=line)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[:1]).parse_args(argv)
    args.argv = argv  # the command as given (oodcorr analyse records it in settings.json)
    # a no-op when logging is already configured (e.g. under pytest); the level is ours either way
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("oodcorr").setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)

    try:
        return _verb(args.command).run(args)
    except (DataError, ValueError, FolderInUse, WriteFailed) as e:
        log.error("%s", e)
        return 2
    except OSError as e:  # a folder that cannot be written, a disk that is full...
        log.error("%s", f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
        return 2
