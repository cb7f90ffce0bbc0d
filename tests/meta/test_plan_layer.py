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


def test_the_snakefile_reads_as_a_table_of_contents():
    """At most 80 lines: the config, one call that plans and checks (oodcorr.launch.snakefile.plan_run),
    the includes, `rule all` and one call per handler; every check it ran itself lives in that module."""
    text = (REPO / "Snakefile").read_text()
    assert len(text.splitlines()) <= 80
    assert text.count("plan_run(") == 1 and re.findall(r"^(?:include|rule \w+):", text, re.M)[-1] == "rule all:"
    calls = re.findall(r"^(on\w+):\n    (\w+)\(", text, re.M)
    assert calls == [("onstart", "on_start"), ("onsuccess", "on_success"), ("onerror", "on_error")]
    assert "sys.exit" not in text and "print(" not in text


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


def _slice(config: str, path, models: int, **finetune) -> dict:
    """``config`` cut to its first ``models`` models, written to ``path``: the grid's shape (both
    in-domain tasks, each the other's OOD testset; hub entries, size classes, checkpoints) at a
    fraction of its jobs."""
    cfg = yaml.safe_load((REPO / config).read_text())
    cfg["models"] = cfg["models"][:models]
    cfg["finetune"].update(finetune)
    path.write_text(yaml.safe_dump(cfg))
    return cfg


def test_paper_grid_counts_a_single_evaluate_rule():
    """config/paper.yaml: 16,128 jobs of the one `evaluate` rule, 96 finetunes, and in all the count
    the docs state. Counted by the budget's count of the plan (oodcorr.launch.budget.job_counts), which
    equals Snakemake's dry run of a slice of the same grid (the next test; the whole grid's dry run,
    about a minute of Snakemake's DAG, is benchmarks/dag_plan.py's)."""
    from test_docs import DOCS, JOB_COUNT, read

    from oodcorr.launch.budget import job_counts

    table = job_counts(_paper())
    assert table["evaluate"] == 16128 and table["finetune"] == 96
    stated = {int(n.replace(",", "")) for d in DOCS for c, n in JOB_COUNT.findall(read(d)) if c == "config/paper.yaml"}
    assert stated == {sum(table.values())}, "a doc states another job count for config/paper.yaml than its plan"


@pytest.mark.slow
def test_a_slice_of_the_paper_grid_dry_runs_to_the_budgets_count(tmp_path):
    """`snakemake -n --quiet rules` of paper.yaml's first two models, one run a task: one `evaluate` rule,
    and per rule the count the budget gives the whole grid from the same plan code."""
    from oodcorr.launch.budget import job_counts
    from oodcorr.planning.plan import load
    from oodcorr.planning.schema import read_config

    path = tmp_path / "paper-slice.yaml"
    _slice("config/paper.yaml", path, models=2, n_train=[2048], seeds=[0])
    table = planned_jobs(tmp_path, path)
    assert table["evaluate"] == 2 * 2 * 21 * 8  # tasks x models x checkpoints x testsets
    assert not [k for k in table if k.startswith("evaluate_")]
    assert job_counts(load(read_config(path), REPO, [path])) == {k: v for k, v in table.items() if k != "total"}


@pytest.mark.slow
def test_paper_authors_grid_dry_run_plans_offline(tmp_path):
    """`snakemake -n` of config/paper-authors.yaml's first model: plans with no network."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    path = tmp_path / "authors-slice.yaml"
    cfg = _slice("config/paper-authors.yaml", path, models=1)
    table = planned_jobs(tmp_path, path, env=offline)
    runs = len(cfg["in_domain"]) * len(cfg["finetune"]["n_train"]) * len(cfg["finetune"]["seeds"])
    assert runs == 2 and table["finetune"] == runs and table["evaluate"] == runs * 83 * 8
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
