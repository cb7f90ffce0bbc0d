"""The Hugging Face hub: prefetch into a shared cache, pin each revision to a commit, run offline."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from ..core.atomic_write import write_text_atomic
from ..core.errors import ConfigError, DataError
from ..core.filesystems import human_bytes
from ..core.model_entry import ModelEntry
from ..core.yaml_files import load_yaml
from .weights import meta_shapes, model_patterns, weight_shapes

log = logging.getLogger(__name__)

LOCK_VERSION = 1
LOCK_ENV = "OODCORR_HUB_LOCK"  # the lock file the jobs' hub loads are pinned to
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


class LockMismatch(ConfigError):
    """A job asked for a revision that the lock file does not pin."""


@dataclass(frozen=True)
class HubLock:
    """A lock file as prefetch wrote it."""

    path: Path
    config: str  # the config file prefetch read
    models: dict[str, dict] = field(default_factory=dict)  # model name -> entry
    datasets: dict[str, dict] = field(default_factory=dict)  # dataset name -> entry
    cache: dict = field(default_factory=dict)  # {"hub": ..., "datasets": ...} as prefetch saw them

    @property
    def command(self) -> str:
        return f"oodcorr prefetch --configfile {self.config}"

    @classmethod
    def read(cls, path: str | Path) -> HubLock:
        path = Path(path)
        try:
            doc = load_yaml(path)  # its size and depth checked before it is built (oodcorr.core.limits)
        except ConfigError as e:
            raise ConfigError(
                f"{path}: not a readable lock file ({e}); delete it and run oodcorr prefetch again"
            ) from None
        if not isinstance(doc, dict) or doc.get("version") != LOCK_VERSION:
            raise ConfigError(
                f"{path}: not an oodcorr lock file of version {LOCK_VERSION}; delete it and run oodcorr prefetch again"
            )
        return cls(
            path=path,
            config=str(doc.get("config") or "<config>"),
            models=dict(doc.get("models") or {}),
            datasets=dict(doc.get("datasets") or {}),
            cache=dict(doc.get("cache") or {}),
        )

    def dataset_for(self, call: dict) -> tuple[dict | None, str]:
        """(the locked dataset with this ``load_dataset`` call's id, config and split, or None; how it
        differs from the call: "", another revision, or not in the lock)."""
        for name, entry in self.datasets.items():
            hub = entry.get("hub") or {}
            if (hub.get("path"), hub.get("name"), hub.get("split")) == (call["path"], call.get("name"), call["split"]):
                if hub.get("revision") != call["revision"]:
                    return entry, _revision_message(f"datasets.{name}", call["revision"], entry)
                return entry, ""
        where = f"hub dataset {call['path']} ({call.get('name') or 'default'}/{call['split']})"
        return None, f"{where} is not in the lock file"

    @property
    def download_bytes(self) -> int:
        return sum(int(e.get("bytes") or 0) for e in (*self.models.values(), *self.datasets.values()))


def lock_path(configfile: str | Path, config: dict) -> Path:
    """Where a config's lock lives: ``hub.lock`` (relative to the working folder), else beside the
    config file, named after it (``config/paper.yaml`` -> ``config/paper.lock.yaml``)."""
    given = (config.get("hub") or {}).get("lock")
    if given:
        return Path(given)
    configfile = Path(configfile)
    return configfile.with_name(f"{configfile.stem}.lock.yaml")


def hub_load_kwargs(spec: dict) -> dict:
    """The exact ``datasets.load_dataset`` keyword arguments for a hub entry."""
    hub = spec.get("hub") or {}
    missing = [k for k in ("id", "split", "revision") if not hub.get(k)]
    if missing:
        raise DataError(f"hub dataset entry needs hub.{', hub.'.join(missing)} (got {hub})")
    return {"path": hub["id"], "name": hub.get("config"), "split": hub["split"], "revision": hub["revision"]}


def hub_models(plan) -> list:
    return [spec for spec in plan.models.values() if spec.model_entry.source == "hub"]


def hub_datasets(plan) -> dict[str, dict]:
    """Dataset name -> its exact ``datasets.load_dataset`` call, for the plan's hub datasets."""
    specs = {name: plan.exp.dataset_params(name) for name in plan.datasets}
    return {name: hub_load_kwargs(spec) for name, spec in specs.items() if spec.get("source") == "hub"}


