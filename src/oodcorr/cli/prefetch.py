"""``oodcorr prefetch --configfile X``: download a config's hub models and datasets and pin them in a lock."""

from __future__ import annotations

import logging
from pathlib import Path

from ..launch.sizing import check_gpu_memory
from ..modeling import hub
from .config import read_plan

log = logging.getLogger("oodcorr")


def add_parser(sub, help: str) -> None:
    f = sub.add_parser(
        "prefetch",
        help=help,
        description="Run on a machine with hub access (a login node), with HF_HOME on the shared file system the "
        "jobs see: resolves every hub model's and dataset's revision to a commit, downloads what the "
        "jobs load into the Hugging Face cache (safetensors only unless the entry opts in to pickle "
        "weights) and writes the lock file. Jobs then load exactly those commits, offline.",
    )
    f.add_argument("--configfile", required=True, metavar="FILE", help="the workflow config")
    f.add_argument(
        "--lock",
        metavar="FILE",
        help="where to write the lock (default: hub.lock of the config, else <config>.lock.yaml)",
    )
    f.add_argument("--workflow", metavar="DIR", help="the workflow folder (default: this checkout)")


def run(args) -> int:
    config, plan = read_plan(args.configfile, args.workflow)
    dirs = hub.cache_dirs()
    log.info("Hugging Face cache: %s (hub), %s (datasets)", dirs["hub"], dirs["datasets"])
    for w in hub.cache_warnings():
        log.warning("%s", w)
    if not hub.hub_models(plan) and not hub.hub_datasets(plan):
        log.info("%s names no hub model or dataset: nothing to fetch, no lock written", args.configfile)
        return 0
    path = Path(args.lock) if args.lock else hub.lock_path(args.configfile, config)
    lock = hub.prefetch(plan, args.configfile, path, say=log.info)
    for line in hub.describe(lock):
        log.info("%s", line)
    log.info("wrote %s; jobs now load these commits offline (keep HF_HOME as it is now for them)", path)
    try:
        for w in check_gpu_memory(plan, hub.HubLock.read(path)):
            log.warning("%s", w)
    except ValueError as e:
        log.error("the lock is written, but planning will stop: %s", e)
        return 2
    return 0
