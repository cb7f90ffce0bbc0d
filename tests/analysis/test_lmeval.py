"""Reading lm-evaluation-harness result folders (oodcorr.analysis.readers.lmeval): both formats, model and
step from model_args or a path pattern, samples for the example bootstrap, and the hostile folders
of issue 32 class 5 (each refused with a sentence naming the file, before anything is written).

The fixture files are written here, small, in the two layouts the harness writes: the current
one (``results_<date>.json`` with ``"acc,none"`` keys, ``n-samples`` and ``config.model_args``;
``samples_<task>_<date>.jsonl`` beside it) and the older one of the Pythia suite's published
files (``<size>_step<k>.json`` with ``"acc"`` keys). The test on the Pythia suite's real files
runs where ``OODCORR_PYTHIA_GIT`` names a snapshot of github.com/EleutherAI/pythia (its git
directory)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from oodcorr.analysis.readers.lmeval import MAX_RESULTS_BYTES, compile_pattern, list_files, read_folder
from oodcorr.core.errors import DataError

from faults import PYTHON, as_nobody, python_env

DATE = "2026-01-02T03-04-05.678901"


def current(folder: Path, model: str, step: int | None, scores: dict, *, date=DATE, model_args=None, samples=None):
    """A results file of the current harness (and its samples files: task -> list of 0/1)."""
    folder.mkdir(parents=True, exist_ok=True)
    args = model_args if model_args is not None else f"pretrained={model},revision=step{step},dtype=float32"
    doc = {
        "results": {
            t: {
                "alias": t,
                "acc,none": v,
                "acc_stderr,none": 0.01,
                "acc_norm,none": v / 2,
                "acc_norm_stderr,none": "N/A",
            }
            for t, v in scores.items()
        },
        "n-samples": {t: {"original": 10, "effective": 10} for t in scores},
        "config": {"model": "hf", "model_args": args, "batch_size": 8},
        "versions": dict.fromkeys(scores, 1.0),
    }
    path = folder / f"results_{date}.json"
    path.write_text(json.dumps(doc, indent=2))
    for task, values in (samples or {}).items():
        with open(folder / f"samples_{task}_{date}.jsonl", "w") as fh:
            for i, v in enumerate(values):
                fh.write(json.dumps({"doc_id": i, "doc": {"q": "x"}, "filter": "none", "acc": v, "target": "a"}) + "\n")
    return path


def older(path: Path, scores: dict, model_args: str | None = None) -> Path:
    """A results file in the older format (the Pythia suite's): ``acc`` keys, no n-samples."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"results": {t: {"acc": v, "acc_stderr": 0.01} for t, v in scores.items()}, "versions": {}}
    if model_args is not None:
        doc["config"] = {"model": "hf-causal", "model_args": model_args, "num_fewshot": 0}
    path.write_text(json.dumps(doc))
    return path


def series(root: Path, models=("org/a", "org/b"), steps=(0, 100, 200, 300)) -> None:
    for mi, m in enumerate(models):
        for si, s in enumerate(steps):
            current(
                root / m.replace("/", "__") / f"step{s}",
                m,
                s,
                {"ind": 0.5 + 0.01 * si, "x": 0.3 + 0.02 * si + 0.01 * mi, "y": 0.4 + 0.005 * si * si},
            )


# ---- the formats ----
def test_the_current_format_gives_model_step_task_score_stderr_and_n(tmp_path):
    series(tmp_path)
    r = read_folder(tmp_path)
    s = r.scores
    assert sorted(s["model"].unique()) == ["org/a", "org/b"]
    assert sorted(s["step"].unique()) == [0, 100, 200, 300]
    assert len(s) == 2 * 4 * 3
    row = s[(s.model == "org/b") & (s.step == 200) & (s.testset == "x")].iloc[0]
    assert row.score == pytest.approx(0.3 + 0.04 + 0.01)
    assert row.stderr == 0.01 and row.n == 10
    assert set(s["run"]) == {"all"}
    long = r.long("ind")
    # acc is a share of items: the items behind each score (n-samples) ride along, to bound its item noise
    assert list(long.columns) == ["model", "in_domain", "run", "unit", "testset", "score", "n"]
    assert set(long["in_domain"]) == {"ind"}
    assert r.examples is None


def test_another_metric_is_chosen_by_name(tmp_path):
    series(tmp_path)
    r = read_folder(tmp_path, metric="acc_norm")
    assert r.scores["score"].max() < 0.5  # acc_norm is half of acc here


def test_the_older_format_of_the_pythia_files_with_model_args(tmp_path):
    for s in (0, 1000, 2000):
        older(
            tmp_path / "pythia-70m" / "zero-shot" / f"70m_step{s}.json",
            {"lambada_openai": 0.1 + s / 1e4, "piqa": 0.5, "sciq": 0.6, "crows_pairs": 0.2},
            model_args=f"use_accelerate=True,pretrained=EleutherAI/pythia-70m,revision=step{s}",
        )
    r = read_folder(tmp_path, tasks=["lambada_openai", "piqa", "sciq"])
    assert set(r.scores["model"]) == {"EleutherAI/pythia-70m"}
    assert sorted(r.scores["step"].unique()) == [0, 1000, 2000]
    assert r.scores["n"].isna().all()
    # the folder names the model where a path pattern says so; its step agrees with the revision
    r = read_folder(tmp_path, tasks=["lambada_openai", "piqa"], path_pattern="{model}/zero-shot/*_step{step}.json")
    assert set(r.scores["model"]) == {"pythia-70m"}


def test_model_args_as_a_mapping_global_step_and_a_checkpoint_folder(tmp_path):
    current(tmp_path / "a", "m", None, {"t": 0.5}, model_args={"pretrained": "org/m", "revision": "global_step250"})
    current(tmp_path / "b", "m", None, {"t": 0.6}, model_args="pretrained=/scratch/run1/checkpoint-500")
    current(tmp_path / "c", "m", None, {"t": 0.7}, model_args="pretrained=org/base,revision=v2,peft=/lora/step750")
    s = read_folder(tmp_path).scores
    assert dict(zip(s["model"], s["step"])) == {"org/m": 250, "/scratch/run1": 500, "/lora": 750}


def test_a_path_pattern_gives_model_run_and_step_where_the_files_do_not(tmp_path):
    for seed in (1, 2):
        for s in (10, 20):
            older(tmp_path / f"m-seed{seed}" / f"step{s}" / "out.json", {"t": 0.5 + seed / 10 + s / 1000})
    older(tmp_path / "notes.json", {"t": 0.1})  # not matched: not read
    r = read_folder(tmp_path, path_pattern="{model}-seed{run}/step{step}/*.json")
    assert sorted(r.scores[["model", "run", "step"]].itertuples(index=False, name=None)) == [
        ("m", "1", 10),
        ("m", "1", 20),
        ("m", "2", 10),
        ("m", "2", 20),
    ]
    with pytest.raises(DataError, match=r"out.json: the model and the step cannot be told .*--path-pattern"):
        read_folder(tmp_path / "m-seed1")


def test_path_pattern_syntax():
    rx = compile_pattern("**/{model}/*_step{step}.json")
    assert rx.match("a/b/pythia/x_step12.json").groupdict() == {"model": "pythia", "step": "12"}
    assert rx.match("pythia/x_stepab.json") is None
    with pytest.raises(DataError, match=r"\{seed\} is not a placeholder; the placeholders are \{model\}, \{run\}"):
        compile_pattern("{seed}/x.json")
    with pytest.raises(DataError, match="occurs twice"):
        compile_pattern("{step}/{step}.json")


def test_a_step_the_path_and_the_revision_disagree_on_is_refused(tmp_path):
    current(tmp_path / "step200", "org/a", 100, {"t": 0.5})
    with pytest.raises(DataError, match=r"results_.*json: its path gives step 200 .* model_args give 100"):
        read_folder(tmp_path, path_pattern="step{step}/results_*.json")


def test_a_missing_metric_names_the_file_and_the_metrics_it_has(tmp_path):
    series(tmp_path)
    with pytest.raises(
        DataError, match=r"results_.*\.json: task 'ind' has no metric 'f1'; it has \['acc,none', 'acc_norm"
    ):
        read_folder(tmp_path, metric="f1", tasks=["ind", "x"])
    with pytest.raises(DataError, match=r"no task of the 8 results file\(s\) has the metric 'f1'.* has acc, acc_norm"):
        read_folder(tmp_path, metric="f1")


def test_a_metric_under_several_filters_must_be_named_with_its_filter(tmp_path):
    p = current(tmp_path, "org/a", 1, {"gsm": 0.5})
    doc = json.loads(p.read_text())
    doc["results"]["gsm"] = {"exact_match,strict-match": 0.2, "exact_match,flexible-extract": 0.3}
    p.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"several filters \(exact_match,strict-match, exact_match,flexible-extract\)"):
        read_folder(tmp_path, metric="exact_match")
    s = read_folder(tmp_path, metric="exact_match,flexible-extract").scores
    assert s["score"].tolist() == [0.3]


