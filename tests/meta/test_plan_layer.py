"""The rules read only the plan layer (oodcorr.planning.plan), and the paper grid plans as asked."""

import inspect
import re

import pytest
import yaml

from oodcorr.planning.plan import build_plan
from oodcorr.planning.schema import fill_defaults

from helpers import REPO, micro_plan, n_evaluations, planned_jobs

RULE_FILES = sorted((REPO / "workflow/rules").glob("*.smk"))


def test_rules_read_only_the_plan():
    """No rule file reads the raw config or builds paths of its own: params, inputs, outputs,
    threads and resources all come from PLAN (its paths P, its log folder LOGS)."""
    assert RULE_FILES
    for f in RULE_FILES:
        text = f.read_text()
        assert not re.search(r"\bconfig\b\s*[\[.]", text), f"{f.name} reads the config directly"
        assert "EXP." not in text and '"results/' not in text and "'results/" not in text, f.name
        for line in re.findall(r"^\s+resources:\n(.*)\n", text, re.M):
            assert re.fullmatch(r'\s+\*\*PLAN\.rule_resources\("\w+"\),', line), (f.name, line)
        for rule in re.findall(r"^\s*rule (\w+):", text, re.M):
            body = text.split(f"rule {rule}:", 1)[1].split("\nrule ", 1)[0]
            if "threads:" in body:
                assert re.search(r"threads: PLAN\.threads\(\"\w+\"\)", body), (f.name, rule)


def test_one_evaluate_rule_in_either_unit():
    names = [r for f in RULE_FILES for r in re.findall(r"^\s*rule (\w+):", f.read_text(), re.M)]
    assert names.count("evaluate") == 2  # one per unit, behind `if PLAN.unit == ...`
    assert not any(re.fullmatch(r"evaluate_\d+", n) for n in names)


def _paper(unit=None):
    cfg = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    if unit:
        cfg["evaluation"]["unit"] = unit
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return build_plan(cfg, REPO)


def test_paper_grid_in_both_units():
    ck, run = _paper(), _paper("run")
    assert ck.unit == "checkpoint" and len(ck.eval_jobs) == 16128 == n_evaluations(ck)
    assert run.unit == "run" and len(run.eval_jobs) == 768 and n_evaluations(run) == 16128
    assert len(set(ck.eval_outputs())) == 16128 and len(set(run.eval_outputs())) == 768
    assert all(p.startswith("results/paper-grid/eval/") for p in ck.eval_outputs())


@pytest.mark.slow
def test_paper_grid_dry_run_counts_a_single_evaluate_rule(tmp_path):
    """`snakemake -n --configfile config/paper.yaml --quiet rules`: one `evaluate` rule, 16,128 jobs,
    and in all the count the docs state (the one dry run of this grid: test_docs.py leaves it here)."""
    from test_docs import DOCS, JOB_COUNT, read

    table = planned_jobs(tmp_path, REPO / "config/paper.yaml")
    assert table["evaluate"] == 16128 and table["finetune"] == 96
    assert not [k for k in table if k.startswith("evaluate_")]
    stated = {int(n.replace(",", "")) for d in DOCS for c, n in JOB_COUNT.findall(read(d)) if c == "config/paper.yaml"}
    assert stated == {table["total"]}, "a doc states another job count for config/paper.yaml than its dry run"


