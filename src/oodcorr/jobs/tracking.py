"""Each checkpoint's scores, and the answer, in the experiment trackers ``finetune.report_to`` names."""

from __future__ import annotations

import logging
import math
import os
import re
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..core import trackers
from ..core.atomic_write import write_json_atomic
from ..core.digests import sha256_file
from ..core.errors import ConfigError
from ..core.io import loads_json
from ..planning.config import trackers_of

log = logging.getLogger(__name__)

LEDGER = "trackers.json"  # in a run's tracker folder, and in the experiment folder for the answer
METRICS = ("accuracy", "accuracy_ci_low", "accuracy_ci_high")
STEP_AXIS = "checkpoint_step"  # W&B: the scores' own x-axis


@dataclass(frozen=True)
class RunIdentity:
    """What names a run in every tracker: its experiment, model, task (the in-domain set), n_train, seed."""

    experiment: str
    model: str
    task: str
    n_train: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.model}/{self.task}/n{self.n_train}/seed{self.seed}"

    @property
    def key(self) -> str:
        return f"{self.experiment}/{self.name}"

    @property
    def tags(self) -> dict[str, str]:
        parts = {"experiment": self.experiment, "model": self.model, "task": self.task}
        parts |= {"n_train": str(self.n_train), "seed": str(self.seed), "run": self.key}
        return {f"oodcorr.{k}": v for k, v in parts.items()}

    @classmethod
    def of_run_dir(cls, run_dir: str | Path) -> RunIdentity | None:
        """From a finetuning run's folder, ``results/<experiment>/finetune/<model>/<task>/n<N>/seed<S>``
        (:attr:`oodcorr.planning.layout.Paths.run_dir`); None for a folder elsewhere."""
        p = Path(run_dir).resolve()
        n, s = re.fullmatch(r"n(\d+)", p.parent.name), re.fullmatch(r"seed(\d+)", p.name)
        if not (n and s) or len(p.parents) < 6 or p.parents[3].name != "finetune":
            return None
        return cls(p.parents[4].name, p.parents[2].name, p.parents[1].name, int(n.group(1)), int(s.group(1)))


def root_of_run_dir(run_dir: str | Path) -> Path:
    """The experiment folder of a finetuning run's folder, or the folder itself outside the layout."""
    p = Path(run_dir).resolve()
    return p.parents[4] if RunIdentity.of_run_dir(p) else p