def test_tasks_named_but_in_no_file_are_refused(tmp_path):
    series(tmp_path)
    with pytest.raises(DataError, match=r"--tasks nope: in none of the 8 results files"):
        read_folder(tmp_path, tasks=["ind", "nope"])


def test_the_in_domain_task_must_be_read(tmp_path):
    series(tmp_path)
    with pytest.raises(DataError, match=r"in-domain testset 'mnli' is not a task .*\['ind', 'x', 'y'\]"):
        read_folder(tmp_path).long("mnli")


# ---- samples (--log_samples) ----
def test_samples_give_the_examples_of_the_example_bootstrap(tmp_path):
    current(tmp_path / "s0", "org/a", 0, {"ind": 0.5, "x": 0.25}, samples={"ind": [1, 0, 1, 0], "x": [0, 0, 1, 0]})
    current(tmp_path / "s1", "org/a", 1, {"ind": 0.75, "x": 0.5}, samples={"ind": [1, 1, 1, 0]})
    r = read_folder(tmp_path)
    ex = r.examples
    assert list(ex.columns) == ["model", "run", "unit", "testset", "example", "correct"]
    assert len(ex) == 12 and set(ex["correct"]) == {0.0, 1.0}
    assert ex[(ex.unit == 1) & (ex.testset == "ind")]["correct"].mean() == 0.75
    assert len(r.samples_files) == 3
    assert read_folder(tmp_path, samples=False).examples is None


