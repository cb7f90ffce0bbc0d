"""Size budgets checked before any work (issue 25, class 5): YAML files and configs, and the analysis.

An attacker's config: a YAML alias bomb in a free-form mapping (ten lines standing for a billion
values), a mapping nested tens of thousands deep, an alias to the block that holds it. A tired
user's: `oodcorr analyse` on a table of 2,000 testsets. Each is refused at once with a sentence
naming the file (and line) or the key, the limit and what to do; nothing real is refused (the
shipped configs, the paper's grid, the McCoy et al. table in test_cli.py).
"""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from oodcorr.core.errors import ConfigError, DataError

from helpers import REPO

MICRO = REPO / "config/micro.yaml"


def list_bomb(levels: int) -> str:
    """The items of a flow mapping of anchored lists, each level ten aliases of the one before:
    10**levels values in the last."""
    parts = ["b0: &b0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return ", ".join(parts)


def micro_with_tiny_config(extra: str) -> str:
    """config/micro.yaml with ``extra`` (a flow mapping's items) added to the tiny model's config."""
    text = MICRO.read_text()
    old = "      config: {hidden_size: 32,"
    assert old in text
    return text.replace(old, "      config: {" + extra + ", hidden_size: 32,")


def deep(levels: int) -> str:
    return "{a: " * levels + "1" + "}" * levels


# ---- YAML files a user gives: refused before they are built ------------------------------------------------
def test_an_alias_bomb_in_a_yaml_file_is_refused_at_once_naming_the_file_and_line(tmp_path):
    """Ten lines that stand for a billion values: PyYAML builds them cheaply (shared objects), so the
    file read fine, and every reader after it (the schema check, the params, the budget) expanded it."""
    from oodcorr.core.io import load_yaml

    path = tmp_path / "registry.yaml"
    path.write_text("datasets:\n  x: {" + list_bomb(9) + "}\n")
    with pytest.raises(ConfigError) as e:
        load_yaml(path)
    assert re.fullmatch(
        rf"{re.escape(str(path))}:2: the file, at this line, holds more than 100,000 values once its YAML aliases "
        r"are expanded \(each \*alias counts as the block it repeats\); oodcorr reads at most 100,000 values in "
        r"one file or config: remove the aliases \(\*name\) that repeat this block, or write the values out once",
        str(e.value),
    ), str(e.value)


def test_a_yaml_file_nested_tens_of_thousands_deep_is_one_sentence_not_a_recursion_error(tmp_path):
    from oodcorr.core.io import load_yaml

    path = tmp_path / "deep.yaml"
    path.write_text("label_modes:\n  x: " + deep(20_000) + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml:2: the YAML here is nested more than 32 levels deep; oodcorr "):
        load_yaml(path)
    # block style, one level a line: line 32 holds the 33rd (the key of the 32nd mapping)
    path.write_text("".join("  " * i + "a:\n" for i in range(40)) + "  " * 40 + "b: 1\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml:32: the YAML here is nested more than 32 levels deep"):
        load_yaml(path)


def test_an_alias_to_the_block_that_holds_it_is_refused(tmp_path):
    """``&a [*a]`` is a list that holds itself: safe_load builds it, and every recursive reader loops."""
    from oodcorr.core.io import load_yaml

    path = tmp_path / "cycle.yaml"
    path.write_text("finetune:\n  x: &a [1, *a]\n")
    with pytest.raises(ConfigError, match=r"cycle\.yaml:2: \*a holds a YAML alias to a block that contains it"):
        load_yaml(path)


def test_aliases_within_the_budget_load_and_count_as_expanded(tmp_path):
    """Anchors are a fine way to share a block: a file under the budget loads as before."""
    from oodcorr.core import limits
    from oodcorr.core.io import load_yaml

    path = tmp_path / "ok.yaml"
    path.write_text(micro_with_tiny_config(list_bomb(3)))  # 1,000 values
    doc = load_yaml(path)
    assert len(doc["models"][0]["tiny"]["config"]["b3"]) == 10
    # the budget counts each alias as the block it repeats: b0 = 1 + 10, each level 1 + 10 x the one below
    b = doc["models"][0]["tiny"]["config"]
    assert limits._exact_size(b["b0"]) == 11 and limits._exact_size(b["b3"]) == 11_111
    with pytest.raises(limits.TooLarge):
        limits.check_tree(b, max_nodes=11_111)


def test_a_yaml_file_over_the_size_on_disk_is_refused_before_it_is_read(tmp_path):
    from oodcorr.core import limits

    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(ConfigError, match=r"big\.yaml: is 0\.0 MiB, more than the 0 MiB"):
        limits.load_yaml_checked(path, max_bytes=1000)


@pytest.mark.parametrize(
    "reader",
    ["hub lock", "profile", "registry", "label modes"],
)
def test_every_yaml_file_a_user_gives_is_read_within_the_budget(tmp_path, reader):
    """The config is not the only YAML a user gives: the registries, the label modes beside the
    workflow, the hub lock and a Snakemake profile are read with the same checks."""
    nested = deep(20_000)
    if reader == "hub lock":
        from oodcorr.modeling.hub import HubLock

        path = tmp_path / "x.lock.yaml"
        path.write_text(f"version: 1\nmodels: {nested}\n")
        refused = r"x\.lock\.yaml: not a readable lock file \(.*x\.lock\.yaml:2: the YAML here"
        with pytest.raises(ConfigError, match=refused):
            HubLock.read(path)
    elif reader == "profile":
        from oodcorr.launch.budget import read_profile

        (tmp_path / "config.yaml").write_text(f"default-resources: {nested}\n")
        with pytest.raises(ConfigError, match=r"config\.yaml:1: the YAML here is nested more than 32 levels deep"):
            read_profile(tmp_path)
        (tmp_path / "config.yaml").write_text("- executor: slurm\n")
        with pytest.raises(ConfigError, match=r"config\.yaml must map Snakemake options to values"):
            read_profile(tmp_path)
    else:
        from oodcorr.planning.plan import load
        from oodcorr.planning.schema import read_config

        config = read_config(MICRO)
        basedir = REPO
        if reader == "registry":
            path = tmp_path / "bomb-registry.yaml"
            path.write_text("datasets:\n  bomb: {" + list_bomb(9) + "}\n")
            config["registries"] = [*config["registries"], str(path)]
        else:  # label modes are read from the workflow folder: a copy of it whose label modes are a bomb
            basedir = tmp_path / "wf"
            (basedir / "config").mkdir(parents=True)
            (basedir / "resources").mkdir()
            (basedir / "config/schema.yaml").write_text((REPO / "config/schema.yaml").read_text())
            (basedir / "resources/datasets").symlink_to(REPO / "resources/datasets")
            path = basedir / "resources/label_modes.yaml"
            path.write_text("binary: {" + list_bomb(9) + "}\n")
            config["registries"] = [str(REPO / r) for r in config["registries"]]
        with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}:\d+: the file, at this line, holds more than"):
            load(config, basedir, sources=[MICRO])


# ---- a config Snakemake has already read ---------------------------------------------------------------------
def test_planning_refuses_an_alias_bomb_naming_the_key_file_and_line(tmp_path):
    """Snakemake reads --configfile itself: an alias is one shared object, so the config arrives
    whole. Planning (plan.load, which the Snakefile and every command call) measures it before the
    schema check or anything else walks it. A million values: before this, planning expanded them."""
    from oodcorr.planning.plan import load

    path = tmp_path / "bomb.yaml"
    path.write_text(micro_with_tiny_config(list_bomb(6)))
    config = yaml.safe_load(path.read_text())  # as Snakemake hands it over: aliases shared, nothing checked
    with pytest.raises(ConfigError) as e:
        load(config, REPO, sources=[path])
    msg = str(e.value)
    assert msg.startswith(f"{path}:21: models[micro-opt].tiny.config.b4: holds 111,111 values once its YAML "), msg
    assert "oodcorr reads at most 100,000 values in one file or config" in msg


def test_planning_refuses_a_deep_config_naming_the_key(tmp_path):
    from oodcorr.planning.plan import load

    path = tmp_path / "deep.yaml"
    path.write_text(micro_with_tiny_config("rope: " + deep(200)))
    config = yaml.safe_load(path.read_text())
    with pytest.raises(ConfigError) as e:
        load(config, REPO, sources=[path])
    assert re.match(
        rf"{re.escape(str(path))}:21: models\[micro-opt\]\.tiny\.config\.rope(\.a)+\.\.\.: the config is nested 206 "
        r"levels deep; oodcorr reads at most 32 levels of mappings and lists inside each other: flatten it",
        str(e.value),
    ), str(e.value)


def test_planning_refuses_a_config_that_holds_itself():
    from oodcorr.planning.plan import load

    config = yaml.safe_load(MICRO.read_text())
    loop: list = [1]
    loop.append(loop)
    config["models"][0]["tiny"]["config"]["loop"] = loop
    with pytest.raises(ConfigError, match=r"^models\[micro-opt\]\.tiny\.config\.loop\[1\]: holds a YAML alias to "):
        load(config, REPO)


def test_budget_refuses_a_bomb_in_one_line_and_exits_2(tmp_path, caplog):
    """`oodcorr budget` read the config, planned it and wrote its JSON: all of it expanded."""
    from oodcorr.cli import main

    for name, text in (("bomb", micro_with_tiny_config(list_bomb(6))), ("deep", micro_with_tiny_config(deep(5000)))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            rc = main(["budget", "--configfile", str(path), "--workflow", str(REPO), "--out", str(tmp_path / name)])
        assert rc == 2
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].startswith(f"{path}:21: "), errors
        assert "\n" not in errors[0] and not list(tmp_path.glob(f"{name}.*json"))


def test_the_shipped_yaml_files_are_far_inside_the_budgets():
    """The limits refuse no real file: every shipped config, registry, label mode file and profile is
    read with the checks, and holds under a tenth of the values and half the depth allowed."""
    from oodcorr.core import limits
    from oodcorr.core.io import load_yaml

    files = [
        *sorted((REPO / "config").glob("*.yaml")),
        *sorted((REPO / "resources").rglob("*.yaml")),
        *sorted((REPO / "profiles").glob("*/config.yaml")),
        REPO / "benchmarks/dag_grid.yaml",
    ]
    assert len(files) > 10
    for f in files:
        doc = load_yaml(f)
        memo = limits._measure(doc, limits.MAX_NODES)
        n, depth = memo[id(doc)]
        assert n * 10 < limits.MAX_NODES and depth * 2 < limits.MAX_DEPTH, (f, n, depth)


# ---- the analysis: an estimate, and a refusal above the limit ------------------------------------------------
def _wide(path: Path, n_ood: int, n_units: int = 12) -> Path:
    import numpy as np

    rng = np.random.default_rng(0)
    cols = {"step": list(range(0, 10 * n_units, 10)), "mnli": rng.random(n_units)}
    cols.update({f"ood{j}": rng.random(n_units) for j in range(n_ood)})
    pd.DataFrame(cols).to_csv(path, index=False)
    return path


def test_analyse_says_how_many_cells_and_refuses_above_max_cells(tmp_path, caplog):
    from oodcorr.cli import main

    table = _wide(tmp_path / "wide.csv", 30)  # 435 pairs
    args = ["analyse", str(table), "--format", "wide", "--in-domain", "mnli", "--no-plots"]
    with caplog.at_level(logging.INFO):
        rc = main([*args, "--methods", "pearson", "spearman", "--max-cells", "800", "--out", str(tmp_path / "a")])
    assert rc == 2
    assert (
        f"the analysis of {table} would compute 870 cells (435 OOD pair(s) summed over 1 run(s) x 2 method(s) x 1 "
        "residualiser(s)), more than the 800 that --max-cells allows (time and memory grow with the cells: millions "
        "run for tens of minutes). Analyse fewer (--testsets, --exclude, --methods or --residualisers), or pass "
        "--max-cells 870 to run it anyway"
    ) in caplog.text
    assert not (tmp_path / "a").exists()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert main([*args, "--max-cells", "435", "--out", str(tmp_path / "b")]) == 0
    assert "analysing 435 cells (435 OOD pair(s) summed over 1 run(s) x 1 method(s) x 1 residualiser(s))" in (
        caplog.text
    )
    assert len(pd.read_csv(tmp_path / "b/partial_correlations.csv")) == 2 * 435  # the run and the pooled row


def test_analyse_refuses_two_thousand_testsets_by_default(tmp_path, caplog):
    """About two million pairs: tens of minutes and gigabytes, refused before any is computed."""
    from oodcorr.cli import main

    table = _wide(tmp_path / "huge.csv", 2000, n_units=6)
    with caplog.at_level(logging.ERROR):
        rc = main(["analyse", str(table), "--format", "wide", "--in-domain", "mnli", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "would compute 1,999,000 cells" in caplog.text and "--max-cells (its default) allows" in caplog.text
    assert "pass --max-cells 1999000 to run it anyway" in caplog.text


def test_planning_refuses_an_analysis_above_analysis_max_cells_and_raising_it_reruns_nothing():
    from oodcorr.planning.plan import load

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
    from oodcorr.planning.checks import check_analysis_size
    from oodcorr.planning.plan import Run

    testsets = {"mnli": (("mnli", "in-domain"), *((f"t{i}", "ood") for i in range(2000)))}
    runs = [Run("m", "mnli", 64, s, (0, 4, 8), 8) for s in range(3)]
    with pytest.raises(ConfigError, match=r"would compute 5,997,000 cells \(5,997,000 OOD pair\(s\) summed over 3 "):
        check_analysis_size(runs, testsets, {})
    check_analysis_size(runs, testsets, {"max_cells": 5_997_000})  # asked for: planned


def test_max_cells_is_a_positive_integer():
    """max_cells is an integer of at least 1, like every count in the schema."""
    from oodcorr.planning.plan import load

    cfg = yaml.safe_load(MICRO.read_text())
    cfg["analysis"]["max_cells"] = 0
    with pytest.raises(ConfigError, match=r"analysis\.max_cells: 0 is less than the minimum of 1"):
        load(cfg, REPO, sources=[MICRO])


def test_an_analysis_size_error_is_a_data_error_in_the_cli(tmp_path):
    """What main() turns into one line and exit status 2 (not a traceback)."""
    from oodcorr.cli.analyse import check_analysis_size

    long = pd.DataFrame(
        {"model": "m", "in_domain": "z", "run": "r", "unit": 0, "testset": ["z", "a", "b", "c"], "score": 0.5}
    )
    assert check_analysis_size(long, ["pearson"], ["linear"], 3) == 3
    with pytest.raises(DataError, match=r"would compute 3 cells"):
        check_analysis_size(long, ["pearson"], ["linear"], 2)
