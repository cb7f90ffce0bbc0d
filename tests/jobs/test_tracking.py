"""Each checkpoint's scores and the answer in the experiment trackers (oodcorr.jobs.tracking), read back
by each tracker's own reader (TensorBoard's EventAccumulator, the MLflow client, W&B's offline record
files): every point once, at its step, however often the aggregation runs; and the checks of
oodcorr.core.trackers, before any work, of a tracker that is not installed or not reachable.

Everything here is offline: W&B in offline mode, MLflow to a file store in the test's folder, and the
servers that cannot be reached are a closed port on this machine."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest

from oodcorr.core import trackers
from oodcorr.core.errors import ConfigError
from oodcorr.jobs import tracking

from helpers import micro_config, run_rule_script, tensorboard_scalars, wandb_runs

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once
RUN = "m1/synth/n64/seed0"


SET_FOR_THE_TRAINER = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_ALLOW_FILE_STORE")
SET_FOR_THE_TRAINER += ("WANDB_MODE", "WANDB_PROJECT", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_JOB_TYPE", "WANDB_TAGS")


@pytest.fixture(autouse=True)
def offline():
    """No tracker of the developer's (tests/conftest.py clears their variables for the session): W&B
    offline, MLflow to the experiment folder's file store; what for_trainer sets in this process is
    undone after each test."""
    import os

    before = {k: os.environ.get(k) for k in SET_FOR_THE_TRAINER}
    os.environ["WANDB_MODE"] = "offline"
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _scores(testsets=("synth-test", "a", "b"), steps=(0, 4, 8)) -> pd.DataFrame:
    rows = []
    for k, t in enumerate(testsets):
        for s in steps:
            acc = 0.5 + 0.01 * k + 0.001 * s
            rows.append(
                {
                    "model": "m1",
                    "in_domain": "synth",
                    "n_train": 64,
                    "seed": 0,
                    "run_id": RUN,
                    "step": s,
                    "testset": t,
                    "role": "in-domain" if t == "synth-test" else "ood",
                    "accuracy": acc,
                    "accuracy_ci_low": acc - 0.05,
                    "accuracy_ci_high": acc + 0.05,
                }
            )
    return pd.DataFrame(rows)


def _mlflow(root: Path):
    """The MLflow client reading the experiment folder's file store (MLflow 3 reads one only when asked)."""
    import os

    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # (undone after each test: SET_FOR_THE_TRAINER)

    client = MlflowClient(tracking_uri=trackers.mlflow_uri(root))
    exp = client.get_experiment_by_name(f"oodcorr-{root.name}")
    return client, exp.experiment_id


def test_every_point_once_in_each_tracker_however_often_the_aggregation_runs(tmp_path):
    """Scores of 3 testsets x 3 checkpoints, logged; logged again (a rerun: nothing new); then with a
    testset added (only its points); every tracker holds each point once, at its checkpoint's step."""
    root = tmp_path / "results" / "exp1"
    names = {"m1": ["tensorboard", "mlflow", "wandb"]}
    first = _scores()
    said = tracking.log_scores(first, root, names, set())
    assert [line.split(":")[0] for line in said] == ["tensorboard", "mlflow", "wandb"]
    assert all("27 points of run m1/synth/n64/seed0" in line for line in said)  # 3 sets x 3 steps x 3 values
    assert tracking.log_scores(first, root, names, set()) == []  # a rerun logs nothing
    said = tracking.log_scores(_scores(("synth-test", "a", "b", "c")), root, names, set())
    assert all("9 points" in line for line in said) and len(said) == 3  # only the added testset's

    want = {
        (f"{r.role}/{r.testset}/accuracy", r.step): r.accuracy
        for r in _scores(("synth-test", "a", "b", "c")).itertuples()
    }
    folder = root / "finetune" / RUN
    tb = tensorboard_scalars(folder / "tensorboard")
    got = {(tag, step): v for tag, pts in tb.items() if tag.endswith("/accuracy") for step, v in pts}
    assert got == pytest.approx(want)
    assert all(len(pts) == 3 for pts in tb.values()) and len(tb) == 12  # 4 testsets x 3 values, each step once
    assert [s for s, _ in tb["ood/c/accuracy_ci_high"]] == [0, 4, 8]
    assert [v for _, v in tb["ood/c/accuracy_ci_high"]] == pytest.approx([0.58, 0.584, 0.588])

    client, eid = _mlflow(root)
    (run,) = client.search_runs([eid])
    assert run.info.run_name == RUN and run.data.tags["oodcorr.run"] == f"exp1/{RUN}"
    assert {k: run.data.tags[f"oodcorr.{k}"] for k in ("model", "task", "n_train", "seed")} == {
        "model": "m1", "task": "synth", "n_train": "64", "seed": "0"
    }  # fmt: skip
    for (tag, step), v in want.items():
        hist = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag) if m.step == step]
        assert hist == [(step, pytest.approx(v))], tag

    runs = wandb_runs(folder)
    assert len(runs) == 2 and {r["group"] for r in runs} == {f"exp1/{RUN}"}  # the first logging and the added testset
    assert all(
        r["name"] == f"{RUN} scores" and r["job_type"] == "scores" and r["project"] == "oodcorr-exp1" for r in runs
    )
    assert runs[0]["metrics"] == {"checkpoint_step": "", "in-domain/*": "checkpoint_step", "ood/*": "checkpoint_step"}
    logged = {
        (k, row["checkpoint_step"]): v
        for r in runs
        for row in r["history"]
        for k, v in row.items()
        if k.endswith("/accuracy")
    }
    assert logged == pytest.approx(want)
    assert sum(1 for r in runs for row in r["history"] for k in row if k.endswith("/accuracy")) == len(want)


