import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import yaml
from snakemake.utils import validate

from oodcorr.analysis.across.multitest import CORRECTIONS
from oodcorr.analysis.across.pooling import TWO_RUNS
from oodcorr.analysis.cell.correlate import METHODS
from oodcorr.analysis.cell.inference import INFERENCES
from oodcorr.analysis.cell.resample import INTERVALS
from oodcorr.analysis.cell.residualise import RESIDUALISERS
from oodcorr.analysis.readers.workflow_scores import NOT_ACCURACY
from oodcorr.core.defaults import ANALYSIS, FINETUNE, READING, RESOURCES
from oodcorr.core.errors import ConfigError
from oodcorr.jobs.finetune import LOSSES
from oodcorr.jobs.metrics import COLUMNS
from oodcorr.jobs.prepare_dataset import FORMATS
from oodcorr.modeling.adaptation import ADAPTATIONS
from oodcorr.planning.config import DATASET_SOURCES, Experiment, analysis_options
from oodcorr.planning.plan import build_plan, load
from oodcorr.planning.schema import fill_defaults, read_config

from helpers import MICRO, REPO, micro_config, n_evaluations


def _load(name):
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return cfg


@pytest.fixture
def cfg():
    return _load("config.yaml")


def test_default_config_expands(cfg):
    plan = build_plan(cfg, REPO)
    assert [r.id for r in plan.runs] == ["tiny-opt/synth/n4096/seed0", "tiny-olmo2/synth/n4096/seed0"]
    steps = plan.runs[0].steps
    assert steps[0] == 0 and len(steps) >= 9 and list(steps) == sorted(set(steps))
    roles = plan.testsets["synth"]
    assert roles[0] == ("synth-test", "in-domain")
    assert [r for _, r in roles[1:]] == ["ood"] * 5  # three shifts and the planted pair
    assert plan.unit == "checkpoint" and plan.paths.root == "results/default"
    # one evaluation job per run x checkpoint x testset, each with its own predictions file
    assert len(plan.eval_jobs) == n_evaluations(plan) == 2 * len(steps) * 6
    assert all(len(j.steps) == 1 for j in plan.eval_jobs)
    outputs = plan.eval_outputs()
    assert len(set(outputs)) == len(outputs) == 2 * len(steps) * 6
    assert outputs[0] == "results/default/eval/tiny-opt/synth/n4096/seed0/step0/synth-test.predictions.parquet"


def test_schema_fills_defaults_and_rejects_unknown_keys(cfg):
    assert cfg["analysis"]["methods"] == ["pearson", "spearman"]
    assert cfg["models"][0]["trust_remote_code"] is False
    cfg["finetune"]["learning_rat"] = 1
    with pytest.raises(Exception, match="learning_rat"):
        validate(cfg, str(REPO / "config/schema.yaml"))


def test_explicit_schedule_and_errors(cfg):
    cfg["finetune"]["checkpoints"] = {"steps": [10, 20, 3200]}
    plan = build_plan(cfg, REPO)
    assert plan.runs[0].steps == (0, 10, 20, 3200)
    cfg["finetune"]["checkpoints"] = {"steps": [10, 5]}
    with pytest.raises(ConfigError, match="strictly increasing"):
        build_plan(cfg, REPO)
    cfg["finetune"]["checkpoints"] = {"steps": [10, 5000]}
    with pytest.raises(ConfigError, match="beyond the run's 3200 training steps"):
        build_plan(cfg, REPO)


def test_every_k_includes_last_step(cfg):
    cfg["finetune"].update(max_steps=25, checkpoints={"every": 10})
    assert build_plan(cfg, REPO).runs[0].steps == (0, 10, 20, 25)
    del cfg["finetune"]["max_steps"]
    cfg["finetune"]["epochs"] = 2  # 4096 examples / batch 16 = 256 steps per epoch
    assert build_plan(cfg, REPO).runs[0].max_steps == 512


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["ood_testsets"].append("nope"), "dataset 'nope' is not defined"),
        (lambda c: c["models"].append(copy.deepcopy(c["models"][0])), "duplicate name 'tiny-opt'"),
        (lambda c: c["prompt"].update(template="{premise} Yes or No?"), "must contain {hypothesis}"),
        (lambda c: c["models"][0].update(hub="facebook/opt-125m"), "exactly one of `tiny`, `hub`, `path`"),
    ],
)
def test_semantic_errors_name_the_key(cfg, mutate, message):
    mutate(cfg)
    with pytest.raises(ConfigError, match=message):
        build_plan(cfg, REPO)