def test_samples_from_another_run_are_refused(tmp_path):
    current(tmp_path, "org/a", 0, {"ind": 0.5}, samples={"ind": [1, 1, 1, 0]})
    with pytest.raises(DataError, match=r"samples_ind_.*jsonl: its 4 samples average 0.750000 .* says 0.500000"):
        read_folder(tmp_path)


def test_a_samples_file_cut_short_or_not_0_1_is_refused_naming_its_line(tmp_path):
    current(tmp_path, "org/a", 0, {"ind": 0.5}, samples={"ind": [1, 0]})
    sp = next(tmp_path.glob("samples_*.jsonl"))
    text = sp.read_text()
    sp.write_text(text[: len(text) - 20])
    with pytest.raises(DataError, match=r"samples_ind_.*\.jsonl:2: not a JSON line .*--no-samples"):
        read_folder(tmp_path)
    sp.write_text(text.replace('"acc": 1', '"acc": 0.37'))
    with pytest.raises(DataError, match=r"\.jsonl:1: acc is '0.37', not 0 or 1"):
        read_folder(tmp_path)
    assert read_folder(tmp_path, samples=False).scores["score"].tolist() == [0.5]


def _with_groups(path: Path, groups) -> None:
    doc = json.loads(path.read_text())
    doc["group_subtasks"] = groups
    path.write_text(json.dumps(doc))


