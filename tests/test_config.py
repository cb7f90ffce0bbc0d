import copy
import re

import pytest
import yaml
from snakemake.utils import validate

from conftest import REPO
from oodcorr.config import ConfigError, Experiment


@pytest.fixture
def default_config():
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(cfg, str(REPO / "config/schema.yaml"), set_default=True)
    return cfg


def test_default_config_expands(default_config):
    exp = Experiment(default_config, REPO)
    assert [r.id for r in exp.runs] == ["tiny-opt/synth/n4096/seed0", "tiny-olmo2/synth/n4096/seed0"]
    steps = exp.checkpoint_steps(exp.runs[0])
    assert steps[0] == 0 and len(steps) >= 9 and steps == sorted(set(steps))
    roles = exp.testsets_for("synth")
    assert roles[0] == ("synth-test", "in-domain")
    assert [r for _, r in roles[1:]] == ["ood"] * 5
    targets = exp.eval_targets("{model}/{step}/{testset}")
    assert len(targets) == 2 * len(steps) * 6


def test_schema_fills_defaults_and_rejects_unknown_keys(default_config):
    assert default_config["analysis"]["methods"] == ["pearson", "spearman"]
    assert default_config["models"][0]["trust_remote_code"] is False
    bad = copy.deepcopy(default_config)
    bad["finetune"]["learning_rat"] = 1
    with pytest.raises(Exception, match="learning_rat"):
        validate(bad, str(REPO / "config/schema.yaml"))


def test_explicit_schedule_and_errors(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["finetune"]["checkpoints"] = {"steps": [10, 20, 3200]}
    exp = Experiment(cfg, REPO)
    assert exp.checkpoint_steps(exp.runs[0]) == [0, 10, 20, 3200]
    cfg["finetune"]["checkpoints"] = {"steps": [10, 5]}
    with pytest.raises(ConfigError, match="strictly increasing"):
        Experiment(cfg, REPO)
    cfg["finetune"]["checkpoints"] = {"steps": [10, 5000]}
    with pytest.raises(ConfigError, match="beyond the run's 3200 training steps"):
        Experiment(cfg, REPO)


def test_every_k_includes_last_step(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["finetune"].update(max_steps=25, checkpoints={"every": 10})
    exp = Experiment(cfg, REPO)
    assert exp.checkpoint_steps(exp.runs[0]) == [0, 10, 20, 25]
    del cfg["finetune"]["max_steps"]
    cfg["finetune"]["epochs"] = 2  # 4096 examples / batch 16 = 256 steps per epoch
    assert Experiment(cfg, REPO).max_steps(exp.runs[0]) == 512


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["ood_testsets"].append("nope"), "dataset 'nope' is not defined"),
    (lambda c: c["models"].append(copy.deepcopy(c["models"][0])), "duplicate name 'tiny-opt'"),
    (lambda c: c["prompt"].update(template="{premise} Yes or No?"), "must contain {hypothesis}"),
    (lambda c: c["models"][0].update(hub="facebook/opt-125m"), "exactly one of `tiny`, `hub`, `path`"),
])
def test_semantic_errors_name_the_key(default_config, mutate, message):
    cfg = copy.deepcopy(default_config)
    mutate(cfg)
    with pytest.raises(ConfigError, match=message):
        Experiment(cfg, REPO)


def test_in_domain_test_in_ood_list_is_evaluated_once(default_config):
    # several in-domain sets share one OOD list: each run evaluates its own test set once, as in-domain
    cfg = copy.deepcopy(default_config)
    cfg["in_domain"].append({"name": "synth2", "train": "synth-train", "test": "synth-overlap"})
    cfg["ood_testsets"].insert(0, "synth-test")
    exp = Experiment(cfg, REPO)
    names = [t for t, _ in exp.testsets_for("synth")]
    assert names.count("synth-test") == 1 and len(names) == 6
    assert exp.testsets_for("synth2")[0] == ("synth-overlap", "in-domain")
    assert ("synth-test", "ood") in exp.testsets_for("synth2")
    # with a single in-domain set, listing its own test set as OOD is a mistake
    del cfg["in_domain"][1]
    with pytest.raises(ConfigError, match="ood_testsets: 'synth-test' is the in-domain test set of in_domain"):
        Experiment(cfg, REPO)