def check_lock(plan, lock: HubLock) -> None:
    """Every hub model and dataset of the plan is in the lock, at the revision the config asks for."""
    problems = [p for spec in hub_models(plan) if (p := _model_mismatch(lock, spec.model_entry))]
    for name, call in hub_datasets(plan).items():
        entry, problem = lock.dataset_for(call)
        if problem:
            problems.append(problem if entry else f"datasets.{name}: {problem}")
    if problems:
        raise LockMismatch(
            f"{lock.path} does not match the config:\n  "
            + "\n  ".join(problems)
            + f"\nDownload and pin what the config asks for: {lock.command}"
        )


def _model_mismatch(lock: HubLock, model_entry: ModelEntry) -> str | None:
    """How the lock's entry of a model differs from its entry in the config (none, id, then revision)."""
    where, entry = model_entry.where, lock.models.get(model_entry.name)
    if entry is None:
        return f"{where}: not in the lock file"
    if entry.get("hub") != model_entry.hub:
        return f"{where}: hub id {model_entry.hub!r} in the config, {entry.get('hub')!r} in the lock file"
    if entry.get("revision") != model_entry.revision:
        return _revision_message(where, model_entry.revision, entry)
    return None


def _revision_message(where: str, asked, entry: dict) -> str:
    locked = entry.get("revision") if "revision" in entry else (entry.get("hub") or {}).get("revision")
    return f"{where}: revision {asked!r} in the config, {locked!r} in the lock file (commit {entry.get('commit')})"


def use_lock(config: dict, configfile: str | Path, plan) -> tuple[HubLock | None, list[str]]:
    """Read, check and activate the config's lock; returns (the lock or None, the planning warnings:
    the plan's own, less those about unpinned revisions that the lock pins, and the cache's)."""
    path = lock_path(configfile, config)
    offline = (config.get("hub") or {}).get("offline", "auto")
    needs = bool(hub_models(plan) or hub_datasets(plan))
    if not path.exists():
        if (config.get("hub") or {}).get("lock"):
            raise ConfigError(f"hub.lock: {path} does not exist; run oodcorr prefetch --configfile {configfile}")
        warnings = list(plan.warnings)
        if needs:
            warnings.append(
                f"no hub lock file ({path}): every job downloads its hub models and datasets itself; on a "
                f"cluster run `oodcorr prefetch --configfile {configfile}` on the login node first"
            )
        if offline is True:
            os.environ.update({k: "1" for k in OFFLINE_ENV})
        return None, warnings
    lock = HubLock.read(path)
    check_lock(plan, lock)
    # what the lock pins that this machine's cache does not hold: a file missing, or one whose size is
    # not the one prefetch recorded (a shard cut short)
    now = cache_dirs()
    missing = []
    for name, e in lock.models.items():
        snap = model_snapshot(e["hub"], e["commit"])
        files = e.get("files") or {}
        gone = [f for f in files if not (snap / f).exists()]
        if gone:
            missing.append(
                f"models[{name}]: {len(gone)} file(s) of {e['hub']}@{e['commit']} not in {snap} (e.g. {gone[0]})"
            )
            continue
        # a shard cut short (an interrupted download, a full disk) has another size than prefetch recorded
        cut = [f for f, size in files.items() if isinstance(size, int) and (snap / f).stat().st_size != size]
        if cut:
            missing.append(
                f"models[{name}]: {len(cut)} file(s) of {e['hub']}@{e['commit']} in {snap} have another size than "
                f"prefetch recorded (e.g. {cut[0]}: {(snap / cut[0]).stat().st_size} bytes, {files[cut[0]]} when "
                "fetched)"
            )
    for name, e in lock.datasets.items():
        gone = [f for f in (e.get("files") or {}) if not (Path(now["datasets"]) / f).exists()]
        if gone:
            missing.append(f"datasets.{name}: {len(gone)} Arrow file(s) not in {now['datasets']} (e.g. {gone[0]})")
    if missing:
        raise ConfigError(
            f"{path}: the Hugging Face cache of this machine lacks what the lock pins:\n  "
            + "\n  ".join(missing)
            + f"\nThis machine's cache: {now['hub']} (hub), {now['datasets']} (datasets); prefetch wrote to "
            f"{lock.cache.get('hub')} and {lock.cache.get('datasets')}. Set HF_HOME to the folder prefetch used, "
            f"or run `{lock.command}` again."
        )
    os.environ[LOCK_ENV] = str(path.resolve())
    if offline in ("auto", True):
        os.environ.update({k: "1" for k in OFFLINE_ENV})
    pinned = tuple(f"models[{m}]: hub revision" for m in lock.models)  # oodcorr.planning.config's warning, now moot
    return lock, [w for w in plan.warnings if not w.startswith(pinned)] + cache_warnings()


