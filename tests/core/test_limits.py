"""Size budgets checked before any work (oodcorr.core.limits; issue 25, class 5): YAML files and configs.

An attacker's config: a YAML alias bomb in a free-form mapping (ten lines standing for a billion
values), a mapping nested tens of thousands deep, an alias to the block that holds it. Each is
refused at once with a sentence naming the file (and line) or the key, the limit and what to do;
nothing real is refused (the shipped configs, the paper's grid). The analysis' size limit (a
table of 2,000 testsets): tests/cli/test_analyse.py and tests/planning/test_checks.py.
"""

from __future__ import annotations

import logging
import re

import pytest
import yaml

from oodcorr.core.errors import ConfigError

from helpers import MICRO, REPO


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
    from oodcorr.core.yaml_files import load_yaml

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
    from oodcorr.core.yaml_files import load_yaml

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
    from oodcorr.core.yaml_files import load_yaml

    path = tmp_path / "cycle.yaml"
    path.write_text("finetune:\n  x: &a [1, *a]\n")
    with pytest.raises(ConfigError, match=r"cycle\.yaml:2: \*a holds a YAML alias to a block that contains it"):
        load_yaml(path)


def test_aliases_within_the_budget_load_and_count_as_expanded(tmp_path):
    """Anchors are a fine way to share a block: a file under the budget loads as before."""
    from oodcorr.core import limits
    from oodcorr.core.yaml_files import load_yaml

    path = tmp_path / "ok.yaml"
    path.write_text(micro_with_tiny_config(list_bomb(3)))  # 1,000 values
    doc = load_yaml(path)
    assert len(doc["models"][0]["tiny"]["config"]["b3"]) == 10
    # the budget counts each alias as the block it repeats: b0 = 1 + 10, each level 1 + 10 x the one below
    b = doc["models"][0]["tiny"]["config"]
    assert [limits._measure(b[k], 10**30)[id(b[k])][0] for k in ("b0", "b3")] == [11, 11_111]
    with pytest.raises(limits.TooLarge):
        limits.check_tree(b, max_nodes=11_111)


def test_a_yaml_file_over_the_size_on_disk_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from oodcorr.core import yaml_files

    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 2000 + "\n")
    monkeypatch.setattr(yaml_files, "MAX_YAML_BYTES", 1000)
    with pytest.raises(ConfigError, match=r"big\.yaml: is 0\.0 MiB, more than the 0 MiB"):
        yaml_files.load_yaml(path)


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
    from oodcorr.core.yaml_files import load_yaml

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
