"""Planning-time checks (oodcorr.planning.checks): what the config decides and could not work is a
ConfigError naming the key before any job runs; what is allowed but suspicious a warning.

Each test fails on the code before these checks (build_plan accepted every one of these
configs; the job failed later, or the analysis produced NaN or duplicated rows)."""

import copy
import json
import os
from types import SimpleNamespace

import pytest
import yaml

from oodcorr.analysis.cell.correlate import min_points
from oodcorr.analysis.cell.residualise import GamSettings, parse
from oodcorr.core.atomic_write import write_json_atomic
from oodcorr.core.defaults import ANALYSIS
from oodcorr.core.errors import ConfigError, DataError
from oodcorr.core.token_cache import cache_info_path, tokenize_settings_digest
from oodcorr.jobs.prepare_dataset import _load_local
from oodcorr.launch import disk_checks
from oodcorr.planning import checks
from oodcorr.planning.checks import check_analysis_size
from oodcorr.planning.plan import Run, build_plan, load
from oodcorr.planning.schema import check_config, fill_defaults

from helpers import MICRO, REPO, micro_config


@pytest.fixture
def cfg():
    c = yaml.safe_load((REPO / "config/config.yaml").read_text())
    fill_defaults(c, REPO / "config/schema.yaml")
    return c


def refused(c, *needles):
    with pytest.raises(ConfigError) as e:
        build_plan(c, REPO)
    for n in needles:
        assert n in str(e.value), str(e.value)
    return str(e.value)


@pytest.mark.parametrize(
    "template, shown",
    [
        ("{premise} {question} {hypothesis}", "{question}"),
        ("{premise} {hypothesis} {0}", "{0}"),
        ("{premise} {hypothesis} {hypothesis!r}", "{hypothesis!r}"),
        ("{premise} {hypothesis} {premise:>10}", "{premise:>10}"),
    ],
)
def test_unknown_placeholder_is_refused_naming_it(cfg, template, shown):
    cfg["prompt"]["template"] = template
    refused(cfg, "prompt.template", shown, "{{")


@pytest.mark.parametrize(
    "template", ["{premise} {hypothesis} {", "{premise} } {hypothesis}", '{premise} {"label": {hypothesis}}']
)
def test_literal_braces_are_refused(cfg, template):
    cfg["prompt"]["template"] = template
    refused(cfg, "prompt.template", "{{ or }}")


def test_escaped_braces_are_allowed(cfg):
    cfg["prompt"]["template"] = "{{json}} {premise} -> {hypothesis}"
    build_plan(cfg, REPO)


@pytest.mark.parametrize(
    "mutate, needles",
    [
        (  # a model's own template is checked
            lambda c: c["models"][1].update(prompt={"template": "{premise} {hypo}"}),
            ("models[tiny-olmo2].prompt.template", "{hypo}"),
        ),
        (
            lambda c: c["prompt"].update(verbalisers={"entailment": " Yes", "non-entailment": " Yes"}),
            ("prompt.verbalisers", "' Yes'", "entailment"),
        ),
        (lambda c: c.update(ood_testsets=c["ood_testsets"][:1]), ("ood_testsets", "at least two")),
        (  # an in-domain test set equal to its training set
            lambda c: c["in_domain"][0].update(test=c["in_domain"][0]["train"]),
            ("in_domain[synth].test", "training set"),
        ),
    ],
    ids=["model-template", "identical-verbalisers", "one-ood-testset", "test-is-train"],
)
def test_a_config_that_cannot_work_is_refused_naming_the_key(cfg, mutate, needles):
    mutate(cfg)
    refused(cfg, *needles)


@pytest.mark.parametrize("grid, values", [("n_train", [64, 64]), ("seeds", [0, 1, 0])])
def test_duplicate_grid_values_are_refused(cfg, grid, values):
    cfg["finetune"][grid] = values
    _refused_by_schema(cfg, f"finetune.{grid}: {values[-1]!r} is listed more than once")


def test_duplicate_analysis_lists_are_refused_each_named(cfg):
    """The schema's uniqueItems: every list with a value twice named at once, not the first alone."""
    cfg["analysis"]["residualisers"] = ["linear", "spline", "linear"]
    cfg["analysis"]["pooling"] = {"by": ["seed", "seed"]}
    _refused_by_schema(
        cfg, "analysis.residualisers: 'linear' is listed more than once", "analysis.pooling.by: 'seed' is listed"
    )