def cache_dirs() -> dict[str, str]:
    """This process's Hugging Face caches (hub files, datasets' Arrow files), from the environment."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    data = os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets")
    return {"home": os.path.expanduser(home), "hub": os.path.expanduser(hub), "datasets": os.path.expanduser(data)}


def cache_warnings() -> list[str]:
    """Where the cache is, when a cluster's nodes would not all see it."""
    dirs = cache_dirs()
    out = []
    tmp = [os.environ.get("TMPDIR") or "", *TEMP_ROOTS]
    for kind in ("hub", "datasets"):
        p = os.path.realpath(dirs[kind])
        if any(t and (p == t or p.startswith(t.rstrip("/") + "/")) for t in tmp):
            out.append(
                f"the Hugging Face {kind} cache is {dirs[kind]}, a node-local temporary folder; set HF_HOME to a "
                "folder on the shared file system"
            )
    if not os.environ.get("HF_HOME") and not out:
        out.append(
            f"HF_HOME is not set, so the Hugging Face cache is {dirs['home']}; on a cluster, set HF_HOME to a "
            "folder on the shared file system (the same for prefetch and the jobs)"
        )
    return out


def model_snapshot(repo: str, commit: str) -> Path:
    """A model commit's folder in the hub cache (``models--org--name/snapshots/<commit>``)."""
    root = Path(cache_dirs()["hub"])
    return root / ("models--" + repo.replace("/", "--")) / "snapshots" / commit


@lru_cache(maxsize=4)
def _job_lock(path: str, mtime_ns: int) -> HubLock:
    return HubLock.read(path)


def active_lock() -> HubLock | None:
    """The lock this job runs under (``OODCORR_HUB_LOCK``, set by the Snakefile), or None."""
    path = os.environ.get(LOCK_ENV)
    if not path:
        return None
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        raise ConfigError(f"{LOCK_ENV}={path}: the lock file is gone; run oodcorr prefetch again") from None
    return _job_lock(path, mtime)


def pinned_model_revision(model_entry: ModelEntry) -> str | None:
    """The revision a job loads a hub model at: the lock's commit under a lock, else the entry's own."""
    lock = active_lock()
    if lock is None:
        return model_entry.revision
    problem = _model_mismatch(lock, model_entry)
    if problem:
        raise LockMismatch(f"{problem} ({lock.path}); refusing to load another revision. Run `{lock.command}`")
    return lock.models[model_entry.name]["commit"]


def pinned_dataset(call: dict) -> tuple[dict, str | None]:
    """(the ``load_dataset`` call a job makes, the locked commit or None) for a hub dataset's call."""
    lock = active_lock()
    if lock is None:
        return call, None
    entry, problem = lock.dataset_for(call)
    if problem:
        raise LockMismatch(f"{problem} ({lock.path}); refusing to load another revision. Run `{lock.command}`")
    return dict(call, revision=entry["commit"]), entry["commit"]


def check_loaded_dataset(ds, commit: str, where: str) -> None:
    """Offline, ``datasets`` reads the newest cached copy of a dataset whatever the revision asked for:
    its Arrow files must lie in the locked commit's folder."""
    files = [f.get("filename", "") for f in (getattr(ds, "cache_files", None) or [])]
    wrong = [f for f in files if commit not in Path(f).parts]
    if wrong:
        raise LockMismatch(
            f"{where}: the cached copy that loaded ({wrong[0]}) is not the locked commit {commit}; "
            "run oodcorr prefetch again"
        )


