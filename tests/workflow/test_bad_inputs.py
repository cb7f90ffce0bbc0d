"""Bad input and faults through the real workflow: every error clear, nothing half-written.

Each file in tests/bad_inputs/config/ is one bad input, written as a change to a healthy
experiment (config/micro.yaml with tests/bad_inputs/base.yaml merged in):

    stage:  plan -> `snakemake -n` must refuse it; run -> the real run must fail (found: plan ->
            in the base folder, whose files it needs, planning itself refuses it);
            prepare -> files that must be read as they are: each dataset the case adds is
            prepared (its target alone) and must succeed
    expect: regexes that must all appear in what Snakemake prints
    meta, first_premise, log (prepare): per dataset, expected keys of its meta.json
            (dotted: nested), its first record's premise, regexes in its job log
    patch:  merged into the base (mappings merge, anything else replaces)
    append: list items added to the base's lists
    delete: dotted paths removed from the base

Planning cases run in one scratch folder. The healthy base experiment runs once for real
(module fixture); the run cases then run the full command in that same folder, so only
their own failing jobs run, and the test checks that no file under results/ appeared or
changed. The same real run also serves the two-invocations lock test, the one-class
warning, the constant testset's NaN, and (last, since it rewrites one result) the
out-of-memory retry.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import REPO, SNAKEMAKE, micro_config, smk

pytestmark = pytest.mark.slow

BAD = REPO / "tests/bad_inputs"
CASES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((BAD / "config").glob("*.yaml"))}
PLAN = [name for name, c in CASES.items() if c["stage"] == "plan"]
RUN = [name for name, c in CASES.items() if c["stage"] == "run"]
PREPARE = [name for name, c in CASES.items() if c["stage"] == "prepare"]
assert set(PLAN) | set(RUN) | set(PREPARE) == set(CASES), "every case has a known stage"
RUN_ID = "micro-opt/synth/n64/seed0"
R = "results/micro"  # the base experiment's folder (config/micro.yaml names it)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def apply_case(base: dict, case: dict) -> dict:
    cfg = _merge(base, case.get("patch") or {})
    for key, items in (case.get("append") or {}).items():
        cfg[key] = list(cfg[key]) + copy.deepcopy(items)
    for dotted in case.get("delete") or []:
        *parents, last = [int(p) if p.isdigit() else p for p in dotted.split(".")]
        node = cfg
        for p in parents:
            node = node[p]
        del node[last]
    return cfg


BASE = apply_case(micro_config(), yaml.safe_load((BAD / "base.yaml").read_text()))


def write_config(folder: Path, name: str, cfg: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# what a run writes in the experiment folder that is no result: its lock (the holder's name) and
# the record of the config that wrote the experiment last (oodcorr.launch.experiment)
BOOKKEEPING = ("experiment.lock", "experiment.json")


def results_snapshot(wd: Path) -> dict:
    """Every result file (the failing job's own log, under results/<experiment>/logs/, and the run's
    bookkeeping aside)."""
    root = wd / "results"
    return (
        {
            str(p.relative_to(wd)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*")
            if p.is_file() and "logs" not in p.relative_to(root).parts[1:2] and p.name not in BOOKKEEPING
        }
        if root.exists()
        else {}
    )


def assert_clear_message(case: dict, out: str) -> None:
    for rx in case["expect"]:
        assert re.search(rx, out), f"expected /{rx}/ in:\n{out[-4000:]}"
    assert "Failed validating" not in out  # no raw jsonschema dump
    # a `file:line: key` location points at the line that holds that key
    for f, line, key, what in re.findall(r"(/\S+\.yaml):(\d+): (\S+?): (\S+)", out):
        if what == "required":
            continue
        text = Path(f).read_text().splitlines()[int(line) - 1]
        if key.endswith("]"):  # a list item: its own line
            assert text.lstrip().startswith("- "), (f, line, key, text)
        else:
            assert text.lstrip().startswith(key.rsplit(".", 1)[-1] + ":"), (f, line, key, text)


# ---- planning: config and model errors -------------------------------------------------
@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory, tiny_models):
    """A scratch working folder with the bad model folders the model cases point at."""
    import torch

    wd = tmp_path_factory.mktemp("plan")
    models = wd / "bad-models"
    # a folder with a tokenizer but no model (no config.json)
    shutil.copytree(
        tiny_models["opt"],
        models / "not-a-model",
        ignore=lambda d, names: [n for n in names if n == "config.json" or n.endswith(".safetensors")],
    )
    remote = models / "remote-code"
    shutil.copytree(tiny_models["opt"], remote)
    cfg = json.loads((remote / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (remote / "config.json").write_text(json.dumps(cfg))
    pickled = models / "pickle-only"
    shutil.copytree(tiny_models["opt"], pickled)
    from safetensors.torch import load_file

    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    # junk where the safetensors weights belong (an interrupted copy), the pickle beside it
    junk = models / "junk-weights"
    shutil.copytree(pickled, junk)
    (junk / "model.safetensors").write_bytes(b"<html>502 Bad Gateway</html>\n")
    return wd


# healthy variants planned in the same folder: the unsafe models once opted in, and two
# in-domain sets sharing one OOD list that holds their test sets
GOOD = {
    "opted_in": {
        "append": {
            "models": [
                {"name": "remote-code", "path": "bad-models/remote-code", "trust_remote_code": True},
                {"name": "pickle-only", "path": "bad-models/pickle-only", "allow_pickle_weights": True},
            ]
        }
    },
    "shared_ood": {
        "append": {
            "in_domain": [{"name": "synth2", "train": "synth-train", "test": "synth-overlap"}],
            "ood_testsets": ["synth-test", "synth-overlap"],
        }
    },
}


# planning cases that go through `snakemake -n` itself, one of each kind of check (the schema, a model
# folder, a data file), so that what Snakemake prints of a refusal is tested; the others are planned
# by the Snakefile's own call in this process (each `snakemake -n` costs about 3 CPU-seconds)
THROUGH_SNAKEMAKE = {"wrong_type", "model_not_a_model", "data_missing_file"}


def _planned_here(wd: Path, path: Path) -> subprocess.CompletedProcess:
    """What the Snakefile's planning (`plan_run`, as a job's process runs it: no lock, no run) says of the
    config file ``path`` in the working folder ``wd``, the config loaded as Snakemake loads it; a
    refusal's message on stderr and returncode 1, as `snakemake -n` gives them."""
    import contextlib
    import io
    from types import SimpleNamespace

    from snakemake.common.configfile import load_configfile

    from oodcorr.launch.snakefile import plan_run

    workflow = SimpleNamespace(overwrite_configfiles=[str(path)], basedir=str(REPO), is_main_process=False)
    said, env, cwd, rc = io.StringIO(), dict(os.environ), os.getcwd(), 0
    try:
        os.chdir(wd)
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            plan_run(workflow, load_configfile(str(path)))
    except Exception as e:  # noqa: BLE001 - whatever the Snakefile raises, Snakemake prints and exits 1
        print(e, file=said)
        rc = 1
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
    return subprocess.CompletedProcess([], rc, "", said.getvalue())