def test_in_domain_test_in_ood_list_is_evaluated_once(cfg):
    # several in-domain sets share one OOD list: each run evaluates its own test set once, as in-domain
    cfg["in_domain"].append({"name": "synth2", "train": "synth-train", "test": "synth-overlap"})
    cfg["ood_testsets"].insert(0, "synth-test")
    plan = build_plan(cfg, REPO)
    names = [t for t, _ in plan.testsets["synth"]]
    assert names.count("synth-test") == 1 and len(names) == len(cfg["ood_testsets"])  # 6
    assert plan.testsets["synth2"][0] == ("synth-overlap", "in-domain")
    assert ("synth-test", "ood") in plan.testsets["synth2"]
    # with a single in-domain set, listing its own test set as OOD is a mistake
    del cfg["in_domain"][1]
    with pytest.raises(ConfigError, match="ood_testsets: 'synth-test' is the in-domain test set of in_domain"):
        build_plan(cfg, REPO)


def test_model_overrides_replace_schedule_and_epochs(cfg):
    cfg["finetune"]["checkpoints"] = {"steps": [4, 16, 64]}
    cfg["models"][0]["finetune"] = {"checkpoints": {"every": 800}}
    cfg["models"][1]["finetune"] = {"epochs": 1}
    opt, olmo = build_plan(cfg, REPO).runs
    assert opt.steps == (0, 800, 1600, 2400, 3200)
    assert olmo.max_steps == 256 and olmo.steps == (0, 4, 16, 64)


def test_params_ignore_bookkeeping_and_key_order(cfg):
    plan = build_plan(cfg, REPO)
    spec = plan.models["tiny-opt"].model_entry.params()
    assert "resources" not in spec and list(spec) == sorted(spec)
    ft = plan.models["tiny-opt"].finetune
    assert "n_train" not in ft and "seeds" not in ft
    ds = plan.dataset_params(SimpleNamespace(dataset="synth-overlap"))
    assert "description" not in ds and "_registry" not in ds
    reordered = copy.deepcopy(cfg)
    reordered["models"][0] = dict(reversed(list(reordered["models"][0].items())))
    assert build_plan(reordered, REPO).models["tiny-opt"].model_entry.params() == spec
    assert repr(build_plan(reordered, REPO).models["tiny-opt"].model_entry.params()) == repr(spec)


def test_paper_grid_plans_the_whole_grid_offline():
    """config/paper.yaml: 8 models x {MNLI, SNLI} x n_train x seeds, each checkpoint on 8 testsets."""
    cfg = _load("paper.yaml")
    plan = build_plan(cfg, REPO)
    exp = plan.exp
    hubs = sorted(m["hub"] for m in cfg["models"])
    assert hubs == sorted(
        [
            "allenai/OLMo-2-1124-7B",
            "allenai/OLMo-2-1124-13B",
            "allenai/OLMo-2-0325-32B",
            "facebook/opt-2.7b",
            "facebook/opt-6.7b",
            "facebook/opt-13b",
            "facebook/opt-30b",
            "HuggingFaceTB/SmolLM3-3B",
        ]
    )
    assert set(exp.in_domain) == {"mnli", "snli"}
    for d in exp.in_domain:  # its own test set once as in-domain, the other seven as OOD
        roles = plan.testsets[d]
        assert len(roles) == 8 and roles[0] == (d, "in-domain")
        assert {t for t, _ in roles} == {"snli", "mnli", "scitail", "rte", "hans", "anli", "wnli", "paws"}
    ft = cfg["finetune"]
    runs = plan.runs
    assert len(runs) == 8 * 2 * len(ft["n_train"]) * len(ft["seeds"]) == 96
    # a job per checkpoint x testset: 96 runs x 21 checkpoints x 8 testsets
    assert len(plan.eval_jobs) == n_evaluations(plan) == len(runs) * len(runs[0].steps) * 8 == 16128
    for m in cfg["models"]:  # LoRA r=8, alpha=32, dropout 0.1 on attention projections, bf16
        lora = exp.finetune_cfg(m["name"])["lora"]
        assert (lora["r"], lora["alpha"], lora["dropout"]) == (8, 32, 0.1)
        assert {"q_proj", "k_proj", "v_proj"} <= set(lora["target_modules"])
        assert m["dtype"] == "bfloat16" and exp.finetune_cfg(m["name"])["bf16"]
    # resources grow with model size
    res = {m["name"]: plan.models[m["name"]].resources["finetune"] for m in cfg["models"]}
    assert res["opt-30b"].gpu == 2 > res["opt-2.7b"].gpu == 1  # opt-30b: FSDP over 2 GPUs
    assert res["olmo2-13b"].mem_mb > res["olmo2-7b"].mem_mb > res["smollm3-3b"].mem_mb
    # unpinned revisions are named, not silently accepted
    assert any("olmo2-32b" in w for w in plan.warnings)
    assert not any("olmo2-7b" in w for w in plan.warnings)


