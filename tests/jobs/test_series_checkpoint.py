"""Checkpoint series that already exist (models[].series): planned without finetuning, verified,
evaluated, aggregated and analysed on their own x-axis (steps or tokens)."""

import copy
import json
import os
import re
import shutil

import pandas as pd
import pytest
import yaml

from oodcorr.core.errors import ConfigError
from oodcorr.core.model_dirs import model_files
from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.series_checkpoint import read_manifest, verify, write_manifest
from oodcorr.launch.disk_checks import check_inputs_exist
from oodcorr.planning.config import Experiment
from oodcorr.planning.plan import build_plan
from oodcorr.planning.schema import fill_defaults

from helpers import REPO, micro_config, smk

STEPS = [0, 4, 8, 16, 24]
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "ffn_dim": 64,
    "word_embed_proj_dim": 32,
    "max_position_embeddings": 128,
}


@pytest.fixture(scope="module")
def series_dirs(tmp_path_factory):
    """A tiny OPT pretrained here, saved (weights and tokenizer) as a local directory at each of STEPS."""
    from oodcorr.modeling.synthetic import pretraining_corpus
    from oodcorr.modeling.tiny import build_model, pretrain, train_tokenizer

    root = tmp_path_factory.mktemp("series")
    corpus = pretraining_corpus(1000, 0)
    tok = train_tokenizer(corpus, 300, root / "tokenizer")
    model = build_model({"model_type": "opt", "config": TINY}, tok, seed=0)
    done, out = 0, {}
    for step in STEPS:
        if step > done:
            pretrain(model, tok, corpus, steps=step - done, batch_size=16, lr=3e-3, seed=step)
            done = step
        d = root / f"checkpoint-{step}"
        model.save_pretrained(d)
        tok.save_pretrained(d)
        out[step] = d
    return out


def _config(dirs, *, unit="checkpoint", tokens=False, finetuned=False):
    cfg = micro_config()
    cfg["experiment"] = "series"
    models = [{"name": "pre-steps", "series": {"checkpoints": [{"step": s, "path": str(d)} for s, d in dirs.items()]}}]
    if tokens:  # the same checkpoints on a token axis (16 sequences of at most 64 tokens a step)
        models.append(
            {
                "name": "pre-tokens",
                "series": {"checkpoints": [{"tokens": s * 1024, "path": str(d)} for s, d in dirs.items()]},
            }
        )
    if finetuned:
        models += cfg["models"]
    else:
        cfg.pop("finetune")
        cfg.pop("pretraining_corpus")
        cfg["in_domain"] = [{"name": "synth", "test": "synth-test"}]  # no training set: nothing is trained
        cfg["datasets"].pop("synth-train")
    cfg["models"] = models
    cfg["evaluation"]["unit"] = unit
    return cfg


def _plan(cfg):
    cfg = copy.deepcopy(cfg)
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return build_plan(cfg, REPO)


class WC(dict):
    def __getattr__(self, k):
        return self[k]


def test_a_series_is_planned_without_finetuning(series_dirs):
    plan = _plan(_config(series_dirs, tokens=True, finetuned=True))
    runs = {r.model: r for r in plan.runs}
    pre, tok, fin = runs["pre-steps"], runs["pre-tokens"], runs["micro-opt"]
    assert pre.series and (pre.n_train, pre.seed) == (0, 0) and pre.steps == tuple(STEPS)
    assert tok.steps == tuple(s * 1024 for s in STEPS) and plan.models["pre-tokens"].x_unit == "tokens"
    assert not fin.series and fin.steps == (0, 4, 8, 12, 16)
    # a series' evaluation reads its checkpoint's manifest, a finetuned run's its finetune manifest
    wc = WC(model="pre-steps", indomain="synth", ntrain="0", seed="0", step="8", testset="synth-overlap")
    assert plan.checkpoints_input(wc) == ["results/series/series/pre-steps/step8.json"]
    wc_fin = WC(wc, model="micro-opt", ntrain="64")
    assert plan.checkpoints_input(wc_fin) == ["results/series/finetune/micro-opt/synth/n64/seed0/manifest.json"]
    assert [plan.x_label(WC(model=m)) for m in ("pre-steps", "pre-tokens", "micro-opt")] == [
        "step",
        "tokens",
        "training step",
    ]
    # the manifest rule's input: the files loading reads, so a changed file rewrites the manifest
    files = plan.series_files(WC(model="pre-steps", step="8"))
    assert sorted(os.path.basename(f) for f in files) == sorted(f.name for f in model_files(series_dirs[8]))
    assert plan.eval_params(wc)["provenance"]["x_unit"] == "step"
    assert "x_unit" not in plan.eval_params(wc_fin)["provenance"]  # finetuned runs' keys are unchanged
    # the budget counts one series_checkpoint job per model x given checkpoint (the rule's wildcards)
    from oodcorr.launch.budget import job_counts

    assert job_counts(plan)["series_checkpoint"] == 2 * len(STEPS) and job_counts(plan)["finetune"] == 1
    # in unit run, the job reads every checkpoint's manifest
    run_plan = _plan(_config(series_dirs, unit="run"))
    wc_run = WC(model="pre-steps", indomain="synth", ntrain="0", seed="0", testset="synth-overlap")
    assert run_plan.checkpoints_input(wc_run) == [f"results/series/series/pre-steps/step{s}.json" for s in STEPS]