def test_groups_and_their_subtasks_are_read_from_every_file(tmp_path):
    """group_subtasks (the current format: a group's subtasks, nested, a task listed with none) is read
    into the groups, their union over the files (an evaluation of other tasks at another step)."""
    scores = {"ind": 0.5, "mmlu": 0.3, "mmlu_stem": 0.31, "mmlu_anatomy": 0.28, "mmlu_astronomy": 0.33}
    a = current(tmp_path / "s0", "org/a", 0, scores)
    _with_groups(
        a,
        {
            "mmlu": ["mmlu_stem"],
            "mmlu_stem": ["mmlu_anatomy"],
            "mmlu_anatomy": [],
            "ind": [],
        },
    )
    b = current(tmp_path / "s1", "org/a", 1, scores)
    _with_groups(b, {"mmlu_stem": ["mmlu_anatomy", "mmlu_astronomy"], "mmlu": ["mmlu_stem"]})
    current(tmp_path / "s2", "org/a", 2, scores)  # no group_subtasks: the older format has none
    r = read_folder(tmp_path)
    assert r.groups == {"mmlu": ["mmlu_stem"], "mmlu_stem": ["mmlu_anatomy", "mmlu_astronomy"]}
    assert set(r.scores["testset"]) == set(scores)  # a group's own score is read like a task's


@pytest.mark.parametrize("bad", [["mmlu", "mmlu_anatomy"], {"mmlu": "mmlu_anatomy"}, {"mmlu": [1, 2]}])
def test_a_damaged_group_subtasks_is_refused_naming_the_file(tmp_path, bad):
    _with_groups(current(tmp_path, "org/a", 0, {"ind": 0.5, "mmlu": 0.3}), bad)
    with pytest.raises(DataError, match=r"results_.*\.json: group_subtasks is not an object of task-name lists"):
        read_folder(tmp_path)


# ---- hostile folders (issue 32, class 5) ----
@pytest.mark.parametrize(
    "text, says",
    [
        ('{"results": {"t": {"acc,none": 0.5}', r"ends early"),  # cut short while written
        ('{"results": {"t": {"acc,none": 0.5,,}}}', r"not valid JSON"),
        ("", r"is empty"),
        ("\xff\xfe garbage", r"not UTF-8|not valid JSON"),
        ("[1, 2, 3]", r"not an lm-evaluation-harness results file \(no 'results' object\)"),
        ('{"results": {"t": [0.5]}, "config": {"model_args": "pretrained=m,revision=step1"}}', "not an object"),
        ("[" * 100_000 + "]" * 100_000, r"nested too deep|not an lm-evaluation-harness"),
    ],
)
def test_a_malformed_or_truncated_results_file_is_named(tmp_path, text, says):
    series(tmp_path)
    bad = tmp_path / "org__a" / "step100" / "results_2026-02-02.json"
    bad.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    with pytest.raises(DataError, match=r"results_2026-02-02\.json.*" + says):
        read_folder(tmp_path)


@pytest.mark.parametrize(
    "value, says",
    [
        (math.nan, "nan, not a finite score"),
        ("0.5", "'0.5', not a number"),
        (None, "'None', not a number"),
        (True, "'True', not a number"),
        (math.inf, "inf, not a finite score"),
    ],
)
def test_nan_or_text_where_a_metric_belongs_is_named(tmp_path, value, says):
    p = current(tmp_path, "org/a", 0, {"ind": 0.5, "x": 0.1})
    doc = json.loads(p.read_text())
    doc["results"]["x"]["acc,none"] = value
    p.write_text(json.dumps(doc))  # json writes NaN and Infinity as the harness's json.dumps does
    with pytest.raises(DataError, match=rf"results_.*\.json: task 'x', metric 'acc,none' is {says}"):
        read_folder(tmp_path)


