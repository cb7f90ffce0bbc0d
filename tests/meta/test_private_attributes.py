"""No underscore attribute of Snakemake or its plugins is set or read (issue 53): the code that holds
their objects (the Snakefile, the rules, their scripts, oodcorr's launch and cli layers) reaches them
by public names only, so that a plugin release cannot break it in silence. What the SLURM watcher
still needs of their public internals is listed in docs/gpus-and-slurm.md."""

import ast
import re

from helpers import REPO

# a private name of another object: `x._name` (x not self or cls), or a getattr/setattr/hasattr/delattr
# of a "_name" string; dunders are Python's own
_DOTTED = re.compile(r"\b(?!self\b|cls\b)[A-Za-z_]\w*\s*\.\s*_(?!_)\w+")
_BY_NAME = ("getattr", "setattr", "hasattr", "delattr")
ALLOWED = {"os._exit"}  # the standard library's


def _python_hits(text: str) -> list[str]:
    hits = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner not in ("self", "cls") and f"{owner}.{node.attr}" not in ALLOWED:
                hits.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _BY_NAME:
            arg = node.args[1] if len(node.args) > 1 else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and re.match(r"_(?!_)", arg.value):
                hits.append(f"line {node.lineno}: {ast.unparse(node)}")
    return hits


def _snakemake_hits(text: str) -> list[str]:
    """The Snakefile and rule files are not Python to ast: their lines, comments left out."""
    hits = []
    for k, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0]
        hits += [f"line {k}: {m.group(0)}" for m in _DOTTED.finditer(code) if m.group(0) not in ALLOWED]
        hits += [f"line {k}: {code.strip()}" for f in _BY_NAME if re.search(rf"{f}\([^,]+,\s*[\"']_(?!_)", code)]
    return hits


def test_the_check_finds_what_it_looks_for():
    assert _python_hits('executor._fallback_account_arg = ""\nself._x = 1\nos._exit(0)\n') == [
        "line 1: executor._fallback_account_arg"
    ]
    assert _python_hits('getattr(executor, "_fallback_account_arg", "")') != []
    assert _snakemake_hits("_x = workflow._onstart  # not self._y\nself._z\n") == ["line 1: workflow._onstart"]
    assert _snakemake_hits('getattr(workflow, "_scheduler")') != []


def test_no_private_attribute_of_snakemake_or_its_plugins_is_used():
    found = {}
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]:
        found[path] = _snakemake_hits(path.read_text(encoding="utf-8"))
    py = [*(REPO / "workflow/scripts").glob("*.py"), *(REPO / "src/oodcorr/launch").glob("*.py")]
    py += [*(REPO / "src/oodcorr/cli").glob("*.py")]
    for path in sorted(py):
        found[path] = _python_hits(path.read_text(encoding="utf-8"))
    found = {str(p.relative_to(REPO)): h for p, h in found.items() if h}
    assert found == {}