def _read_ledger(folder: Path) -> dict:
    path = folder / LEDGER
    try:
        doc = loads_json(path.read_bytes())
        return doc if isinstance(doc, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:  # a damaged ledger: said, and read as empty (points may repeat once)
        log.warning("%s: unreadable (%s); what the trackers were given is not known, so all is logged", path, e)
        return {}


def points(rows) -> dict[str, tuple[str, int, float]]:
    """One run's scores (rows of the scores table) as tracker points: ``tag@step -> (tag, step, value)``."""
    out = {}
    for r in rows.itertuples(index=False):
        for m in METRICS:
            value = getattr(r, m)
            if value is not None and not math.isnan(float(value)):
                tag, step = f"{r.role}/{r.testset}/{m}", int(r.step)
                out[f"{tag}@{step}"] = (tag, step, float(value))
    return out


def for_trainer(names: list[str], run_dir: str | Path) -> None:
    """Point the Trainer's callbacks at the run's own tracker runs through the trackers' environment variables."""
    ident = RunIdentity.of_run_dir(run_dir) or RunIdentity("", Path(run_dir).name, "", 0, 0)  # (outside the layout)
    root = root_of_run_dir(run_dir)
    if "mlflow" in names and os.environ.get("RANK", "0") == "0":
        os.environ["MLFLOW_RUN_ID"] = _mlflow_run(root, ident)[1]
        os.environ["MLFLOW_TRACKING_URI"] = trackers.mlflow_uri(root)
        os.environ["MLFLOW_EXPERIMENT_NAME"] = trackers.mlflow_experiment(root)
    if "wandb" in names:
        os.environ.setdefault("WANDB_DIR", str(run_dir))
        os.environ["WANDB_MODE"] = trackers.wandb_mode()
        os.environ["WANDB_PROJECT"] = trackers.wandb_project(root)
        os.environ["WANDB_RUN_GROUP"] = ident.key
        os.environ["WANDB_JOB_TYPE"] = "finetune"
        os.environ["WANDB_TAGS"] = ",".join(_wandb_tags(ident))


def _wandb_tags(ident: RunIdentity) -> list[str]:
    """The identity's parts as W&B tags (``model:tiny-opt``, ...; W&B allows 64 characters each)."""
    return [f"{k.split('.', 1)[1]}:{v}"[:64] for k, v in ident.tags.items() if k != "oodcorr.run"]


def of_config(config: dict) -> tuple[dict[str, list[str]], set[str]]:
    """The trackers each model logs scores to (from the config: editing it reruns nothing), and the series models."""
    names_of = {m: [n for n in names if n in trackers.SCORED] for m, names in trackers_of(config).items()}
    return names_of, {m["name"] for m in config["models"] if m.get("series")}


def check_for(names_of: dict[str, list[str]], root: str | Path) -> list[str]:
    """Every tracker any model names, checked installed and reachable (:func:`oodcorr.core.trackers.check`)."""
    names = sorted({n for v in names_of.values() for n in v})
    trackers.check(names, root)
    return names


class TrackerFailed(ConfigError):
    """A tracker refused what was logged to it after its check passed (a server gone mid-way)."""


def log_scores(scores, root: str | Path, names_of: dict[str, list[str]], series: set[str]) -> list[str]:
    """Log every run's scores to the trackers its model names; ``series``: models whose checkpoints were given."""
    said = []
    root = Path(root)
    for run_id, rows in scores.groupby("run_id", sort=True):
        model = str(rows["model"].iloc[0])
        wanted = names_of.get(model, [])  # (of_config keeps the trackers that take scores)
        if not wanted:
            continue
        first = rows.iloc[0]
        ident = RunIdentity(
            trackers.experiment_of(root), model, str(first["in_domain"]), int(first["n_train"]), int(first["seed"])
        )
        # the finetuning run's folder (the Trainer's loss is there), or a series' (nothing finetuned here)
        folder = root / ("series" if model in series else "finetune") / str(run_id)
        pts = points(rows)
        for name in wanted:
            send = {"tensorboard": _tensorboard_scores, "mlflow": _mlflow_scores, "wandb": _wandb_scores}[name]
            new = _send_once(name, root, folder, pts, partial(send, ident=ident, folder=folder, root=root))
            if new:
                said.append(f"{name}: {len(new)} points of run {ident.name} ({_destination(name, root, folder)[1]})")
    return said


def _send_once(name: str, root: Path, folder: Path, items: dict, send) -> dict:
    """``send`` the ``items`` (ledger key -> item) ``folder``'s ledger has not given tracker ``name``; record them."""
    dest = _destination(name, root, folder)[0]
    done = set(_read_ledger(folder).get(dest, []))
    new = {k: v for k, v in items.items() if k not in done}
    if new:
        try:
            send(new)
        except Exception as e:  # noqa: BLE001 -- any tracker library's error becomes the job's sentence
            raise TrackerFailed(
                f"finetune.report_to: {name}: logging failed ({type(e).__name__}: {str(e)[:300]}); run again when "
                "it is back: what was logged already is not logged twice"
            ) from e
        doc = _read_ledger(folder)
        doc[dest] = sorted(set(doc.get(dest, [])) | set(new))
        write_json_atomic(folder / LEDGER, doc)
    return new


def _destination(name: str, root: Path, folder: Path) -> tuple[str, str]:
    """Where tracker ``name`` logs: (its key in the ledger, the place in words)."""
    if name == "mlflow":
        uri, exp = trackers.mlflow_uri(root), trackers.mlflow_experiment(root)
        return f"mlflow {uri} {exp}", f"{uri}, experiment {exp}"
    if name == "wandb":
        project = trackers.wandb_project(root)
        return (
            f"wandb {trackers.wandb_host()} {project}",
            f"W&B {trackers.wandb_mode()}, project {project}, under {folder}/wandb",
        )
    return name, str(folder / "tensorboard")


def _event_writer(folder: Path, kind: str):
    """A writer of ``folder``/tensorboard, its file name unique: tensorboardX names a file by the second and host."""
    from tensorboardX import SummaryWriter  # the pinned writer; the reader is TensorBoard's own

    return SummaryWriter(logdir=str(folder / "tensorboard"), filename_suffix=f".oodcorr-{kind}.{uuid.uuid4().hex[:12]}")


def _tensorboard_scores(pts: dict, ident: RunIdentity, folder: Path, root: Path) -> None:
    with _event_writer(folder, "scores") as w:
        for tag, step, value in sorted(pts.values(), key=lambda p: (p[1], p[0])):
            w.add_scalar(tag, value, global_step=step)


def _mlflow_run(root: Path, ident: RunIdentity | None, answer: bool = False):
    """(an MLflow client, the run of a finetuning run or of the answer: found by its ``oodcorr.run`` tag, or made)."""
    if trackers.mlflow_uri(root).startswith("file:"):
        # our default: a file store in the experiment folder (MLflow 3 asks for this opt-in to use one)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient  # optional extra: oodcorr[mlflow]

    client = MlflowClient(tracking_uri=trackers.mlflow_uri(root))
    exp = client.get_experiment_by_name(trackers.mlflow_experiment(root))
    eid = exp.experiment_id if exp is not None else client.create_experiment(trackers.mlflow_experiment(root))
    key = f"{trackers.experiment_of(root)}: the answer" if answer else ident.key
    found = client.search_runs([eid], filter_string=f"tags.`oodcorr.run` = '{key}'", max_results=1)
    if found:
        return client, found[0].info.run_id
    tags = {"oodcorr.run": key, "oodcorr.experiment": trackers.experiment_of(root)} if answer else ident.tags
    run = client.create_run(eid, run_name=key if answer else ident.name, tags=tags)
    client.set_terminated(run.info.run_id)
    return client, run.info.run_id


def _mlflow_scores(pts: dict, ident: RunIdentity, folder: Path, root: Path) -> None:
    from mlflow.entities import Metric

    client, run_id = _mlflow_run(root, ident)
    metrics = [Metric(tag, value, 0, step) for tag, step, value in sorted(pts.values(), key=lambda p: p[1])]
    for i in range(0, len(metrics), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=metrics[i : i + 1000])


def _wandb_init(folder: Path, root: Path, **kw):
    import wandb  # optional extra: oodcorr[wandb]

    folder.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
    return wandb.init(
        dir=str(folder), project=trackers.wandb_project(root), mode=trackers.wandb_mode(), settings=settings, **kw
    )


def _wandb_scores(pts: dict, ident: RunIdentity, folder: Path, root: Path) -> None:
    run = _wandb_init(
        folder, root, name=f"{ident.name} scores", group=ident.key, job_type="scores", tags=_wandb_tags(ident)
    )
    try:
        run.define_metric(STEP_AXIS)
        for role in sorted({tag.split("/", 1)[0] for tag, _, _ in pts.values()}):
            run.define_metric(f"{role}/*", step_metric=STEP_AXIS)
        for s in sorted({s for _, s, _ in pts.values()}):
            run.log({STEP_AXIS: s, **{tag: v for tag, step, v in pts.values() if step == s}})
    finally:
        run.finish()


def is_answer_file(rel: str) -> bool:
    """Whether a published file (its path in the experiment folder) is part of the answer."""
    return rel in ("analysis/agreement.csv", "analysis/explorer.html", "analysis/answer.txt") or (
        rel.startswith("analysis/consensus/") and rel.endswith(".png")
    )


def log_answer(root: str | Path, files: list[Path], names: list[str]) -> list[str]:
    """The answer's ``files`` to each tracker in ``names``, once per version of those files; a line per tracker."""
    root = Path(root)
    files = [Path(f) for f in files if Path(f).is_file()]
    if not files:
        return []
    digest = ",".join(sha256_file(f)[:16] for f in sorted(files))
    said = []
    for name in names:  # (check_for names each tracker of of_config once)
        send = {"tensorboard": _tensorboard_answer, "mlflow": _mlflow_answer, "wandb": _wandb_answer}[name]
        if _send_once(name, root, root, {digest: None}, lambda _new, send=send: send(root, files)):
            said.append(f"{name}: the answer ({len(files)} files)")
    return said


def _tensorboard_answer(root: Path, files: list[Path]) -> None:
    text = next((f.read_text(encoding="utf-8") for f in files if f.name == "answer.txt"), None)
    if text is None:
        return
    done = len(_read_ledger(root).get("tensorboard", []))  # one step per answer logged
    with _event_writer(root, "answer") as w:
        w.add_text("answer", "\n\n".join(text.splitlines()), global_step=done)


def _mlflow_answer(root: Path, files: list[Path]) -> None:
    client, run_id = _mlflow_run(root, None, answer=True)
    for f in files:
        client.log_artifact(run_id, str(f), artifact_path=f.parent.name if f.parent.name == "consensus" else None)


def _wandb_answer(root: Path, files: list[Path]) -> None:
    import wandb

    exp = trackers.experiment_of(root)
    run = _wandb_init(root / "trackers", root, name=f"{exp}: the answer", group="answer", job_type="answer")
    try:
        art = wandb.Artifact(f"{exp}-answer", type="answer")
        for f in files:
            art.add_file(str(f), name=f"{f.parent.name}/{f.name}" if f.parent.name == "consensus" else f.name)
        run.log_artifact(art)
    finally:
        run.finish()