def test_adding_a_checkpoint_changes_no_other_job_params(series_dirs):
    cfg = _config(series_dirs)
    more = copy.deepcopy(cfg)
    more["models"][0]["series"]["checkpoints"].append({"step": 32, "path": str(series_dirs[24])})
    a, b = _plan(cfg), _plan(more)
    wc = WC(model="pre-steps", indomain="synth", ntrain="0", seed="0", step="8", testset="synth-overlap")
    assert a.eval_params(wc) == b.eval_params(wc) and a.tokenize_params(wc) == b.tokenize_params(wc)
    assert a.series_params(WC(model="pre-steps", step="8")) == b.series_params(WC(model="pre-steps", step="8"))
    assert "checkpoints" not in a.models["pre-steps"].model_entry.series
    assert b.runs[0].steps == (*STEPS, 32)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s["checkpoints"][1].update(tokens=5), r"checkpoints\[1\]: give exactly one of `step` or `tokens`"),
        (lambda s: s["checkpoints"][1].update(step=0), r"step values must be strictly increasing, got \[0, 0, 8"),
        (lambda s: s["checkpoints"][2].update(revision="abc"), r"checkpoints\[2\]: give exactly one of `path`"),
        (
            lambda s: (s["checkpoints"][2].pop("path"), s["checkpoints"][2].update(revision="a" * 40)),
            r"checkpoints\[2\].revision: needs models\[pre-steps\].series.hub",
        ),
        (lambda s: s.update(hub="org/repo"), r"checkpoints\[0\].path: models\[pre-steps\].series.hub is set"),
        (lambda s: s.update(in_domain=["mnli"]), r"series.in_domain: 'mnli' is not an in_domain name"),
    ],
)
def test_series_entries_are_checked(series_dirs, edit, message):
    cfg = _config(series_dirs)
    edit(cfg["models"][0]["series"])
    with pytest.raises(ConfigError, match=message):
        _plan(cfg)


def test_a_series_is_never_finetuned_nor_headed_and_finetuned_models_need_their_blocks(series_dirs):
    cfg = _config(series_dirs)
    cfg["models"][0]["finetune"] = {"learning_rate": 0.1}
    with pytest.raises(ConfigError, match=r"models\[pre-steps\].finetune: a series is evaluated as it is"):
        _plan(cfg)
    cfg = _config(series_dirs)
    cfg["models"][0]["method"] = "head"
    with pytest.raises(ConfigError, match=r"models\[pre-steps\].method: a series is scored with the prompt"):
        _plan(cfg)
    cfg = _config(series_dirs, finetuned=True)
    cfg.pop("finetune")
    with pytest.raises(ConfigError, match=r"finetune: missing; model\(s\) \['micro-opt'\] are finetuned"):
        _plan(cfg)
    cfg = _config(series_dirs, finetuned=True)
    cfg["in_domain"] = [{"name": "synth", "test": "synth-test"}]
    with pytest.raises(ConfigError, match=r"in_domain\[synth\].train: missing"):
        _plan(cfg)