@pytest.mark.slow
def test_paper_authors_grid_dry_run_plans_offline(tmp_path):
    """`snakemake -n --configfile config/paper-authors.yaml`: plans with no network."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    table = planned_jobs(tmp_path, REPO / "config/paper-authors.yaml", env=offline)
    assert table["finetune"] == 16 and table["evaluate"] == 16 * 83 * 8 and table["prepare_dataset"] == 10
    assert "series_checkpoint" not in table


def test_every_rule_callable_carries_its_parameters_where_snakemake_looks():
    """Snakemake reads a callable's parameters from this attribute before inspecting it; a
    renamed attribute would silently bring back the per-call inspection (a third of planning)."""
    from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR, get_function_params

    from oodcorr.planning.rule_callables import SNAKEMAKE_PARAMS_ATTR

    assert SNAKEMAKE_PARAMS_ATTR == FUNC_OVERWRITE_PARAMS_ATTR
    plan = _paper()
    resources = plan.rule_resources("evaluate")
    callables = [v for v in resources.values() if callable(v)]
    assert len(callables) >= 3  # mem_mb, runtime, attempt: the paper's models differ in size
    for f in callables + [
        plan.eval_params,
        plan.checkpoints_input,
        plan.tokenize_params,
        plan.finetune_params,
        plan.model_input,
        plan.dataset_params,
    ]:
        assert hasattr(f, SNAKEMAKE_PARAMS_ATTR), f
        assert list(get_function_params(f)) == list(inspect.signature(f).parameters), f


def test_rules_name_their_conda_env_and_wildcards_once():
    """Every rule's conda: is one of the Snakefile's *_ENV names (which rule uses which:
    tests/meta/test_envs.py), and name wildcards use NAME (from oodcorr.planning.config.NAME_RE)."""
    snakefile = (REPO / "Snakefile").read_text()
    envs = re.findall(r'^(\w+_ENV) = "\.\./\.\./envs/\w+\.yaml"$', snakefile, re.M)
    assert envs == ["MODEL_ENV", "ANALYSIS_ENV"], envs
    for f in RULE_FILES:
        text = f.read_text()
        named = re.findall(r"^\s+conda:\n\s+(.*)\n", text, re.M)
        assert len(named) == text.count("conda:") and set(named) <= set(envs), f.name
        assert text.count("conda:") == len(re.findall(r"^\s+script:", text, re.M)), f.name
    constraints = snakefile.split("wildcard_constraints:\n", 1)[1].split("\n\n", 1)[0]
    for name in ("model", "indomain", "dataset", "testset"):
        assert f"    {name}=NAME," in constraints.splitlines(), name
    assert "[A-Za-z0-9]" not in snakefile


def test_the_analysis_format_follows_the_tables_it_writes():
    """An experiment analysed before gets its analysis recomputed when the tables change, and only
    then: ANALYSIS_FORMAT (a param of partial_correlations) is tied to the tables' columns and verdicts.
    Changing them fails this test until ANALYSIS_FORMAT is raised and the new fingerprint added."""
    import hashlib

    from oodcorr.analysis import AGREEMENT_COLUMNS, COLUMNS, VERDICTS
    from oodcorr.planning.plan import ANALYSIS_FORMAT

    fingerprint = hashlib.sha256(repr((COLUMNS, AGREEMENT_COLUMNS, VERDICTS)).encode()).hexdigest()[:16]
    known = {
        2: "89bf844c93a6aa24",
        3: "ce3f61d9905292d6",
        4: "a06288cd40849af5",
        5: "05cb1f0b985568d7",
        6: "0b42a18b1663d45b",
    }
    assert known.get(ANALYSIS_FORMAT) == fingerprint, (ANALYSIS_FORMAT, fingerprint)
    rule = (REPO / "workflow/rules/analyse.smk").read_text()
    assert re.search(r"rule partial_correlations:.*?params:.*?tables=ANALYSIS_FORMAT", rule, re.S)


def test_a_consensus_heatmap_per_in_domain_set_with_two_models_or_more():
    from oodcorr.planning.plan import load
    from oodcorr.planning.schema import read_config

    default = load(read_config(REPO / "config/config.yaml"), REPO, [REPO / "config/config.yaml"])
    # named after the in-domain test set, as the agreement table's in_domain column names it
    assert default.consensus_sets() == ["synth-test"] == [default.testsets["synth"][0][0]]
    assert "results/default/analysis/consensus/synth-test.png" in default.targets()
    paper = load(read_config(REPO / "config/paper.yaml"), REPO, [REPO / "config/paper.yaml"])
    assert paper.consensus_sets() == ["mnli", "snli"]
    micro = micro_plan()
    assert micro.consensus_sets() == [] and not any("/consensus/" in t for t in micro.targets())