@pytest.fixture(scope="module")
def planned(plan_dir):
    """Every planning case (bad and good) planned: `snakemake -n` for the good ones and
    THROUGH_SNAKEMAKE, a few at a time, the Snakefile's planning in this process for the rest."""
    from concurrent.futures import ThreadPoolExecutor

    todo = {name: write_config(plan_dir, name, apply_case(BASE, CASES[name])) for name in PLAN}
    todo.update({name: write_config(plan_dir, name, apply_case(BASE, change)) for name, change in GOOD.items()})
    here = {
        name: _planned_here(plan_dir, path)
        for name, path in todo.items()
        if name in PLAN and name not in THROUGH_SNAKEMAKE
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(smk, plan_dir, path, "-n") for name, path in todo.items() if name not in here}
        return here | {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", PLAN)
def test_planning_refuses_bad_input(name, planned, plan_dir):
    res = planned[name]
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert_clear_message(CASES[name], out)
    assert not (plan_dir / "results").exists()


def test_unsafe_models_plan_once_opted_in(planned):
    res = planned["opted_in"]
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert re.search(r"^finetune\s+3$", res.stdout, re.M)  # micro-opt, remote-code, pickle-only


def test_several_in_domain_sets_may_share_an_ood_list_with_their_test_sets(planned):
    res = planned["shared_ood"]
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    # each run: its own test set once, as in-domain, + the 3 other sets; an evaluation job per
    # run x testset (the base's unit run): 2 runs x 4
    assert re.search(r"^evaluate\s+8$", res.stdout, re.M), res.stdout[-2000:]


# ---- one real run of the healthy base ---------------------------------------------------
@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """Run the base for real; while it runs, a second invocation in the same folder must be refused."""
    wd = tmp_path_factory.mktemp("base")
    path = write_config(wd, "base", BASE)
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), "--configfile", str(path), "--cores", "2"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while not list((wd / ".snakemake/locks").glob("*")):
        assert first.poll() is None, first.stdout.read()[-3000:]
        assert time.time() < deadline, "the first run never took its lock"
        time.sleep(0.1)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out, _ = first.communicate(timeout=900)
    assert first.returncode == 0, out[-5000:]
    return {"wd": wd, "config": path, "out": out, "second": second}