@pytest.mark.parametrize("value", [-0.2, 1.7])
def test_an_accuracy_out_of_its_range_is_refused_naming_the_file_and_the_value(tmp_path, value):
    series(tmp_path)
    p = current(tmp_path / "org__b" / "step100", "org/b", 100, {"ind": 0.5, "x": value, "y": 0.4})
    with pytest.raises(DataError) as e:
        read_folder(tmp_path)
    msg = str(e.value)
    assert str(p) in msg and f"task 'x', metric 'acc,none' is {value:g}, outside [0, 1]" in msg, msg


def test_metrics_on_their_own_scales(tmp_path):
    """The harness's squad-style f1 is in percent, its perplexities unbounded above: read as they
    are; a correlation below -1, a negative perplexity, and one f1 of 1.7 among shares are refused."""

    def folder(name, metric, values):
        root = tmp_path / name
        for step, v in enumerate(values):
            d = root / f"step{step}"
            d.mkdir(parents=True)
            doc = {
                "results": {t: {f"{metric},none": v + i / 10} for i, t in enumerate(("ind", "x", "y"))},
                "config": {"model_args": f"pretrained=org/m,revision=step{step}"},
            }
            (d / f"results_{DATE}.json").write_text(json.dumps(doc))
        return root

    assert read_folder(folder("f1pct", "f1", [71.5, 74.2, 76.0]), metric="f1").scores["score"].max() > 70
    assert read_folder(folder("ppl", "word_perplexity", [250.0, 120.0]), metric="word_perplexity").scores is not None
    assert read_folder(folder("mcc", "mcc", [-0.4, 0.2]), metric="mcc").scores["score"].min() == -0.4
    with pytest.raises(DataError, match=r"metric 'mcc,none' is -1.3, outside \[-1, 1\]"):
        read_folder(folder("mcc2", "mcc", [-1.3, 0.2]), metric="mcc")
    with pytest.raises(DataError, match=r"metric 'perplexity,none' is -5, outside \[0, inf\]"):
        read_folder(folder("ppl2", "perplexity", [-5.0, 12.0]), metric="perplexity")
    with pytest.raises(DataError, match=r"step2.*metric 'f1,none' is 1.05, outside \[0, 1\].*shares: their median"):
        read_folder(folder("f1mixed", "f1", [0.3, 0.4, 0.95, 0.35, 0.5]), metric="f1")


def test_a_key_given_twice_is_refused_not_the_last_taken(tmp_path):
    """Python's json takes the last of two values of one key, and lm-eval's model_args parser the last
    of a repeated argument: either way the file says two things; refused, naming the file and key."""
    series(tmp_path)
    p = tmp_path / "org__a" / "step100" / f"results_{DATE}.json"
    text = p.read_text()
    p.write_text(text.replace('"acc,none": 0.32,', '"acc,none": 0.32, "acc,none": 0.92,', 1))
    assert text != p.read_text()
    with pytest.raises(DataError, match=rf"{re.escape(str(p))}: key 'acc,none' appears twice in one object"):
        read_folder(tmp_path)
    p.write_text(text.replace("revision=step100", "revision=step100,revision=step300"))
    with pytest.raises(DataError) as e:
        read_folder(tmp_path)
    assert str(p) in str(e.value) and "'revision' is given twice (revision=step100, then revision=step300)" in str(
        e.value
    )
    p.write_text(text.replace("revision=step100", "revision=step100,revision=step100"))  # the same twice: one value
    assert len(read_folder(tmp_path).scores) == 24


def test_a_samples_line_with_a_key_twice_is_refused(tmp_path):
    current(tmp_path, "org/a", 0, {"ind": 0.5, "x": 0.5}, samples={"x": [1, 0]})
    s = tmp_path / f"samples_x_{DATE}.jsonl"
    lines = s.read_text().splitlines()
    lines[1] = lines[1].replace('"acc": 0', '"acc": 1, "acc": 0')  # the last (0) keeps the mean
    s.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"samples_x_.*\.jsonl:2: key 'acc' appears twice"):
        read_folder(tmp_path)