def _refused_by_schema(c, *needles):
    with pytest.raises(ConfigError) as e:
        check_config(c, REPO / "config/schema.yaml")
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_test_set_reading_the_training_data_is_refused(cfg):
    # another name, the same synthetic stream as the training pool
    cfg.setdefault("datasets", {})["synth-copy"] = {
        "source": "synthetic",
        "shift": "in-domain",
        "split": "train",
        "n": 100,
        "seed": 0,
    }
    cfg["in_domain"][0]["test"] = "synth-copy"
    refused(cfg, "in_domain[synth].test", "synth-copy", "same data")


def test_schedule_too_short_for_any_residualiser_is_refused(cfg):
    cfg["finetune"]["checkpoints"] = {"every": 5000}  # longer than the run: steps 0 and the last
    msg = refused(cfg, "finetune.checkpoints", "every cell would be NaN", "every: ")
    # the hint's interval gives enough checkpoints
    every = int(msg.split("`every: ")[1].split("`")[0])
    cfg["finetune"]["checkpoints"] = {"every": every}
    assert all(len(r.steps) >= 4 for r in build_plan(cfg, REPO).runs)


def test_schedule_too_short_for_the_gam_is_a_warning(cfg):
    cfg["finetune"]["checkpoints"] = {"steps": [800, 1600, 2400]}  # 4 with step 0: linear yes, gam (8) no
    cfg["analysis"]["residualisers"] = ["linear", "gam"]
    plan = build_plan(cfg, REPO)
    assert any("gam" in w and "NaN" in w for w in plan.warnings), plan.warnings
    cfg["analysis"]["residualisers"] = ["linear"]
    assert not any("checkpoints" in w for w in build_plan(cfg, REPO).warnings)


def test_min_points_agree_with_the_analysis():
    # the planning check and the analysis read one default (oodcorr.core.defaults.ANALYSIS)
    assert checks.analysis_min_points("gam") == min_points(parse("gam"), GamSettings())
    for name in ("linear", "linear+step", "gam", "gam+step"):
        for gam_min in (5, 8, 12):
            want = min_points(parse(name), GamSettings(min_points=gam_min))
            assert checks.analysis_min_points(name, gam_min) == want


def test_shipped_configs_pass_the_checks():
    for name in ("config.yaml", "micro.yaml", "paper.yaml", "real-cpu.yaml"):
        c = yaml.safe_load((REPO / "config" / name).read_text())
        fill_defaults(c, REPO / "config/schema.yaml")
        build_plan(c, REPO)