def test_hub_series_warns_about_unpinned_revisions_and_plans_offline():
    cfg = micro_config()
    cfg["models"] = [
        {
            "name": "pythia",
            "series": {
                "hub": "EleutherAI/pythia-70m",
                "checkpoints": [
                    {"step": 1000, "revision": "step1000"},
                    {"step": 2000, "revision": "b" * 40},
                    {"step": 3000, "revision": "c" * 40},
                    {"step": 4000, "revision": "d" * 40},
                ],
            },
        }
    ]  # 4: what linear needs
    cfg["in_domain"] = [{"name": "synth", "test": "synth-test"}]
    cfg.pop("finetune")
    fill_defaults(cfg, REPO / "config/schema.yaml")
    plan = build_plan(cfg, REPO)
    assert any("checkpoints[0]: revision 'step1000'" in w for w in plan.warnings)
    assert not any(f"checkpoints[{i}]" in w for w in plan.warnings for i in (1, 2, 3))
    assert plan.models["pythia"].model_entry.series["tokenizer"] == {
        "hub": "EleutherAI/pythia-70m",
        "revision": "step1000",
    }
    assert plan.series_files(WC(model="pythia", step="2000")) == []  # nothing local to hash
    assert plan.series_params(WC(model="pythia", step="2000"))["checkpoint"] == {
        "hub": "EleutherAI/pythia-70m",
        "revision": "b" * 40,
    }