def test_two_files_for_one_model_step_and_task_name_both(tmp_path):
    series(tmp_path)
    current(tmp_path / "org__a" / "step100", "org/a", 100, {"x": 0.9}, date="2026-03-03T00-00-00.0")
    with pytest.raises(DataError) as e:
        read_folder(tmp_path)
    msg = str(e.value)
    assert f"results_{DATE}.json and " in msg and "results_2026-03-03T00-00-00.0.json" in msg
    assert "model 'org/a', step 100, task 'x'" in msg


def test_a_huge_results_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    series(tmp_path)
    big = tmp_path / "org__a" / "results_big.json"
    with open(big, "wb") as fh:  # sparse: 300 MiB on paper, nothing on disk; never read
        fh.truncate(300 * 2**20)
    assert big.stat().st_size > MAX_RESULTS_BYTES
    with pytest.raises(DataError, match=r"results_big\.json: 300 MiB, more than the 64 MiB .* --max-file-mb 300"):
        read_folder(tmp_path)
    with pytest.raises(DataError, match=r"results_big\.json: 300 MiB, more than the 1 MiB"):
        read_folder(tmp_path, max_bytes=2**20)


def test_a_link_loop_is_walked_once_and_said(tmp_path, caplog):
    series(tmp_path, models=("org/a",))
    os.symlink(tmp_path, tmp_path / "org__a" / "back")  # a loop: org__a/back -> the folder itself
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    files, notes = list_files(tmp_path)
    assert len(files) == 4  # each results file once
    assert any("back: leads to the folder" in n and "already read" in n for n in notes)
    assert any("dangling: a link that leads" in n for n in notes)
    assert len(read_folder(tmp_path).scores) == 12


def test_a_folder_of_too_many_files_is_counted_and_refused(tmp_path):
    series(tmp_path)  # 8 results files
    for i in range(30):
        (tmp_path / f"extra{i}.jsonl").write_text("")
    with pytest.raises(
        DataError, match=r"holds 38 \.json/\.jsonl files, more than the 10 read at most.*--max-files 38"
    ):
        read_folder(tmp_path, max_files=10)


@pytest.mark.slow
def test_100000_files_are_counted_within_the_default_bound(tmp_path):
    """The default bound on a folder of 100,001 files: counted (not parsed), refused with the count."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(100_001):
        os.close(os.open(many / f"r{i}.json", os.O_CREAT | os.O_WRONLY))
    with pytest.raises(DataError, match=r"holds 100,001 \.json/\.jsonl files, more than the 50,000"):
        read_folder(many)


def test_a_pipe_named_like_a_results_file_is_refused_without_waiting_on_it(tmp_path):
    series(tmp_path)
    os.mkfifo(tmp_path / "org__a" / "results_fifo.json")  # opening it to read would wait for a writer
    with pytest.raises(DataError, match=r"results_fifo\.json: not a regular file"):
        read_folder(tmp_path)
    os.unlink(tmp_path / "org__a" / "results_fifo.json")
    current(tmp_path / "s", "org/c", 0, {"ind": 0.5}, samples={})
    os.mkfifo(tmp_path / "s" / f"samples_ind_{DATE}.jsonl")
    with pytest.raises(DataError, match=r"samples_ind_.*\.jsonl: not a regular file"):
        read_folder(tmp_path)


def test_an_unreadable_folder_or_file_is_named(tmp_path):
    """A folder the reader may not list is named. Root reads any folder, so as root the reader
    runs as user nobody (setpriv) on a folder of its own that only its owner, root, may list."""
    if os.geteuid() != 0:
        series(tmp_path)
        locked = tmp_path / "org__b"
        locked.chmod(0)
        try:
            with pytest.raises(DataError, match=r"org__b: cannot list this folder"):
                read_folder(tmp_path)
        finally:
            locked.chmod(0o755)
        return
    res = _read_as_nobody(0o700)  # root's own: nobody may not list it
    assert res.returncode != 0
    assert re.search(r"org__b: cannot list this folder", res.stderr), res.stderr[-2000:]


def _read_as_nobody(org_b_mode: int) -> subprocess.CompletedProcess:
    """read_folder run as user nobody on a series of root's whose folder org__b has ``org_b_mode``."""
    prefix = as_nobody()
    top = Path(tempfile.mkdtemp(prefix="oodcorr-lmeval-"))
    try:
        top.chmod(0o755)
        series(top)
        for d in [top, *top.rglob("*")]:
            d.chmod(0o755 if d.is_dir() else 0o644)
        (top / "org__b").chmod(org_b_mode)
        script = "import sys; from oodcorr.analysis.readers.lmeval import read_folder; "
        script += "print(len(read_folder(sys.argv[1]).scores))"
        return subprocess.run(
            [*prefix, PYTHON, "-c", script, str(top)], capture_output=True, text=True, env=python_env(), timeout=120
        )
    finally:
        shutil.rmtree(top)