def test_a_series_run_gets_its_own_folder_and_mlflow_run(tmp_path):
    root = tmp_path / "results" / "exp2"
    tracking.log_scores(_scores(), root, {"m1": ["tensorboard", "mlflow"]}, {"m1"})
    assert tensorboard_scalars(root / "series" / RUN / "tensorboard")
    assert not (root / "finetune").exists()
    client, eid = _mlflow(root)
    assert [r.data.tags["oodcorr.run"] for r in client.search_runs([eid])] == [f"exp2/{RUN}"]


def test_the_answer_is_logged_once_per_version_of_its_files(tmp_path):
    root = tmp_path / "results" / "exp3"
    (root / "analysis" / "consensus").mkdir(parents=True)
    files = [
        root / "analysis" / "agreement.csv",
        root / "analysis" / "answer.txt",
        root / "analysis/consensus/synth.png",
    ]
    files[0].write_text("x,y,verdict\na,b,unresolved\n")
    files[1].write_text("the answer: 1 pair\nevery pair, explored\n")
    files[2].write_bytes(b"\x89PNG\r\n\x1a\n")
    names = ["tensorboard", "mlflow", "wandb"]
    assert len(tracking.log_answer(root, files, names)) == 3
    assert tracking.log_answer(root, files, names) == []  # the same files: not again
    files[0].write_text("x,y,verdict\na,b,positive on average\n")
    assert len(tracking.log_answer(root, files, names)) == 3  # a new answer
    client, eid = _mlflow(root)
    (run,) = client.search_runs([eid])
    assert run.info.run_name == "exp3: the answer"
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == [
        "agreement.csv",
        "answer.txt",
        "consensus",
    ]
    runs = wandb_runs(root / "trackers")
    assert [r["job_type"] for r in runs] == ["answer", "answer"]
    assert sorted(runs[0]["artifacts"][0]["files"]) == ["agreement.csv", "answer.txt", "consensus/synth.png"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(root / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    # each logging writes its own event file (a random suffix), which the reader takes in name order
    texts = sorted(
        (t for tag in acc.Tags()["tensors"] if tag.startswith("answer") for t in acc.Tensors(tag)), key=lambda t: t.step
    )
    assert [t.step for t in texts] == [0, 1] and b"the answer: 1 pair" in texts[0].tensor_proto.string_val[0]


def test_the_trainer_is_pointed_at_the_runs_own_tracker_runs(tmp_path, monkeypatch):
    """The finetune's side: MLflow's callback attaches to the run found by the run's identity (the one
    the scores go to), W&B's run goes in the run's group under the run's folder; a setting the user
    made in the tracker's own variable wins."""
    run_dir = tmp_path / "results" / "exp4" / "finetune" / "m1" / "synth" / "n64" / "seed0"
    run_dir.mkdir(parents=True)
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    tracking.for_trainer(["mlflow", "wandb"], run_dir)
    import os

    client, eid = _mlflow(tmp_path / "results" / "exp4")
    (run,) = client.search_runs([eid])
    assert os.environ["MLFLOW_RUN_ID"] == run.info.run_id and run.data.tags["oodcorr.run"] == f"exp4/{RUN}"
    assert os.environ["WANDB_RUN_GROUP"] == f"exp4/{RUN}" and os.environ["WANDB_DIR"] == str(run_dir)
    assert os.environ["WANDB_PROJECT"] == "mine" and os.environ["WANDB_MODE"] == "offline"
    tracking.log_scores(_scores(), tmp_path / "results" / "exp4", {"m1": ["mlflow"]}, set())
    assert [r.info.run_id for r in client.search_runs([eid])] == [run.info.run_id]  # the same run


# ---- the checks: installed, reachable --------------------------------------------------------------
def test_a_tracker_that_cannot_be_reached_or_is_not_installed_is_named_with_what_to_do(tmp_path, monkeypatch):
    assert trackers.problems(["tensorboard", "mlflow", "wandb"], tmp_path) == []  # file store, offline
    monkeypatch.setenv("MLFLOW_TRACKING_URI", CLOSED)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", CLOSED)
    found = trackers.problems(["mlflow", "wandb", "comet_ml"], tmp_path)
    assert found[0].startswith(f"finetune.report_to: mlflow: the tracking server MLFLOW_TRACKING_URI={CLOSED} cannot")
    assert "unset MLFLOW_TRACKING_URI to write a file store" in found[0]
    assert found[1].startswith(f"finetune.report_to: wandb: {CLOSED} cannot be reached from here")
    assert "set WANDB_MODE=offline" in found[1]
    assert found[2] == (
        "finetune.report_to: comet_ml is not installed here (pip install comet_ml), or leave it out of "
        "finetune.report_to"
    )
    real = trackers.installed
    monkeypatch.setattr(trackers, "installed", lambda name: name != "mlflow" and real(name))
    with pytest.raises(ConfigError, match=r"mlflow is not installed here \(pip install 'oodcorr\[mlflow\]'"):
        trackers.check(["mlflow"], tmp_path)


def test_w_and_b_is_offline_unless_the_user_has_logged_in(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    assert trackers.wandb_mode() == "offline"
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert trackers.wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert trackers.wandb_mode() == "disabled"


def test_planning_refuses_a_tracker_that_cannot_be_reached(tmp_path, monkeypatch):
    """While planning (check_trackers, before any job) and again when the aggregation starts (a compute
    node is not the login node): one sentence naming finetune.report_to and the variable to change."""
    from oodcorr.planning.config import check_trackers

    monkeypatch.chdir(tmp_path)
    cfg = micro_config()
    cfg["finetune"]["report_to"] = ["tensorboard", "mlflow"]
    check_trackers(cfg, "results/micro")  # a file store: nothing to reach
    monkeypatch.setenv("MLFLOW_TRACKING_URI", CLOSED)
    with pytest.raises(ConfigError, match="finetune.report_to: mlflow: the tracking server"):
        check_trackers(cfg, "results/micro")
    out = tmp_path / "results/micro/.staging/scores.parquet"
    sm = dict(
        config=cfg,
        input=[],
        output=types.SimpleNamespace(parquet=str(out), csv=str(out.with_suffix(".csv"))),
        params=types.SimpleNamespace(coarse={}, data={}, places={}),
        rule="aggregate_scores",
    )
    said = run_rule_script("aggregate_scores", tmp_path, **sm)
    assert said.startswith("oodcorr: finetune.report_to: mlflow: the tracking server") and not out.exists()


def test_two_loggings_in_one_second_each_keep_their_event_file(tmp_path, monkeypatch):
    """tensorboardX names an event file by the second it opens it (and the host): the second logging
    within one second (an added testset's points, a new answer) replaced the first one's file, and
    TensorBoard lost those points. The clock is held at one second here, so the names would clash."""
    import tensorboardX.event_file_writer as efw
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(efw, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.25))
    root = tmp_path / "results" / "exp4"
    names = {"m1": ["tensorboard"]}
    assert tracking.log_scores(_scores(("synth-test", "a")), root, names, set())
    assert tracking.log_scores(_scores(("synth-test", "a", "b")), root, names, set())  # only b's points
    tb = tensorboard_scalars(root / "finetune" / RUN / "tensorboard")
    assert sorted(tb) == sorted(f"{p}/{t}/{v}" for p, t in (("in-domain", "synth-test"), ("ood", "a"), ("ood", "b"))
                                for v in ("accuracy", "accuracy_ci_low", "accuracy_ci_high"))  # fmt: skip
    assert all([s for s, _ in pts] == [0, 4, 8] for pts in tb.values())

    (root / "analysis").mkdir(parents=True)
    answer = root / "analysis" / "answer.txt"
    for words in ("the answer: 1 pair", "the answer: 2 pairs"):
        answer.write_text(words + "\n")
        assert tracking.log_answer(root, [answer], ["tensorboard"])
    acc = EventAccumulator(str(root / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    texts = {t.step: t.tensor_proto.string_val[0] for tag in acc.Tags()["tensors"] for t in acc.Tensors(tag)}
    assert texts == {0: b"the answer: 1 pair", 1: b"the answer: 2 pairs"}
