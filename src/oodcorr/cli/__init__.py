"""The command line: ``oodcorr VERB ...``, one module per verb (analyse, prefetch, budget, design).

A verb's module is imported only when that verb runs, so ``oodcorr --help``, ``prefetch`` and ``budget``
import no pandas, numpy or torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ..core.errors import DataError, WriteFailed
from ..core.locks import FolderInUse

log = logging.getLogger("oodcorr")

VERBS = {
    "analyse": "partial correlations between OOD testsets of any scores table",
    "prefetch": "download a config's hub models and datasets and pin them in a lock file",
    "budget": "jobs, GPU-hours, checkpoint disk, download size and longest path of a config",
    "design": "the power of each verdict for a config's grid, a few changes of it and their cost",
}


def build_parser(verbs=None) -> argparse.ArgumentParser:
    """The parser: the full parsers of ``verbs`` (None: all), the others stubs showing their one line."""
    p = argparse.ArgumentParser(prog="oodcorr", description="oodcorr: do OOD results generalise?")
    sub = p.add_subparsers(dest="command", required=True)
    for name, line in VERBS.items():
        if verbs is None or name in verbs:
            importlib.import_module(f"{__name__}.{name}").add_parser(sub, line)
        else:
            sub.add_parser(name, help=line)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[:1]).parse_args(argv)
    args.argv = argv  # the command as given (oodcorr analyse records it in settings.json)
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("oodcorr").setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)

    try:
        return importlib.import_module(f"{__name__}.{args.command}").run(args)
    except (DataError, ValueError, FolderInUse, WriteFailed) as e:
        log.error("%s", e)
        return 2
    except OSError as e:  # a folder that cannot be written, a disk that is full...
        log.error("%s", f"{e.filename}: {e.strerror}" if e.filename and e.strerror else e)
        return 2
