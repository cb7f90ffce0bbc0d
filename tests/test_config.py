import copy

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
    cfg = copy.deepcopy(default_config)
    cfg["ood_testsets"].insert(0, "synth-test")
    exp = Experiment(cfg, REPO)
    names = [t for t, _ in exp.testsets_for("synth")]
    assert names.count("synth-test") == 1 and len(names) == 6


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