def test_second_invocation_is_refused_by_the_lock(base_run):
    second = base_run["second"]
    msg = second.stdout + second.stderr
    assert second.returncode != 0
    # the experiment's lock, taken while planning, refuses it before Snakemake's own lock is reached
    assert "experiment folder results/micro is in use by another run of the workflow" in msg, msg[-3000:]
    assert "kill " in msg
    # the refused invocation ran nothing: every job ran once, in the first invocation
    assert "Select jobs to execute" not in msg
    assert base_run["out"].count("localrule finetune:") == 1
    # and nothing it might have touched was corrupted: the first run's files are complete
    wd = base_run["wd"]
    from oodcorr.core.records import read_result

    for p in (wd / R / "eval").rglob("*.parquet"):
        read_result(p)
    scores = pd.read_csv(wd / R / "scores.csv")
    assert len(scores) == 4 * 3  # 4 checkpoints x (in-domain + 2 OOD)
    assert scores["accuracy"].between(0, 1).all()


def test_one_class_testset_warns_and_the_run_succeeds(base_run):
    wd = base_run["wd"]
    warning = "dataset 'one-class' has a single class (entailment); accuracy is still defined but says little"
    assert f"oodcorr: WARNING: {warning}" in base_run["out"]  # repeated at the end of the run
    assert warning in (wd / R / "logs/data/one-class.log").read_text()
    meta = json.loads((wd / R / "data/one-class.meta.json").read_text())
    assert meta["warning"] == warning and meta["label_counts"] == {"entailment": 6}
    from oodcorr.core.records import read_result

    for step in (0, 4, 8, 12):
        ev = read_result(wd / R / f"eval/{RUN_ID}/step{step}/one-class.predictions.parquet")
        assert ev["gold_counts"] == {"entailment": 6}
        assert ev["accuracy"] == ev["n_correct"] / 6  # defined: the share predicted "entailment"