def test_paper_authors_grid_has_the_authors_settings_and_plans_offline():
    """config/paper-authors.yaml: the paper grid (as config/paper.yaml: models, in-domain sets,
    testsets) with the settings of the authors' code, each of which it cites."""
    cfg, ours = _load("paper-authors.yaml"), _load("paper.yaml")
    plan = build_plan(cfg, REPO)
    exp = plan.exp
    assert [(m["name"], m["hub"], m["revision"]) for m in cfg["models"]] == [
        (m["name"], m["hub"], m["revision"]) for m in ours["models"]
    ]
    assert [d["name"] for d in cfg["in_domain"]] == ["mnli", "snli"]
    # MNLI scored as the authors' code scores it (neutral as " Yes"), under its own name
    assert plan.testsets["mnli"][0] == ("mnli-neutral-yes", "in-domain")
    assert exp.dataset("mnli-neutral-yes")["label_map"]["1"] == "entailment"
    assert {t for t, _ in plan.testsets["snli"]} == {
        "snli",
        "mnli-neutral-yes",
        "scitail",
        "rte",
        "hans",
        "anli",
        "wnli",
        "paws",
    }
    for m in cfg["models"]:
        prompt, ft = exp.prompt_for(m["name"]), exp.finetune_params(m["name"])
        assert prompt == {
            "template": "{premise}Question: {hypothesis} Yes or No?",
            "strip_fields": False,
            "truncation": "right",
            "scored_position": "padded-end",
            "verbalisers": {"entailment": " Yes", "non-entailment": " No"},
        }
        assert (ft["loss"], ft["learning_rate"], ft["epochs"], ft["warmup_ratio"], ft["weight_decay"]) == (
            "vocabulary",
            1e-5,
            40,
            0.1,
            0.01,
        )
        assert ft["batch_size"] * ft["gradient_accumulation_steps"] == 64 and ft["max_length"] == 128
        lora = ft["lora"]
        assert (lora["r"], lora["alpha"], lora["dropout"]) == (8, 32, 0.1)
        want = (
            ["k_proj", "v_proj", "q_proj", "out_proj"]
            if m["name"].startswith("opt")
            else ["q_proj", "k_proj", "v_proj", "o_proj"]
        )
        assert lora["target_modules"] == want
    assert cfg["evaluation"]["max_length"] == 128 and cfg["label_mode"] == "binary"
    # 40 epochs of 260,000 at batch 64; evaluated at 0, every 2000 steps, and the last step
    run = plan.runs[0]
    assert (run.n_train, run.seed, run.max_steps) == (260000, 42, 40 * -(-260000 // 64))
    assert run.steps[:3] == (0, 2000, 4000) and run.steps[-1] == run.max_steps
    assert len(plan.runs) == 8 * 2 and n_evaluations(plan) == 16 * len(run.steps) * 8
    # every file:line the header cites exists in the authors' code as quoted (see the comments)
    header = (REPO / "config/paper-authors.yaml").read_text().split("\nexperiment:")[0]
    assert "d382ab19319db65acce2cf678638905a78fc825f" in header
    for cite in ("opt.toml:6", "NLIDataset.py:22-23", "OPTModel.py:22", "utils.py:40-41", "opt.toml:31"):
        assert cite in header, cite


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


def test_size_class_and_label_mode_errors(cfg):
    cfg["models"][0]["size_class"] = "huge"
    with pytest.raises(ConfigError, match=r"models\[tiny-opt\]\.size_class: 'huge'"):
        build_plan(cfg, REPO)
    cfg["size_classes"] = {"huge": {"finetune": {"mem_mb": 9000}}}
    cfg["models"][0]["resources"] = {"finetune": {"runtime": 7}}
    res = build_plan(cfg, REPO).models["tiny-opt"].resources["finetune"]
    # the rule's defaults, then the size class, then the model's own
    assert (res.mem_mb, res.runtime, res.gpu, res.threads) == (9000, 7, 0, 1)
    cfg = _load("config.yaml")
    cfg["label_mode"] = "four-way"
    with pytest.raises(ConfigError, match="label_mode: 'four-way'.*binary-merge"):
        build_plan(cfg, REPO)
    cfg["label_mode"] = "three-way"  # the default verbalisers have no word for neutral
    with pytest.raises(
        ConfigError, match=r"prompt\.verbalisers: no verbaliser for label\(s\) \['neutral', 'contradiction'\]"
    ):
        build_plan(cfg, REPO)


def test_registry_entries_are_schema_checked(tmp_path, cfg):
    bad = tmp_path / "reg.yaml"
    bad.write_text("datasets:\n  x:\n    source: hub\n    hub: {id: a/b, split: test}\n")
    cfg["registries"] = cfg["registries"] + [str(bad)]
    with pytest.raises(ConfigError, match=r"reg\.yaml: dataset 'x'\.hub: 'revision' is a required property"):
        build_plan(cfg, REPO)


def test_one_evaluate_rule_whatever_the_schedules(cfg):
    """Unit `checkpoint`: a job per run x step x testset; unit `run`: a job per run x testset."""
    cfg["finetune"].update(n_train=[64, 128, 256], epochs=1, batch_size=16, checkpoints={"every": 1})
    del cfg["finetune"]["max_steps"]
    cfg["models"][1]["finetune"] = {"checkpoints": {"steps": [1, 2, 3]}}
    plan = build_plan(cfg, REPO)
    steps = {(r.model, r.n_train): r.steps for r in plan.runs}
    assert steps["tiny-opt", 64] == (0, 1, 2, 3, 4) and steps["tiny-opt", 256] == tuple(range(17))
    assert steps["tiny-olmo2", 64] == steps["tiny-olmo2", 256] == (0, 1, 2, 3)
    n = sum(len(r.steps) for r in plan.runs) * len(plan.testsets["synth"])
    assert len(plan.eval_jobs) == len(set(plan.eval_outputs())) == n
    cfg["evaluation"]["unit"] = "run"
    plan = build_plan(cfg, REPO)
    assert len(plan.eval_jobs) == len(plan.runs) * len(plan.testsets["synth"]) and n_evaluations(plan) == n
    assert all(j.steps == j.run.steps for j in plan.eval_jobs)
    assert plan.eval_outputs()[0] == "results/default/eval/tiny-opt/synth/n64/seed0/synth-test.json"
    job = plan.eval_params(_wc(plan.runs[0], testset="synth-negation"))
    assert job["steps"] == [0, 1, 2, 3, 4] and job["predictions"] == [
        f"results/default/eval/tiny-opt/synth/n64/seed0/step{s}/synth-negation.predictions.parquet" for s in range(5)
    ]


def test_evaluation_dtype_reaches_the_evaluation_jobs_only_when_set(cfg):
    """`evaluation.dtype: model` (the default) is in no param, so upgrading reruns nothing; another
    dtype is in every evaluation job's params (so changing it reruns the evaluations) and nowhere else."""
    plan = build_plan(copy.deepcopy(cfg), REPO)
    wc = _wc(plan.runs[0], testset="synth-negation", step="0")
    assert cfg["evaluation"]["dtype"] == "model" and "dtype" not in plan.eval_params(wc)
    cfg["evaluation"]["dtype"] = "bfloat16"
    other = build_plan(cfg, REPO)
    assert other.eval_params(wc) == dict(plan.eval_params(wc), dtype="bfloat16")
    assert other.tokenize_params(wc) == plan.tokenize_params(wc)
    assert other.finetune_params(wc) == plan.finetune_params(wc)


def _wc(run, **extra):
    return SimpleNamespace(**run.wildcards, **extra)


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_resource_factory(cfg, unit):
    """Every per-model rule's resources come from one factory: per model (size class, own
    resources), memory and runtime times the attempt, evaluate's runtime per checkpoint."""
    cfg["evaluation"]["unit"] = unit
    cfg["size_classes"] = {"big": {"evaluate": {"gpu": 1, "gpu_model": "a100", "mem_mb": 8000, "runtime": 3}}}
    cfg["models"][1]["size_class"] = "big"
    cfg["resources"] = {"evaluate": {"threads": 2}}
    plan = build_plan(cfg, REPO)
    res = plan.rule_resources("evaluate")
    opt, olmo = plan.runs
    wo, wb = _wc(opt, step="0", testset="synth-test"), _wc(olmo, step="0", testset="synth-test")
    assert res["gpu"](wo) == 0 and res["gpu"](wb) == 1
    assert res["gpu_model"](wo) is None and res["gpu_model"](wb) == "a100"
    assert plan.threads("evaluate") == 2  # the same for both models: a constant, not a callable
    assert res["mem_mb"](wo, 1) == 2000 and res["mem_mb"](wb, 2) == 16000
    per_job = len(olmo.steps) if unit == "run" else 1
    assert res["runtime"](wo, 1) == 10 * per_job and res["runtime"](wb, 3) == 3 * per_job * 3
    assert res["attempt"](wo, 2) == 2
    for rule in ("build_tiny_model", "tokenize_testset", "finetune"):
        assert {"gpu", "mem_mb", "runtime"} <= set(plan.rule_resources(rule))


def test_experiment_names_the_results_folder(cfg):
    cfg["experiment"] = "my-grid"
    plan = build_plan(cfg, REPO)
    assert plan.paths.scores == "results/my-grid/scores.parquet"
    assert all(t.startswith("results/my-grid/") for t in plan.targets() + plan.eval_outputs())
    cfg["experiment"] = "../elsewhere"
    with pytest.raises(ConfigError, match="experiment: '../elsewhere' must match"):
        load(cfg, REPO)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "datasets:\n  x:\n    source: local\n    path: a.jsonl\n   label_map: {a: b}\n",
            r"reg\.yaml:5:4: not valid YAML: expected <block end>, but found '<block mapping start>' \(while parsing a "
            r"block mapping that starts at line 2\); check this line's indentation.*"
            r"\n       label_map: \{a: b\}\n       \^",
        ),
        (
            "datasets:\n  x:\n\tsource: local\n",
            r"reg\.yaml:3:1: not valid YAML: found character '\\t' that cannot start "
            r"any token .*; indent with spaces, never tabs",
        ),
        (
            "datasets:\n  x: {source: local, path: [a.jsonl}\n",
            r"reg\.yaml:2:36: not valid YAML: expected ',' or ']', but got '}'",
        ),
        (
            "datasets:\n  x:\n    description: caf\xe9\n",
            r"reg\.yaml: not valid YAML: invalid continuation byte "
            r"\(byte 0xe9 at offset \d+\); YAML files must be UTF-8",
        ),
    ],
)
def test_a_registry_that_is_not_yaml_is_named_with_its_line(tmp_path, cfg, text, message):
    bad = tmp_path / "reg.yaml"
    bad.write_bytes(text.encode("latin-1"))
    cfg["registries"] = cfg["registries"] + [str(bad)]
    with pytest.raises(ConfigError, match=message):
        build_plan(cfg, REPO)