# ---- what is on disk ------------------------------------------------------------------------
def test_truncation_warning_from_the_tokenised_caches_sidecar(cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = build_plan(cfg, REPO)
    # a sidecar as tokenize_testset writes it, beside its cache, made with this config's settings
    cache = plan.paths.tokenized.format(model="tiny-opt", testset="synth-negation")
    info = cache_info_path(cache)
    info.parent.mkdir(parents=True)
    open(cache, "wb").close()
    settings = tokenize_settings_digest(plan.tokenize_params(SimpleNamespace(model="tiny-opt")))

    def sidecar(cut):
        info.write_text(json.dumps({"n": 600, "n_truncated": cut, "max_length": 96, "settings": settings}))

    sidecar(60)
    warned = disk_checks.truncation_warnings(plan)
    assert len(warned) == 1 and "synth-negation" in warned[0] and "60 of 600" in warned[0]
    assert any("60 of 600" in w for w in disk_checks.end_of_run_warnings(plan))
    sidecar(6)  # 1%: below the threshold
    assert disk_checks.truncation_warnings(plan) == []


def test_local_file_edited_in_place_with_its_time_kept_is_refused(cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "ood.jsonl"
    rows = [
        {"premise": f"p{i}", "hypothesis": f"h{i}", "label": ["entailment", "non-entailment"][i % 2]} for i in range(20)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg.setdefault("datasets", {})["local-ood"] = {"source": "local", "path": str(src), "format": "jsonl"}
    cfg["ood_testsets"] = [*cfg["ood_testsets"], "local-ood"]
    plan = build_plan(cfg, REPO)
    recs, prov = _load_local(plan.exp.dataset("local-ood"), tmp_path, {})
    meta_path = tmp_path / plan.paths.data_meta.format(dataset="local-ood")
    data_path = tmp_path / plan.paths.data.format(dataset="local-ood")
    meta_path.parent.mkdir(parents=True)
    data_path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_json_atomic(meta_path, {"name": "local-ood", **prov})
    disk_checks.check_sources_unchanged(plan)  # unchanged: nothing to say
    st = os.stat(src)
    rows[3]["label"] = "entailment" if rows[3]["label"] != "entailment" else "non-entailment"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # the edit keeps the old modification time
    with pytest.raises(DataError) as e:
        disk_checks.check_sources_unchanged(plan)
    assert str(src) in str(e.value) and "touch" in str(e.value)


def test_an_n_train_below_the_number_of_labels_says_so(tmp_path):
    cfg = micro_config()
    cfg["label_mode"] = "three-way"
    cfg["prompt"] = {
        "template": "{premise} Question: {hypothesis} Yes, no, or maybe?",
        "verbalisers": {"entailment": " Yes", "neutral": " Maybe", "contradiction": " No"},
    }
    cfg["finetune"]["n_train"] = [2]
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO)
    assert str(e.value) == (
        "finetune.n_train: 2 is fewer than the 3 labels of label mode 'three-way' (entailment, neutral, "
        "contradiction); a run trains on n_train / 3 examples of each label, so n_train must be a multiple of 3, "
        "at least 3"
    )
    cfg["finetune"]["n_train"] = [6]
    cfg["models"][0]["finetune"] = {"n_train": [7]}
    with pytest.raises(ConfigError, match=r"^models\[micro-opt\]\.finetune\.n_train: 7 is not a multiple of the 3 "):
        load(cfg, REPO)


def test_planning_refuses_an_analysis_above_analysis_max_cells_and_raising_it_reruns_nothing():
    base = yaml.safe_load(MICRO.read_text())
    base["ood_testsets"] = ["synth-overlap", "synth-negation", "synth-passive"]  # 3 pairs
    cfg = copy.deepcopy(base)
    cfg["analysis"] = {"methods": ["pearson", "spearman"], "residualisers": ["linear", "linear+step"], "max_cells": 11}
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO, sources=[MICRO])
    assert str(e.value) == (
        "analysis.max_cells: the analysis of this config would compute 12 cells (3 OOD pair(s) summed over 1 run(s) "
        "x 2 method(s) x 2 residualiser(s)), more than the 11 that analysis.max_cells allows (time and memory grow "
        "with the cells: millions run for tens of minutes). Analyse fewer (ood_testsets, analysis.methods or "
        "analysis.residualisers), or set `analysis: {max_cells: 12}` to run it anyway"
    )
    plans = []
    for limit in (12, None):
        cfg = copy.deepcopy(base)
        cfg["analysis"] = {"methods": ["pearson", "spearman"], "residualisers": ["linear", "linear+step"]}
        if limit:
            cfg["analysis"]["max_cells"] = limit
        plans.append(load(cfg, REPO, sources=[MICRO]))
    # the limit is in no param: raising it reruns no analysis job, and the statistics never see it
    assert plans[0].analysis == plans[1].analysis and "max_cells" not in plans[0].analysis


def test_the_default_limit_refuses_a_workflow_of_two_thousand_testsets():
    testsets = {"mnli": (("mnli", "in-domain"), *((f"t{i}", "ood") for i in range(2000)))}
    runs = [Run("m", "mnli", 64, s, (0, 4, 8), 8) for s in range(3)]
    with pytest.raises(ConfigError, match=r"would compute 5,997,000 cells \(5,997,000 OOD pair\(s\) summed over 3 "):
        check_analysis_size(runs, testsets, ANALYSIS)  # the section as load fills it in: the defaults
    check_analysis_size(runs, testsets, {**ANALYSIS, "max_cells": 5_997_000})  # asked for: planned


def test_max_cells_is_a_positive_integer():
    cfg = yaml.safe_load(MICRO.read_text())
    cfg["analysis"]["max_cells"] = 0
    with pytest.raises(ConfigError, match=r"analysis\.max_cells: 0 is less than the minimum of 1"):
        load(cfg, REPO, sources=[MICRO])


def test_names_that_differ_only_in_case_are_refused(cfg):
    """Before: planned; on a file system that ignores case (macOS, Windows) the two models' figures
    (heatmaps/<model>.png, ...) were one file, one overwriting the other (issue 41)."""
    other = copy.deepcopy(cfg["models"][0])
    other["name"] = cfg["models"][0]["name"].upper()
    cfg["models"].append(other)
    refused(cfg, "models[].name", repr(cfg["models"][0]["name"]), repr(other["name"]), "differ only in case")


def test_testsets_that_differ_only_in_case_are_refused(cfg):
    cfg["datasets"] = {"Synth-Negation": {"source": "synthetic", "shift": "negation", "n": 60, "seed": 5}}
    cfg["ood_testsets"].append("Synth-Negation")
    refused(cfg, "datasets", "differ only in case", "'Synth-Negation'", "'synth-negation'")
