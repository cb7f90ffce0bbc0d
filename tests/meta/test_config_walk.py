"""One way for a config value (issue 55): the analysis defaults are filled in once, where the config
is validated, and benchmarks/config_walk.py's count of how far the section travels does not grow."""

from __future__ import annotations

import ast
import importlib.util

from helpers import REPO


def _walk_module():
    spec = importlib.util.spec_from_file_location("config_walk", REPO / "benchmarks/config_walk.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_defaults_are_filled_in_one_place():
    """`filled` is called by `schema.fill_defaults` (and by itself, for nested sections), nowhere else."""
    callers = set()
    for path in sorted((REPO / "src/oodcorr").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "filled"
                ):
                    callers.add(f"{path.relative_to(REPO / 'src/oodcorr')}:{fn.name}")
    assert callers == {"planning/schema.py:fill_defaults", "core/defaults.py:filled"}


def test_the_analysis_section_travels_no_further(capsys):
    """The walk's numbers in docs/development.md: at most 12 stays and 5 returns (issue 55), along the
    way that is known (it cannot pass by finding nothing)."""
    _walk_module().main(["--list"])
    out = capsys.readouterr().out.splitlines()
    stays = [line.split()[-1] for line in out[:-1]]
    returns = sum(1 for line in out[:-1] if line.split()[0] == "return")
    assert {
        "oodcorr.planning.plan:load",
        "oodcorr.planning.schema:fill_defaults",
        "oodcorr.planning.plan:build_plan",
        "oodcorr.planning.config:analysis_options",
        "script:partial_correlations:<script>",
    } <= set(stays)
    assert len(stays) <= 12 and returns <= 5, out
    assert out[-1].startswith(f"analysis: {len(stays)} stays in ") and f", {returns} returns, " in out[-1]