def test_constant_testset_gives_nan_with_reason_and_hatched_cell(base_run):
    from oodcorr.jobs.figures.pair_heatmaps import heatmap

    wd = base_run["wd"]
    scores = pd.read_csv(wd / R / "scores.csv")
    const = scores[scores.testset == "contradictory-duplicates"]
    assert list(const.step) == [0, 4, 8, 12] and (const.accuracy == 0.5).all()
    pc = pd.read_csv(wd / R / "analysis/partial_correlations.csv")
    hit = pc[(pc.x == "contradictory-duplicates") | (pc.y == "contradictory-duplicates")]
    # the one pair, (contradictory-duplicates, one-class), for the run and pooled over runs
    assert sorted(hit["run"]) == sorted([RUN_ID, "pooled"])
    assert hit["r"].isna().all()
    assert hit["note"].str.contains("contradictory-duplicates is constant").all(), hit["note"].tolist()
    cells = heatmap(pc, "micro-opt", str(wd / "check.png"), method="pearson", residualiser="spline")
    const_cells = {k: v for k, v in cells.items() if "contradictory-duplicates" in k}
    assert len(const_cells) == 1 and set(const_cells.values()) == {"n/a"}
    assert (wd / R / "analysis/heatmaps/micro-opt.png").read_bytes()[:4] == b"\x89PNG"


