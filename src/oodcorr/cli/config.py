"""The workflow config a verb names (``--configfile``, ``--workflow``): read, planned, and its hub lock."""

from __future__ import annotations

from pathlib import Path

from ..modeling import hub
from ..planning.plan import load
from ..planning.schema import read_config


def workflow_dir(given: str | None) -> Path:
    """The workflow folder: given, else this checkout, else the current one."""
    if given:
        return Path(given)
    here = Path(__file__).resolve().parents[3]
    return here if (here / "Snakefile").exists() else Path.cwd()


def read_plan(configfile: str, workflow: str | None):
    config = read_config(configfile)
    return config, load(config, workflow_dir(workflow), sources=[configfile])


def read_lock(configfile: str, config: dict):
    """The config's hub lock, or None when it has none yet."""
    path = hub.lock_path(configfile, config)
    return hub.HubLock.read(path) if path.exists() else None
