"""The experiment trackers ``finetune.report_to`` names: which, where each writes, and whether it can.
Destinations and credentials come from the trackers' own environment variables, never from the config.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from .errors import ConfigError

# the trackers whose scores the workflow writes; the Trainer's others get the training loss only
SCORED = ("tensorboard", "mlflow", "wandb")
# what each needs installed (any one of the modules), and how to install it
MODULES = {
    "tensorboard": (("tensorboardX", "tensorboard"), "tensorboardX (pinned in requirements.txt)"),
    "mlflow": (("mlflow",), "pip install 'oodcorr[mlflow]' (mlflow-skinny)"),
    "wandb": (("wandb",), "pip install 'oodcorr[wandb]'"),
    "comet_ml": (("comet_ml",), "pip install comet_ml"),
    "trackio": (("trackio",), "pip install trackio"),
}
WANDB_HOST = "https://api.wandb.ai"
TIMEOUT_S = 10.0  # a tracking server that does not answer in this long is not reachable


def installed(name: str) -> bool:
    """Whether tracker ``name``'s package is importable (nothing is imported)."""
    return any(importlib.util.find_spec(m) is not None for m in MODULES[name][0])


def named(report_to) -> list[str]:
    """The trackers a ``finetune.report_to`` value names: ``auto`` is TensorBoard where installed."""
    if report_to in (None, "auto"):
        return ["tensorboard"] if installed("tensorboard") else []
    if report_to == "none":
        return []
    return list(report_to)


def experiment_of(root: str | Path) -> str:
    return Path(root).name


def mlflow_uri(root: str | Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"file:{Path(root).resolve() / 'mlruns'}"


def mlflow_experiment(root: str | Path) -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or f"oodcorr-{experiment_of(root)}"


def wandb_host() -> str:
    return os.environ.get("WANDB_BASE_URL") or WANDB_HOST


def wandb_mode() -> str:
    """``WANDB_MODE``, else online where the user has logged in (``WANDB_API_KEY``, or the ``~/.netrc`` entry
    ``wandb login`` writes), else offline (no network needed)."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return os.environ.get("WANDB_MODE") or "online"
    try:
        host = urllib.parse.urlparse(wandb_host()).hostname or ""
        return "online" if netrc.netrc().authenticators(host) is not None else "offline"
    except (OSError, netrc.NetrcParseError):
        return "offline"


def wandb_project(root: str | Path) -> str:
    return os.environ.get("WANDB_PROJECT") or f"oodcorr-{experiment_of(root)}"


def _unreachable(url: str) -> str | None:
    """Why ``url`` cannot be reached, or None: any HTTP answer, an error status included, means a server is there."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return str(getattr(e, "reason", e))


def problems(trackers: list[str], root: str | Path, key: str = "finetune.report_to") -> list[str]:
    """A sentence for each tracker in ``trackers`` that is not installed or not reachable from here."""
    out = []
    for name in dict.fromkeys(trackers):
        if not installed(name):
            out.append(f"{key}: {name} is not installed here ({MODULES[name][1]}), or leave it out of {key}")
            continue
        if name == "mlflow":
            uri = mlflow_uri(root)
            scheme = urllib.parse.urlparse(uri).scheme
            if scheme in ("http", "https"):
                why = _unreachable(uri.rstrip("/") + "/health")
                if why:
                    out.append(
                        f"{key}: mlflow: the tracking server MLFLOW_TRACKING_URI={uri} cannot be reached from here "
                        f"({why}); start it, or unset MLFLOW_TRACKING_URI to write a file store in {Path(root)}/mlruns"
                    )
            elif scheme not in ("", "file") and scheme.split("+")[0] in ("sqlite", "postgresql", "mysql", "mssql"):
                if importlib.util.find_spec("sqlalchemy") is None:
                    out.append(
                        f"{key}: mlflow: MLFLOW_TRACKING_URI={uri} is a database, which needs the full mlflow "
                        "package (with sqlalchemy); install it, or unset MLFLOW_TRACKING_URI for a file store"
                    )
        if name == "wandb" and wandb_mode() == "online":
            why = _unreachable(wandb_host())
            if why:
                out.append(
                    f"{key}: wandb: {wandb_host()} cannot be reached from here ({why}); set WANDB_MODE=offline "
                    "to write the runs to disk (`wandb sync` them later)"
                )
    return out


def check(trackers: list[str], root: str | Path, key: str = "finetune.report_to") -> None:
    found = problems(trackers, root, key)
    if found:
        raise ConfigError("; ".join(found))