# ---- the Pythia suite's real files ----
def test_the_pythia_suites_real_files_give_the_benchmarks_table(tmp_path):
    git_dir = os.environ.get("OODCORR_PYTHIA_GIT")
    if not git_dir or not Path(git_dir).exists():
        pytest.skip("set OODCORR_PYTHIA_GIT to a snapshot of github.com/EleutherAI/pythia (its git directory)")
    out = tmp_path / "pythia.csv"
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, str(root / "benchmarks" / "pythia_table.py"), git_dir, "--out", str(out)], check=True
    )
    import pandas as pd

    t = pd.read_csv(out)
    assert t["model"].nunique() == 16 and t["step"].nunique() == 27 and t["testset"].nunique() == 8
    assert len(t) == 16 * 27 * 8
    assert t["accuracy"].between(0, 1).all()


# ---- links out of the folder, folders that cannot be searched (issue 47) ----
def test_a_link_out_of_the_folder_is_named_and_not_followed_unless_asked(tmp_path, caplog):
    """Before: followed, into / and then /proc, where the walk stopped on a permission error."""
    lm, elsewhere = tmp_path / "lm", tmp_path / "elsewhere"
    series(lm)
    current(elsewhere / "org__c", "org/c", 0, {"ind": 0.5, "x": 0.3, "y": 0.4})
    os.symlink(elsewhere, lm / "more")
    os.symlink("/", lm / "root")
    os.symlink(elsewhere / "org__c" / f"results_{DATE}.json", lm / "org__a" / "linked.json")
    os.symlink(lm / "org__b", lm / "inside")  # a link within the folder: followed (the folder read once)
    with caplog.at_level("WARNING"):
        got = read_folder(lm)
    assert sorted(got.scores["model"].unique()) == ["org/a", "org/b"]  # nothing from outside
    said = " ".join(r.getMessage() for r in caplog.records)
    for link, target in ((lm / "more", elsewhere), (lm / "root", Path("/")), (lm / "org__a" / "linked.json", None)):
        assert f"{link}: a link that leads out of {lm}" in said, said
        if target is not None:
            assert f"(to {target})" in said
    assert "--follow-links" in said and "/proc" not in said
    got = read_folder(lm / "more", follow_links=True)  # asked: followed (here, a folder with no link out)
    assert list(got.scores["model"].unique()) == ["org/c"]
    os.unlink(lm / "root")
    os.unlink(lm / "org__a" / "linked.json")
    got = read_folder(lm, follow_links=True)
    assert sorted(got.scores["model"].unique()) == ["org/a", "org/b", "org/c"]


def test_a_folder_whose_entries_cannot_be_looked_at_is_named(tmp_path):
    """A folder the reader may list but not search (mode 644: its names, not what they are): before, its
    subfolders were skipped in silence and the analysis went on without that model."""
    res = _read_as_nobody(0o644)  # readable names, no search: what each is cannot be seen
    assert res.returncode != 0, res.stdout
    assert re.search(r"org__b: cannot look into this folder \(Permission denied: ", res.stderr), res.stderr[-2000:]
    assert "chmod" in res.stderr