def test_local_checkpoints_are_checked_when_planning(series_dirs, tmp_path):
    cfg = _config(series_dirs)
    cfg["models"][0]["series"]["checkpoints"][1]["path"] = str(tmp_path / "missing")
    fill_defaults(cfg, REPO / "config/schema.yaml")
    with pytest.raises(ConfigError, match=r"models\[pre-steps\].series.checkpoints: .*missing does not exist"):
        check_inputs_exist(Experiment(cfg, REPO))
    pickled = tmp_path / "pickled"
    shutil.copytree(series_dirs[4], pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    cfg["models"][0]["series"]["checkpoints"][1]["path"] = str(pickled)
    with pytest.raises(ConfigError, match="pickle format"):
        check_inputs_exist(Experiment(cfg, REPO))


def test_manifest_lists_what_loading_reads_and_verification_sees_a_changed_file(series_dirs, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(series_dirs[8], d)
    (d / "optimizer.pt").write_bytes(b"training state, never loaded")
    (d / "rng_state_0.pth").write_bytes(b"x")
    doc = write_manifest(tmp_path / "m.json", model="m", x=8, x_unit="step", checkpoint={"path": str(d)}, entry={})
    assert read_manifest(tmp_path / "m.json") == doc
    assert "model.safetensors" in doc["files"] and "config.json" in doc["files"]
    assert "optimizer.pt" not in doc["files"] and "rng_state_0.pth" not in doc["files"]
    assert verify(doc) == (True, "ok")
    # the same size and modification time, other bytes: found by its sha256 (its ctime changed)
    f = d / "model.safetensors"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    ok, why = verify(doc)
    assert not ok and "model.safetensors: sha256 differs" in why
    f.write_bytes(bytes(data[:-10]))
    assert "size" in verify(doc)[1]
    # a LoRA adapter has no base model in a series: refused
    (d / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds a LoRA adapter"):
        write_manifest(tmp_path / "a.json", model="m", x=8, x_unit="step", checkpoint={"path": str(d)}, entry={})
    hub = write_manifest(
        tmp_path / "h.json",
        model="m",
        x=5,
        x_unit="tokens",
        checkpoint={"hub": "org/repo", "revision": "c" * 40},
        entry={},
    )
    assert hub["digest"] == f"hub:org/repo@{'c' * 40}" and verify(hub) == (True, "hub revision")


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_a_series_manifest_copied_over_another_steps_is_refused_with_a_sentence(series_dirs, tmp_path, unit):
    """`cp series/m/step8.json series/m/step4.json`: the evaluation of step 4 would load step 8's
    checkpoint. Refused, naming the manifest and the way out (delete it: it is written again from the
    config). (Before: a ValueError traceback, "none of [...] lists this checkpoint".)"""
    from oodcorr.jobs.evaluate import EvaluationRefused, check_checkpoint_place, checkpoints_to_score

    folder = tmp_path / "series/m"
    folder.mkdir(parents=True)
    for x in (0, 4, 8):
        write_manifest(
            folder / f"step{x}.json", model="m", x=x, x_unit="step", checkpoint={"path": str(series_dirs[x])}, entry={}
        )
    shutil.copyfile(folder / "step8.json", folder / "step4.json")
    steps = [0, 4, 8] if unit == "run" else [4]
    manifests = [str(folder / f"step{x}.json") for x in steps]
    with pytest.raises(EvaluationRefused) as e:
        for ck in checkpoints_to_score(manifests, steps, [str(tmp_path / f"p{x}.parquet") for x in steps]):
            check_checkpoint_place(ck, {"model": "m"})
    msg = str(e.value)
    assert (
        f"{folder / 'step4.json'} is the manifest of model 'm', step 8, but sits where that of model 'm', step 4" in msg
    )
    assert f"Delete {folder / 'step4.json'} and run again" in msg
    # and another model's manifest in this model's folder
    write_manifest(
        folder / "step4.json", model="other", x=4, x_unit="step", checkpoint={"path": str(series_dirs[4])}, entry={}
    )
    with pytest.raises(EvaluationRefused, match="is the manifest of model 'other'"):
        for ck in checkpoints_to_score([str(folder / "step4.json")], [4], [str(tmp_path / "p4.parquet")]):
            check_checkpoint_place(ck, {"model": "m"})


def test_a_hub_checkpoint_loads_its_revision_afresh(monkeypatch):
    import oodcorr.modeling.loading as models
    from oodcorr.modeling.loading import CheckpointLoader

    calls = []

    class Fake:
        def eval(self):
            return self

    monkeypatch.setattr(models, "load_model", lambda spec, *a, **k: calls.append(spec) or Fake())
    spec = {
        "name": "pythia",
        "series": {"hub": "org/repo", "tokenizer": {"hub": "org/repo", "revision": "r1"}},
        "dtype": "float32",
    }
    loader = CheckpointLoader(ModelEntry.from_params(spec), None, "cpu", ["entailment", "non-entailment"], 0)
    loader.load("org/repo@r1", {"hub": "org/repo", "revision": "r1"})
    loader.load("org/repo@r2", {"hub": "org/repo", "revision": "r2"})
    assert [(c.hub, c.revision, c.series) for c in calls] == [
        ("org/repo", "r1", None),
        ("org/repo", "r2", None),
    ]
    assert loader.last_load == "fresh"


@pytest.mark.slow
def test_a_series_of_local_directories_runs_end_to_end_into_heatmaps(series_dirs, tmp_path):
    """Two series (the same tiny pretraining run on a step axis and on a token axis) through the
    real workflow, unit run: no finetuning, the given steps in the scores table and the
    analysis, heatmaps and learning curves; switching to unit checkpoint recomputes nothing,
    and a new checkpoint schedules only its own evaluations; `oodcorr analyse --metric
    macro_f1` works on the scores table."""
    from oodcorr.cli import main

    cfg = _config(series_dirs, unit="run", tokens=True)
    path = tmp_path / "series.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = smk(tmp_path, path)
    assert res.returncode == 0, res.stderr[-5000:]
    out = tmp_path / "results/series"
    assert not (out / "finetune").exists() and not (out / "logs/finetune").exists()
    scores = pd.read_csv(out / "scores.csv")
    steps = scores[scores.model == "pre-steps"]
    assert sorted(steps.step.unique()) == STEPS and set(steps.x_unit) == {"step"}
    tokens = scores[scores.model == "pre-tokens"]
    assert sorted(tokens.step.unique()) == [s * 1024 for s in STEPS] and set(tokens.x_unit) == {"tokens"}
    assert (scores.n_train == 0).all() and (scores.seed == 0).all() and len(scores) == 2 * len(STEPS) * 3
    assert scores.macro_f1.between(0, 1).all() and scores.ece.between(0, 1).all()
    assert (scores.accuracy_ci_low <= scores.accuracy).all() and (scores.accuracy <= scores.accuracy_ci_high).all()
    # the same weights on either axis give the same predictions
    a = steps.sort_values(["step", "testset"]).accuracy.to_numpy()
    b = tokens.sort_values(["step", "testset"]).accuracy.to_numpy()
    assert (a == b).all() and scores.checkpoint.str.contains("checkpoint-").all()
    # unit run: one process per run x testset, the later local checkpoints loaded in place
    summary = json.loads((out / "eval/pre-steps/synth/n0/seed0/synth-overlap.json").read_text())
    assert [r["load"] for r in summary["checkpoints"]] == ["fresh"] + ["in place"] * (len(STEPS) - 1)
    assert summary["checkpoints"][0]["x_unit"] == "step" and summary["checkpoints"][0]["n_train"] == 0
    man = json.loads((out / "series/pre-steps/step8.json").read_text())
    assert man["digest"] and man["source"] == {"path": str(series_dirs[8])}
    # nothing was trained: no training-loss figure is asked for (nor a finetune job planned)
    assert not (out / "analysis/training_loss").exists()
    pc = pd.read_csv(out / "analysis/partial_correlations.csv")
    run_rows = pc[pc.run != "pooled"]
    assert set(run_rows.model) == {"pre-steps", "pre-tokens"} and (run_rows.n == len(STEPS)).all()
    for f in (
        "consensus/synth-test.png",
        "heatmaps/pre-steps.png",
        "heatmaps/pre-tokens.png",
        "heatmap_grid.png",
        "learning_curves/pre-tokens.png",
    ):
        assert (out / "analysis" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f
    # the two models' consensus heatmap drew the pairs the agreement table has (its job prints them)
    drawn = (out / "logs/analyse/consensus_heatmap_synth-test.log").read_text()
    agree = pd.read_csv(out / "analysis/agreement.csv")
    assert set(agree.in_domain) == {"synth-test"} and "synth-overlap" in drawn and "no pair" not in drawn
    assert f"({agree.verdict.iloc[0]})" in drawn

    # unit checkpoint: every predictions file is there already
    ck = dict(cfg, evaluation=dict(cfg["evaluation"], unit="checkpoint"))
    ck_path = tmp_path / "series-ck.yaml"
    ck_path.write_text(yaml.safe_dump(ck))
    dry = smk(tmp_path, ck_path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "rule evaluate:" not in dry.stdout and "rule series_checkpoint:" not in dry.stdout
    # a new checkpoint: its manifest and its three evaluations, nothing else of the series
    more = copy.deepcopy(ck)
    more["models"][0]["series"]["checkpoints"].append({"step": 32, "path": str(series_dirs[24])})
    more_path = tmp_path / "series-more.yaml"
    more_path.write_text(yaml.safe_dump(more))
    dry = smk(tmp_path, more_path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    evals = re.findall(r"rule evaluate:\n(?:[^\n]*\n)*?\s+wildcards: ([^\n]*)", dry.stdout)
    assert len(evals) == 3 and all("model=pre-steps" in w and "step=32" in w for w in evals)
    assert dry.stdout.count("rule series_checkpoint:") == 1 and "rule tokenize_testset:" not in dry.stdout

    # oodcorr analyse on the workflow's scores table, on another metric
    rc = main(
        [
            "analyse",
            str(out / "scores.csv"),
            "--in-domain",
            "synth-test",
            "--metric",
            "macro_f1",
            "--out",
            str(tmp_path / "f1"),
            "--no-plots",
        ]
    )
    assert rc == 0
    f1 = pd.read_csv(tmp_path / "f1/partial_correlations.csv")
    acc = run_rows.set_index(["model", "x", "y"]).r
    got = f1[f1.run != "pooled"].set_index(["model", "x", "y"]).r
    both = got.notna() & acc.reindex(got.index).notna()
    assert both.any() and (got[both] != acc.reindex(got.index)[both]).any()  # another metric, other r


def test_a_series_too_short_for_the_analysis_is_refused_naming_its_key():
    cfg = micro_config()
    cfg["models"] = [
        {
            "name": "pythia",
            "series": {
                "hub": "EleutherAI/pythia-70m",
                "checkpoints": [{"step": 1000, "revision": "a" * 40}, {"step": 2000, "revision": "b" * 40}],
            },
        }
    ]
    cfg["in_domain"] = [{"name": "synth", "test": "synth-test"}]
    cfg.pop("finetune")
    fill_defaults(cfg, REPO / "config/schema.yaml")
    with pytest.raises(ConfigError, match=r"models\[pythia\].series.checkpoints: .* 2 checkpoint\(s\) .*list more"):
        build_plan(cfg, REPO)