# ---- run cases: data and tokenizer errors, in the finished base folder ------------------
@pytest.mark.parametrize("name", RUN)
def test_run_fails_clearly_and_writes_no_result(name, base_run):
    wd, case = base_run["wd"], CASES[name]
    before = results_snapshot(wd)
    res = smk(wd, write_config(wd, name, apply_case(BASE, case)), timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert_clear_message(case, out)
    if case.get("found") == "plan":  # refused while planning in this folder: no job ran, no job log
        assert "Error in rule" not in out and re.search(r"^\w+Error in file .*Snakefile", out, re.M), out[-3000:]
    else:
        assert re.search(r"Error in rule \w+:", out) and f"log: {R}/logs/" in out  # Snakemake names the job's log
    assert results_snapshot(wd) == before  # no new, partial or changed result


# ---- prepare cases: files as people have them, read as they are ------------------------
def _dotted(d: dict, key: str):
    for part in key.split("."):
        d = d[part]
    return d


@pytest.mark.parametrize("name", PREPARE)
def test_data_files_people_have_are_prepared(name, base_run):
    wd, case = base_run["wd"], CASES[name]
    datasets = list(case["patch"]["datasets"])
    res = smk(
        wd, write_config(wd, name, apply_case(BASE, case)), *[f"{R}/data/{d}.jsonl" for d in datasets], timeout=600
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    for d in datasets:
        meta = json.loads((wd / R / f"data/{d}.meta.json").read_text())
        for key, want in (case.get("meta") or {}).get(d, {}).items():
            assert _dotted(meta, key) == want, (d, key, _dotted(meta, key))
        first = json.loads((wd / R / f"data/{d}.jsonl").read_text(encoding="utf-8").splitlines()[0])
        if d in (case.get("first_premise") or {}):
            assert first["premise"] == case["first_premise"][d], d
        log = (wd / R / f"logs/data/{d}.log").read_text()
        for rx in (case.get("log") or {}).get(d, []):
            assert re.search(rx, log), f"expected /{rx}/ in logs/data/{d}.log:\n{log[-3000:]}"


def test_conflicting_duplicates_are_warned_at_the_end_of_the_run(base_run):
    """The base's constant testset holds every example twice, once per label."""
    wd = base_run["wd"]
    meta = json.loads((wd / R / "data/contradictory-duplicates.meta.json").read_text())
    assert meta["duplicates"]["conflicting"] == 6 and meta["duplicates"]["conflicting_rows"] == 12
    warning = (
        "dataset 'contradictory-duplicates' has 6 premise/hypothesis pair(s) that occur with different "
        "labels (12 rows, e.g. lines [1, 2]); they are kept, so no model can get all of them right"
    )
    assert meta["warning"] == warning
    assert f"oodcorr: WARNING: {warning}" in base_run["out"]  # repeated at the end of the run
    assert warning in (wd / R / "logs/data/contradictory-duplicates.log").read_text()


# ---- a finetune left running: the second one is refused ---------------------------------
def test_a_second_finetune_job_of_a_held_run_is_refused_naming_the_holder(base_run):
    """What a killed Snakemake leaves behind (its finetune still running), seen by the next run:
    the job stops at once, and its log (shown by Snakemake) names the holder and what to do."""
    from oodcorr.core.locks import hold

    wd = base_run["wd"]
    cfg = apply_case(BASE, {"patch": {"finetune": {"seeds": [0, 1]}}})
    run_dir = f"{R}/finetune/micro-opt/synth/n64/seed1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oodcorr.core.locks import hold\n"
            "with hold(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n",
            str(wd / run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        res = smk(wd, write_config(wd, "seed1", cfg), f"{run_dir}/manifest.json", timeout=600)
    finally:
        holder.kill()
        holder.wait()
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Error in rule finetune" in out
    message = (
        rf"oodcorr: run folder \S*{run_dir} is in use by another finetune \(it holds \S+finetune\.lock\): "
        rf"PID {holder.pid} on host \S+, started \S+\. .*kill {holder.pid}"
    )
    assert re.search(message, out), out[-3000:]
    log = (wd / R / "logs/finetune/micro-opt/synth/n64/seed1.log").read_text()
    assert re.search(message, log.splitlines()[-1]) and "Traceback" not in log  # the log's last line
    assert sorted(p.name for p in (wd / run_dir).iterdir()) == ["finetune.lock"]  # nothing else written
    with hold(wd / run_dir):  # and the run is free again once its holder is gone
        pass


# ---- a checkpoint half-written when the job died ----------------------------------------
def test_checkpoint_torn_mid_save_is_set_aside_and_the_run_resumes_from_the_last_good_one(
    tmp_path, tiny_models, monkeypatch
):
    """tests/jobs/test_finetune.py covers a kill between checkpoints and a damaged newest checkpoint;
    here the job dies while saving checkpoint 15 (weights half on disk, no manifest yet)."""
    import torch

    import oodcorr.jobs.finetune as f

    from helpers import checkpoint_weights, finetune_job

    ref = finetune_job(tmp_path, tiny_models["opt"], "ref")
    f.finetune(ref)
    job = finetune_job(tmp_path, tiny_models["opt"], "torn")
    real = f.write_ckpt_manifest

    class Killed(Exception):
        pass

    def dies_at_15(ckpt, step, resumable):
        if step == 15:
            w = ckpt / "model.safetensors"
            w.write_bytes(w.read_bytes()[: w.stat().st_size // 3])
            raise Killed()
        return real(ckpt, step, resumable)

    monkeypatch.setattr(f, "write_ckpt_manifest", dies_at_15)
    with pytest.raises(Killed):
        f.finetune(job)
    monkeypatch.setattr(f, "write_ckpt_manifest", real)
    ckroot = job.run_dir / "checkpoints"
    assert not f.verify_checkpoint(ckroot / "checkpoint-15")[0]

    info = f.finetune(job)
    assert info["resumed_from"].endswith("checkpoint-10")
    assert len(list(ckroot.glob(".incomplete-checkpoint-15-*"))) == 1  # kept aside, not trusted
    a, b = checkpoint_weights(ref.run_dir, 20), checkpoint_weights(job.run_dir, 20)
    for k in a:  # the same final weights as an uninterrupted run, to 1e-6 (CPU determinism)
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)


# ---- atomic result files ---------------------------------------------------------------
KILLED_WRITER = """
import json, pathlib, sys, time
from oodcorr.core.atomic_write import write_json_atomic
def slow(self, data, *a, **k):  # write_text_atomic writes the encoded bytes (their size checked first)
    with open(self, "wb") as fh:
        fh.write(data[: len(data) // 2]); fh.flush()
    print("half", flush=True)
    time.sleep(60)
pathlib.Path.write_bytes = slow
write_json_atomic(sys.argv[1], json.loads(sys.argv[2]))
"""


def _result(acc, predictions=__file__):
    """An evaluation job's summary (unit run) with one record; its predictions file must exist."""
    return {
        "checkpoints": [
            {
                "model": "m",
                "in_domain": "d",
                "n_train": 4,
                "seed": 0,
                "run_id": "m/d/n4/seed0",
                "step": 1,
                "testset": "t",
                "role": "ood",
                "accuracy": acc,
                "n": 4,
                "n_correct": int(acc * 4),
                **dict.fromkeys(("macro_f1", "ece", "accuracy_ci_low", "accuracy_ci_high"), 0.5),
                "fingerprint": "f",
                "checkpoint": "c",
                "predictions": str(predictions),
                "padding": "x" * 100_000,
            }
        ]
    }


def test_a_kill_mid_write_leaves_the_previous_result_whole(tmp_path):
    from oodcorr.core.atomic_write import write_json_atomic
    from oodcorr.jobs.aggregate_scores import collect

    path = tmp_path / "t.json"
    write_json_atomic(path, _result(0.25))
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path), json.dumps(_result(0.75))], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "half"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    leftovers = list(tmp_path.glob(".t.json.*.tmp"))
    assert len(leftovers) == 1 and 0 < leftovers[0].stat().st_size < path.stat().st_size  # the torn copy
    assert collect([str(path)])["accuracy"].tolist() == [0.25]  # the aggregation reads the whole old one


def test_a_failed_rename_changes_nothing(tmp_path, monkeypatch):
    from oodcorr.core.atomic_write import write_json_atomic

    path = tmp_path / "t.json"
    write_json_atomic(path, {"a": 1})

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(path, {"a": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"a": 1} and sorted(tmp_path.iterdir()) == [path]


def test_aggregation_refuses_a_truncated_result(tmp_path):
    """Were a result ever torn (written by hand, say), aggregation stops and names it."""
    from oodcorr.jobs.aggregate_scores import collect

    path = tmp_path / "torn.json"
    text = json.dumps(_result(0.5))
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"torn\.json: unreadable evaluation result .*delete it and rerun"):
        collect([str(path)])
    # a summary that lists a predictions file no longer there: named, with the way to rebuild it
    path.write_text(json.dumps(_result(0.5, predictions=tmp_path / "gone.parquet")))
    with pytest.raises(
        ValueError,
        match=r"gone\.parquet is missing \(listed in .*torn\.json\); delete .*torn\.json"
        r" and rerun",
    ):
        collect([str(path)])


def test_snakemake_removes_the_outputs_of_a_failed_job(tmp_path):
    """What the workflow relies on: a job that wrote one output and then failed leaves none."""
    (tmp_path / "Snakefile").write_text(
        'rule half:\n    output: "a.txt", "b.txt"\n    log: "half.log"\n'
        '    run:\n        open(output[0], "w").write("written")\n        raise RuntimeError("died")\n'
    )
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "-d", str(tmp_path), "--cores", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "died" in res.stdout + res.stderr
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()


# ---- the end-of-run handler: never crashes, names the published table ----------------------
def test_the_end_of_run_handler_survives_a_truncated_meta_file_and_names_the_published_table(base_run):
    """A dataset's meta file cut short (a full disk, an edit) made the onsuccess handler itself
    stop with a JSONDecodeError traceback; and the success line named .staging/. The meta file's
    time is kept, so only publish_results (forced) runs, and the handler reads the damaged file."""
    wd = base_run["wd"]
    meta = wd / R / "data/contradictory-duplicates.meta.json"
    whole, st = meta.read_bytes(), meta.stat()
    meta.write_bytes(whole[: len(whole) // 2])
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        res = smk(wd, base_run["config"], "--forcerun", "publish_results", timeout=600)
    finally:
        meta.write_bytes(whole)
        os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "localrule publish_results:" in out and "localrule evaluate:" not in out  # nothing else ran
    assert re.search(
        rf"oodcorr: WARNING: {R}/data/contradictory-duplicates\.meta\.json: the description of prepared dataset "
        r"'contradictory-duplicates' is unreadable \(JSONDecodeError: .*\); delete it and run again: the dataset "
        r"is prepared again",
        out,
    ), out[-4000:]
    assert (
        f"oodcorr: scores in {R}/scores.csv, partial correlations in {R}/analysis/partial_correlations.csv, "
        f"heatmaps in {R}/analysis/heatmaps/"
    ) in out
    done = [line for line in out.splitlines() if line.startswith("oodcorr: scores in")]
    assert len(done) == 1 and ".staging" not in done[0] and "Traceback" not in out


# ---- out of memory: the retry halves the batch, the result is the same -------------------
def test_out_of_memory_retry_halves_the_batch_and_gives_the_same_result(base_run):
    """Defined last: it re-evaluates one result of the shared folder.

    The failure is simulated by tests/hooks/sitecustomize.py, put on the jobs' PYTHONPATH.
    The evaluator halves its batch within the job when a batch raises OutOfMemoryError
    (src/oodcorr/jobs/evaluate.py); here the process is killed outright at a batch of more than
    4 rows, as the operating system's OOM killer does, so only Snakemake's retry can help:
    attempt 2 runs with half the batch size. ``evaluation.batch_size`` is 8 for this job: on a CPU
    the batches are cut within a token budget per thread (issue 24), at 16 rows or fewer on these
    short examples, so the row bound has to be the smaller one for the retry's halving to matter
    (as it is on a GPU, whose batches are as full as the bounds allow)."""
    import os

    from hooks.sitecustomize import PYTHONPATH_ENTRY, SIMULATE_OOM_ENV

    from oodcorr.core.records import read_result

    wd = base_run["wd"]
    target = f"{R}/eval/{RUN_ID}/step8/synth-test.predictions.parquet"  # checkpoint 8 on synth-test
    ref = [read_result(wd / target)]
    ref_pred = [pd.read_parquet(wd / target)]
    assert ref[0]["n"] == 60 and ref[0]["batching"]["batch_size"] == 32  # the base run's bound
    # the job (unit run: the run's checkpoints on synth-test) runs again once its summary is gone, and
    # keeps the predictions files it finds whole, so it evaluates checkpoint 8 alone
    summary = f"{R}/eval/{RUN_ID}/synth-test.json"
    (wd / target).unlink()
    (wd / summary).unlink()
    cfg = copy.deepcopy(BASE)
    cfg["evaluation"]["batch_size"] = 8  # batch bounds rerun nothing
    config = write_config(wd, "base-batch8", cfg)
    res = smk(
        wd,
        config,
        "--retries",
        "1",
        summary,
        env={
            SIMULATE_OOM_ENV: "kill:4",  # read by tests/hooks/sitecustomize.py in the evaluate job
            "PYTHONPATH": os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p),
        },
        timeout=600,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    # the first attempt was killed (Snakemake printed its log), the retry ran with half the batch
    killed = re.search(r"a batch of (\d+) rows; the process is killed", out)
    assert killed and 4 < int(killed[1]) <= 8, out[-4000:]
    assert out.index("attempt 1: batch_size 8, max_tokens 4096") < killed.start()
    log = (wd / R / f"logs/eval/{RUN_ID}/synth-test.log").read_text()
    assert "attempt 2: batch_size 4, max_tokens 2048" in log and "killed" not in log
    assert len(re.findall(r"step \d+: .* already holds this evaluation; kept", log)) == 3  # 0, 4 and 12
    new = [read_result(wd / target)]
    assert [r["step"] for r in new] == [r["step"] for r in ref] == [8]
    for old_r, new_r, old_p in zip(ref, new, ref_pred, strict=True):
        for key in ("accuracy", "n", "n_correct", "gold_counts", "pred_counts", "fingerprint", "predictions"):
            assert new_r[key] == old_r[key], key
        assert new_r["batching"]["batch_size"] == 4
        new_p = pd.read_parquet(wd / new_r["predictions"])
        assert (new_p["pred"] == old_p["pred"]).all()
        logits = [c for c in old_p.columns if c.startswith("logit_")]
        # batching changes only the float rounding of the forward pass
        assert max(abs(new_p[c] - old_p[c]).max() for c in logits) < 1e-5