def test_a_label_mode_file_that_is_not_yaml_is_named_with_its_line(tmp_path, cfg):
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "resources").mkdir()
    text = (
        (REPO / "resources/label_modes.yaml")
        .read_text()
        .replace("  labels: [entailment, non-entailment]", "  labels: [entailment, non-entailment", 1)
    )
    (tmp_path / "resources/label_modes.yaml").write_text(text)
    line = text.splitlines().index("  labels: [entailment, non-entailment") + 1
    with pytest.raises(
        ConfigError,
        match=rf"label_modes\.yaml:{line + 1}:\d+: not valid YAML: expected ',' or ']'"
        rf".*that starts at line {line}\)",
    ):
        Experiment(cfg, tmp_path)


@pytest.mark.slow
def test_what_snakemake_prints_for_a_broken_configfile(tmp_path):
    """Snakemake parses --configfile itself and buries the line: its message names neither file nor
    line; --verbose shows PyYAML's error, with both (docs/troubleshooting.md#what-each-error-means says so). If an
    upgrade changes this, update that table."""
    cfg = tmp_path / "broken.yaml"
    cfg.write_text("experiment: x\nmodels:\n  - name: m\n   tiny: {}\n")
    cmd = [
        str(Path(sys.executable).with_name("snakemake")),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(tmp_path),
        "--configfile",
        str(cfg),
        "-n",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "Config file is not valid JSON or YAML" in out and "line 4" not in out and "broken.yaml" not in out
    res = subprocess.run(cmd + ["--verbose"], capture_output=True, text=True, timeout=120)
    assert re.search(r'in ".*broken\.yaml", line 4, column 4', res.stdout + res.stderr), res.stderr[-2000:]


# ---- the one entry point: oodcorr.planning.plan.load ---------------------------------------------------
def test_load_names_checks_fills_and_plans_in_one_call(tmp_path):
    src = tmp_path / "my-grid.yaml"
    text = MICRO.read_text()
    cfg = yaml.safe_load(text)
    cfg.pop("experiment", None)
    cfg.pop("analysis", None)
    src.write_text(yaml.safe_dump(cfg))
    config = read_config(src)
    plan = load(config, REPO, [src])
    # named after its file, defaults filled in place (as Snakemake's own config is), planned
    assert config["experiment"] == "my-grid" and plan.paths.root == "results/my-grid"
    assert config["analysis"]["correction"] == "holm" and config["analysis"]["alpha"] == 0.05
    assert plan.runs
    # a schema violation is named with its file and line, before Snakemake's validator sees it
    bad = dict(cfg, evaluation=dict(cfg["evaluation"], batch_size="many"))
    src.write_text(yaml.safe_dump(bad, sort_keys=False))
    line = next(i for i, t in enumerate(src.read_text().splitlines(), 1) if "batch_size: many" in t)
    with pytest.raises(ConfigError, match=rf"{re.escape(str(src))}:{line}: .*batch_size"):
        load(read_config(src), REPO, [src])


def test_the_snakefile_and_the_cli_reach_the_config_only_through_load():
    snakefile = (REPO / "Snakefile").read_text()
    assert "PLAN = plan_run(workflow, config)" in snakefile
    preflight = (REPO / "src/oodcorr/launch/snakefile.py").read_text()
    assert "load(config, workflow.basedir, files)" in preflight
    cli = [f.read_text() for f in sorted((REPO / "src/oodcorr/cli").glob("*.py"))]
    for text in (snakefile, preflight, *cli):
        for other in ("check_config(", "validate(", "build_plan(", "fill_defaults(", "Experiment("):
            assert other not in text, other


# ---- defaults written once -------------------------------------------------------------------
def _with_analysis_defaults(node, defaults):
    """A copy of the schema's analysis node with ``default:`` values put back from ``defaults``,
    as the schema held them before they moved to oodcorr.core.defaults (each block defaulting to {})."""
    node = copy.deepcopy(node)
    for key, value in defaults.items():
        if isinstance(value, dict):
            node["properties"][key] = _with_analysis_defaults(node["properties"][key], value)
            node["properties"][key]["default"] = {}
        else:
            node["properties"][key]["default"] = value
    return node


def test_analysis_defaults_are_written_once_and_fill_as_the_schema_did(tmp_path):
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    node = schema["properties"]["analysis"]

    def no_default(n, where):  # the schema holds no default for an analysis key: one home
        assert "default" not in n, where
        for k, sub in (n.get("properties") or {}).items():
            no_default(sub, f"{where}.{k}")

    no_default(node, "analysis")
    # every key of the schema has a default, and each default is an allowed value
    assert set(ANALYSIS) == set(node["properties"])
    for block, sub in node["properties"].items():
        if "properties" in sub:
            assert set(ANALYSIS[block]) == set(sub["properties"]), block
    jsonschema.validate(ANALYSIS, node)
    # filling gives the analysis params that Snakemake's set_default gave when the schema held the
    # defaults (it had none for `score`, which the params leave out), key order included: upgrading
    # reruns no analysis job
    before = {k: v for k, v in ANALYSIS.items() if k != "score"}
    old = dict(schema, properties=dict(schema["properties"], analysis=_with_analysis_defaults(node, before)))
    old["properties"]["analysis"]["default"] = {}
    old_path = tmp_path / "schema-with-analysis-defaults.yaml"
    old_path.write_text(yaml.safe_dump(old, sort_keys=False))
    base = micro_config()
    sections = [None, {}, {"pooling": {"two_runs": "fixed-effect"}, "methods": ["spearman"]}, {"gam": {}, "seed": 3}]
    for section in sections:
        a, b = copy.deepcopy(base), copy.deepcopy(base)
        for cfg in (a, b):
            cfg.pop("analysis", None)
            if section is not None:
                cfg["analysis"] = copy.deepcopy(section)
        validate(a, str(old_path), set_default=True)
        fill_defaults(b, REPO / "config/schema.yaml")
        assert repr(analysis_options(b["analysis"])) == repr(analysis_options(a["analysis"])), section
        assert b["analysis"]["score"] == "accuracy"


def _schema_enum(path: str) -> list:
    """The allowed values at ``path`` in config/schema.yaml (a '/'-separated path of schema keys)."""
    node = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    for key in path.split("/"):
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node["enum"]


def test_allowed_values_are_the_ones_the_code_knows():
    """Each allowed value is written twice, in the schema (the message a user gets) and in the code
    that acts on it: every pair here must agree, so adding a value to one and not the other fails."""
    a = "properties/analysis/properties"
    pairs = {
        f"{a}/methods/items": METHODS,
        f"{a}/residualisers/items": RESIDUALISERS,
        f"{a}/inference": INFERENCES,
        f"{a}/correction": CORRECTIONS,
        f"{a}/pooling/properties/two_runs": TWO_RUNS,
        f"{a}/bootstrap/properties/interval": INTERVALS,
        f"{a}/score": ("accuracy", *COLUMNS),
        "properties/models/items/properties/method": tuple(ADAPTATIONS),
        "$defs/finetune/properties/loss": LOSSES,
        "$defs/dataset/properties/source": DATASET_SOURCES,
        "$defs/dataset/properties/format": FORMATS,
        "$defs/resources/propertyNames": ("default", "cpu", *RESOURCES),
    }
    for path, known in pairs.items():
        assert list(_schema_enum(path)) == list(known), path
    # the metrics the example-level bootstrap cannot resample are the workflow's metrics other than accuracy
    assert NOT_ACCURACY == COLUMNS


def test_python_defaults_have_no_second_home_in_the_schema():
    """The switches whose defaults live in oodcorr.core.defaults (left out of params at their
    default) have none in the schema, and each default is one of the allowed values."""
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    prompt = schema["properties"]["prompt"]["properties"]
    finetune = schema["$defs"]["finetune"]["properties"]
    for key, value in READING.items():
        assert "default" not in prompt[key], f"prompt.{key}"
        assert value in (prompt[key].get("enum") or (True, False)), key
    for key in FINETUNE:
        assert "default" not in finetune[key], f"finetune.{key}"
    assert FINETUNE["loss"] in finetune["loss"]["enum"]
    assert FINETUNE["report_to"] in finetune["report_to"]["oneOf"][0]["enum"]