def prefetch(plan, configfile: str | Path, lock_file: str | Path, *, say: Callable[[str], None] = print) -> dict:
    """Download every hub model and dataset of ``plan`` into the cache, resolve each revision to a
    commit and write the lock file (atomically, once everything is there). Returns the lock."""
    import huggingface_hub

    api = huggingface_hub.HfApi()
    dirs = cache_dirs()
    models: dict[str, dict] = {}
    for spec in hub_models(plan):
        model_entry = spec.model_entry
        asked = model_entry.revision
        where = f"{model_entry.where}: {model_entry.hub}@{asked or 'main'}"
        try:
            info = api.model_info(model_entry.hub, revision=asked)
        except Exception as err:  # offline, no such repo or revision, gated: say which entry
            raise ConfigError(
                f"{where}: could not resolve on the hub ({type(err).__name__}: {err}); check the id and "
                "revision, and for a gated model log in (hf auth login) or set HF_TOKEN"
            ) from None
        commit = info.sha
        names = model_patterns(model_entry, [s.rfilename for s in (info.siblings or [])])
        say(f"{spec.name}: {model_entry.hub}@{asked or 'main'} -> {commit}; downloading {len(names)} file(s)")
        folder = Path(huggingface_hub.snapshot_download(model_entry.hub, revision=commit, allow_patterns=names))
        files = {n: (folder / n).stat().st_size for n in names if (folder / n).exists()}
        if any(n.endswith(".safetensors") for n in files):
            params, linear = weight_shapes(folder)
        else:
            params, linear = meta_shapes(folder, model_entry)
        models[spec.name] = {
            "hub": model_entry.hub,
            "revision": asked,
            "commit": commit,
            "parameters": int(params),
            "bytes": sum(files.values()),
            "files": files,
            "linear": linear,
        }
    datasets_: dict[str, dict] = {}
    calls = hub_datasets(plan)
    if calls:
        import datasets  # datasets: only a hub dataset needs it

        for name, call in calls.items():
            where = f"datasets.{name}: {call['path']}@{call['revision']}"
            try:
                commit = api.dataset_info(call["path"], revision=call["revision"]).sha
            except Exception as err:
                raise ConfigError(f"{where}: could not resolve on the hub ({type(err).__name__}: {err})") from None
            say(f"{name}: {call['path']} ({call['name'] or 'default'}/{call['split']})@{call['revision']} -> {commit}")
            ds = datasets.load_dataset(**dict(call, revision=commit))
            root = Path(dirs["datasets"])
            files = {}
            for f in getattr(ds, "cache_files", None) or []:
                p = Path(f["filename"])
                rel = str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
                files[rel] = p.stat().st_size
            datasets_[name] = {
                "hub": dict(call),
                "commit": commit,
                "bytes": sum(files.values()),
                "files": files,
                "rows": len(ds),
            }
    lock = {
        "version": LOCK_VERSION,
        "config": str(configfile),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cache": {"hub": dirs["hub"], "datasets": dirs["datasets"]},
        "models": models,
        "datasets": datasets_,
    }
    head = (
        f"# oodcorr hub lock, written by `oodcorr prefetch --configfile {lock['config']}`.\n"
        "# Jobs load exactly these commits, offline, from the Hugging Face cache. Do not edit:\n"
        "# after changing a revision in the config, run that command again.\n"
    )
    write_text_atomic(lock_file, head + yaml.safe_dump(lock, sort_keys=False, width=120))
    return lock


def describe(lock: dict) -> list[str]:
    """One line per pinned model and dataset, for the console."""
    return [
        f"model {name}: {e['hub']} {e['revision'] or '(default branch)'} = {e['commit']}, "
        f"{len(e['files'])} files, {human_bytes(e['bytes'])}, {e['parameters']:,} parameters"
        for name, e in lock["models"].items()
    ] + [
        f"dataset {name}: {e['hub']['path']} {e['hub']['revision']} = {e['commit']}, {e['rows']} rows, "
        f"{human_bytes(e['bytes'])}"
        for name, e in lock["datasets"].items()
    ]