def test_model_overrides_replace_schedule_and_epochs(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["finetune"]["checkpoints"] = {"steps": [4, 16]}
    cfg["models"][0]["finetune"] = {"checkpoints": {"every": 800}}
    cfg["models"][1]["finetune"] = {"epochs": 1}
    exp = Experiment(cfg, REPO)
    opt, olmo = exp.runs
    assert exp.checkpoint_steps(opt) == [0, 800, 1600, 2400, 3200]
    assert exp.max_steps(olmo) == 256 and exp.checkpoint_steps(olmo) == [0, 4, 16]


def test_params_ignore_bookkeeping_and_key_order(default_config):
    exp = Experiment(default_config, REPO)
    spec = exp.model_spec("tiny-opt")
    assert "resources" not in spec and list(spec) == sorted(spec)
    assert "n_train" not in exp.finetune_params("tiny-opt") and "seeds" not in exp.finetune_params("tiny-opt")
    ds = exp.dataset_params("synth-overlap")
    assert "description" not in ds and "_registry" not in ds
    reordered = copy.deepcopy(default_config)
    reordered["models"][0] = dict(reversed(list(reordered["models"][0].items())))
    assert Experiment(reordered, REPO).model_spec("tiny-opt") == spec
    assert repr(Experiment(reordered, REPO).model_spec("tiny-opt")) == repr(spec)


def _load(name):
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate(cfg, str(REPO / "config/schema.yaml"), set_default=True)
    return cfg


def test_paper_grid_plans_the_whole_grid_offline():
    """config/paper.yaml: 8 models x {MNLI, SNLI} x n_train x seeds, each checkpoint on 8 testsets."""
    cfg = _load("paper.yaml")
    exp = Experiment(cfg, REPO)
    hubs = sorted(m["hub"] for m in cfg["models"])
    assert hubs == sorted(["allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-13B", "allenai/OLMo-2-0325-32B",
                           "facebook/opt-2.7b", "facebook/opt-6.7b", "facebook/opt-13b", "facebook/opt-30b",
                           "HuggingFaceTB/SmolLM3-3B"])
    assert set(exp.in_domain) == {"mnli", "snli"}
    for d in exp.in_domain:  # its own test set once as in-domain, the other seven as OOD
        roles = exp.testsets_for(d)
        assert len(roles) == 8 and roles[0] == (d, "in-domain")
        assert {t for t, _ in roles} == {"snli", "mnli", "scitail", "rte", "hans", "anli", "wnli", "paws"}
    ft = cfg["finetune"]
    runs = exp.runs
    assert len(runs) == 8 * 2 * len(ft["n_train"]) * len(ft["seeds"])
    n_eval = len(exp.eval_targets("{model}/{indomain}/{ntrain}/{seed}/{step}/{testset}"))
    assert n_eval == len(runs) * len(exp.checkpoint_steps(runs[0])) * 8
    for m in cfg["models"]:  # LoRA r=8, alpha=32, dropout 0.1 on attention projections, bf16
        lora = exp.finetune_cfg(m["name"])["lora"]
        assert (lora["r"], lora["alpha"], lora["dropout"]) == (8, 32, 0.1)
        assert {"q_proj", "k_proj", "v_proj"} <= set(lora["target_modules"])
        assert m["dtype"] == "bfloat16" and exp.finetune_cfg(m["name"])["bf16"]
    # resources grow with model size
    gpus = {m["name"]: exp.resources(m["name"], "finetune") for m in cfg["models"]}
    assert gpus["opt-30b"]["gpu"] > gpus["opt-2.7b"]["gpu"]
    assert gpus["olmo2-13b"]["mem_mb"] > gpus["olmo2-7b"]["mem_mb"] > gpus["smollm3-3b"]["mem_mb"]
    # unpinned revisions are named, not silently accepted
    assert any("olmo2-32b" in w for w in exp.warnings)
    assert not any("olmo2-7b" in w for w in exp.warnings)


def test_real_cpu_config_is_offline_and_head_based():
    cfg = _load("real-cpu.yaml")
    exp = Experiment(cfg, REPO)
    assert [exp.method(m) for m in exp.models] == ["head"]
    assert exp.prompt_for("minilm-l6") is None  # a head model reads no prompt
    used = exp.all_datasets()
    assert len(used) == 8
    for name in used:
        spec = exp.dataset_params(name)
        assert spec["source"] == "local" and "hub" not in spec
        assert spec["path"].startswith("../shared/data/nli/")
    assert all(exp.dataset(t)["max_examples"] == 300 for t in used if t != "snli-train")


def test_size_class_and_label_mode_errors(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["models"][0]["size_class"] = "huge"
    with pytest.raises(ConfigError, match=r"models\[tiny-opt\]\.size_class: 'huge'"):
        Experiment(cfg, REPO)
    cfg["size_classes"] = {"huge": {"finetune": {"mem_mb": 9000}}}
    cfg["models"][0]["resources"] = {"finetune": {"runtime": 7}}
    res = Experiment(cfg, REPO).resources("tiny-opt", "finetune")
    assert res == {"mem_mb": 9000, "runtime": 7}
    cfg = copy.deepcopy(default_config)
    cfg["label_mode"] = "four-way"
    with pytest.raises(ConfigError, match="label_mode: 'four-way'.*binary-merge"):
        Experiment(cfg, REPO)
    cfg["label_mode"] = "three-way"  # the default verbalisers have no word for neutral
    with pytest.raises(ConfigError, match=r"prompt\.verbalisers: no verbaliser for label\(s\) \['neutral', 'contradiction'\]"):
        Experiment(cfg, REPO)


def test_registry_entries_are_schema_checked(tmp_path, default_config):
    bad = tmp_path / "reg.yaml"
    bad.write_text("datasets:\n  x:\n    source: hub\n    hub: {id: a/b, split: test}\n")
    cfg = copy.deepcopy(default_config)
    cfg["registries"] = cfg["registries"] + [str(bad)]
    with pytest.raises(ConfigError, match=r"reg\.yaml: dataset 'x'\.hub: 'revision' is a required property"):
        Experiment(cfg, REPO)


def test_one_evaluate_rule_per_checkpoint_schedule(default_config):
    """An evaluation job scores all of a run's checkpoints on one testset, so its outputs
    are a fixed list of steps: runs with different schedules need different rules, whose
    (model, n_train) sets must not overlap and must cover every run."""
    exp = Experiment(default_config, REPO)
    (only,) = exp.eval_rules()  # one shared schedule: one rule, unrestricted
    assert only == {"name": "evaluate", "steps": exp.checkpoint_steps(exp.runs[0]), "models": None, "ntrain": None}
    assert len(exp.eval_summary_targets("{model}/{indomain}/{ntrain}/{seed}/{testset}")) == 2 * 6

    cfg = copy.deepcopy(default_config)
    # tiny-opt: by epochs, so its schedule depends on n_train; tiny-olmo2: its own fixed steps
    cfg["finetune"].update(n_train=[64, 128, 256], max_steps=None, epochs=1, batch_size=32,
                           checkpoints={"every": 2})
    del cfg["finetune"]["max_steps"]
    cfg["models"][1]["finetune"] = {"checkpoints": {"steps": [1, 2]}}
    cfg["models"].append(dict(copy.deepcopy(cfg["models"][0]), name="tiny-opt-2"))
    exp = Experiment(cfg, REPO)
    rules = exp.eval_rules()
    assert [r["name"] for r in rules] == ["evaluate"] + [f"evaluate_{i}" for i in range(2, len(rules) + 1)]
    owner = {}
    for r in rules:
        for m in r["models"]:
            for n in r["ntrain"]:
                assert (m, n) not in owner, (m, n)  # disjoint
                owner[m, n] = r["steps"]
    assert {(run.model, run.n_train): exp.checkpoint_steps(run) for run in exp.runs} == owner  # exact cover
    assert owner["tiny-opt", 64] == [0, 2] and owner["tiny-opt", 256] == [0, 2, 4, 6, 8]
    assert owner["tiny-olmo2", 64] == owner["tiny-olmo2", 256] == [0, 1, 2]
    # models sharing schedules share rules: tiny-opt and tiny-opt-2 are in the same ones
    assert all(("tiny-opt" in r["models"]) == ("tiny-opt-2" in r["models"]) for r in rules)
    assert len(rules) == 4


@pytest.mark.parametrize("text, message", [
    ("datasets:\n  x:\n    source: local\n    path: a.jsonl\n   label_map: {a: b}\n",
     r"reg\.yaml:5:4: not valid YAML: expected <block end>, but found '<block mapping start>' \(while parsing a "
     r"block mapping that starts at line 2\); check this line's indentation.*\n       label_map: \{a: b\}\n       \^"),
    ("datasets:\n  x:\n\tsource: local\n", r"reg\.yaml:3:1: not valid YAML: found character '\\t' that cannot start "
                                          r"any token .*; indent with spaces, never tabs"),
    ("datasets:\n  x: {source: local, path: [a.jsonl}\n",
     r"reg\.yaml:2:36: not valid YAML: expected ',' or ']', but got '}'"),
    ("datasets:\n  x:\n    description: caf\xe9\n", r"reg\.yaml: not valid YAML: invalid continuation byte "
                                                    r"\(byte 0xe9 at offset \d+\); YAML files must be UTF-8"),
])
def test_a_registry_that_is_not_yaml_is_named_with_its_line(tmp_path, default_config, text, message):
    bad = tmp_path / "reg.yaml"
    bad.write_bytes(text.encode("latin-1"))
    cfg = copy.deepcopy(default_config)
    cfg["registries"] = cfg["registries"] + [str(bad)]
    with pytest.raises(ConfigError, match=message):
        Experiment(cfg, REPO)


def test_a_label_mode_file_that_is_not_yaml_is_named_with_its_line(tmp_path, default_config):
    import shutil

    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "resources").mkdir()
    text = (REPO / "resources/label_modes.yaml").read_text().replace("  labels: [entailment, non-entailment]",
                                                                      "  labels: [entailment, non-entailment", 1)
    (tmp_path / "resources/label_modes.yaml").write_text(text)
    line = text.splitlines().index("  labels: [entailment, non-entailment") + 1
    with pytest.raises(ConfigError, match=rf"label_modes\.yaml:{line + 1}:\d+: not valid YAML: expected ',' or ']'"
                                          rf".*that starts at line {line}\)"):
        Experiment(default_config, tmp_path)


def test_what_snakemake_prints_for_a_broken_configfile(tmp_path):
    """Snakemake parses --configfile itself and buries the line: its message names neither file nor
    line; --verbose shows PyYAML's error, with both (the README's error table says so). If an
    upgrade changes this, update the README."""
    import subprocess
    import sys
    from pathlib import Path

    cfg = tmp_path / "broken.yaml"
    cfg.write_text("experiment: x\nmodels:\n  - name: m\n   tiny: {}\n")
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--configfile", str(cfg), "-n"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "Config file is not valid JSON or YAML" in out and "line 4" not in out and "broken.yaml" not in out
    res = subprocess.run(cmd + ["--verbose"], capture_output=True, text=True, timeout=120)
    assert re.search(r'in ".*broken\.yaml", line 4, column 4', res.stdout + res.stderr), res.stderr[-2000:]
