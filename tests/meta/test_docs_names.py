"""The names the docs give the code resolve, and the layer table is the one the layer test enforces.

What counts as a claim:
* a dotted name ``oodcorr.<module>[.<object>[.<attribute>]]`` anywhere in README.md, docs/,
  benchmarks/ or config/ (prose, code, docstrings and comments alike): the module exists under
  ``src/``, the object is defined at its top level (a function, class, assignment or import),
  and an attribute after a class is defined in that class's body;
  A name a module only imports does not count (the docs name a thing's home), except in a
  package's ``__init__.py``, whose imports are the package's public names;
* a path ``src/...`` anywhere in those files: it exists (a glob matches something). A path of
  another repository is written with its name first (``DL2024:src/train.py``) and not checked;
* docs/development.md's layer table: one row per folder of tests/meta/test_layers.py's ``FOLDERS``, whose
  last column names (in backticks) exactly the folders that folder may import.

Everything is read with ``ast`` and regular expressions; nothing of the package is imported.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from test_layers import FOLDERS

from helpers import REPO

SRC = REPO / "src"
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".txt", ".rst"}
DOTTED = re.compile(r"(?<![\w./-])oodcorr(?:\.[A-Za-z_]\w*)+")
SRC_PATH = re.compile(r"(?<![\w./:-])src/[\w./*-]*\w")


def documents() -> list[Path]:
    """README.md and every text file under docs/, benchmarks/ (not its raw results) and config/."""
    out = [REPO / "README.md"]
    for root in ("docs", "benchmarks", "config"):
        out += [
            f
            for f in sorted((REPO / root).rglob("*"))
            if f.is_file() and f.suffix in TEXT_SUFFIXES and "latest" not in f.relative_to(REPO).parts
        ]
    return out


@functools.cache
def modules() -> dict[str, Path]:
    """{dotted module name: its file} for every module and package under src/."""
    out = {}
    for f in SRC.rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _bound_names(body: list[ast.stmt], imports: bool = True) -> dict[str, ast.AST]:
    """The names a module or class body binds, each with the node that binds it."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):  # definitions under `if TYPE_CHECKING:` / try-import
            for inner in (node.body, getattr(node, "orelse", []), *[h.body for h in getattr(node, "handlers", [])]):
                names.update(_bound_names(inner, imports))
    return names


@functools.cache
def _module_names(path: Path) -> dict[str, ast.AST]:
    return _bound_names(ast.parse(path.read_text(encoding="utf-8"), str(path)).body, path.name == "__init__.py")


def unresolved(dotted: str) -> str | None:
    """Why ``dotted`` names nothing in src/, or None when it resolves."""
    parts = dotted.split(".")
    mods = modules()
    i = max(k for k in range(1, len(parts) + 1) if ".".join(parts[:k]) in mods or k == 1)
    module = ".".join(parts[:i])
    if module not in mods:
        return "no such module"
    rest = parts[i:]
    names = _module_names(mods[module])
    for k, name in enumerate(rest):
        if name not in names:
            where = module if k == 0 else ".".join([module, *rest[:k]])
            return f"{where} defines no {name!r}"
        node = names[name]
        if k + 1 < len(rest):
            if not isinstance(node, ast.ClassDef):
                return f"{'.'.join([module, *rest[: k + 1]])} is not a class, so it has no {rest[k + 1]!r}"
            names = _bound_names(node.body)
    return None


def dotted_names(path: Path) -> set[str]:
    return set(DOTTED.findall(path.read_text(encoding="utf-8", errors="replace")))


def src_paths(path: Path) -> set[str]:
    return {p.rstrip(".") for p in SRC_PATH.findall(path.read_text(encoding="utf-8", errors="replace"))}


def test_dotted_names_in_the_docs_resolve():
    seen, bad = 0, []
    for doc in documents():
        for name in sorted(dotted_names(doc)):
            seen += 1
            why = unresolved(name)
            if why:
                bad.append(f"{doc.relative_to(REPO)}: {name}: {why}")
    assert seen >= 20  # the check sees the docs' names (there are dozens)
    assert bad == []


def test_src_paths_in_the_docs_exist():
    seen, bad = 0, []
    for doc in documents():
        for p in sorted(src_paths(doc)):
            seen += 1
            hit = list(REPO.glob(p)) if any(c in p for c in "*?[") else [REPO / p] if (REPO / p).exists() else []
            if not hit:
                bad.append(f"{doc.relative_to(REPO)}: {p}: no such file or folder")
    assert seen >= 10
    assert bad == []


def test_the_resolver_can_fail():
    """A misspelt module, a missing function and an attribute of a non-class are each found."""
    assert unresolved("oodcorr.analysis.across.agreement_table.agreement") is None
    assert unresolved("oodcorr.analysis") is None
    assert unresolved("oodcorr.analysis.consensuss") == "oodcorr.analysis defines no 'consensuss'"
    assert "defines no 'no_such_function'" in unresolved("oodcorr.analysis.across.consensus.no_such_function")
    assert "is not a class" in unresolved("oodcorr.analysis.across.agreement_table.agreement.x")
    assert unresolved("oodcorx.core") == "no such module"
    # imported, not defined there: the docs must name its home
    assert unresolved("oodcorr.analysis.across.consensus.np") == "oodcorr.analysis.across.consensus defines no 'np'"
    assert DOTTED.findall("envs/oodcorr.yaml") == [] and SRC_PATH.findall("DL2024:src/train.py") == []
    assert DOTTED.findall("see oodcorr.core.yaml_files.load_yaml. Then") == ["oodcorr.core.yaml_files.load_yaml"]
    assert SRC_PATH.findall("(`src/oodcorr/core/io.py`).") == ["src/oodcorr/core/io.py"]


LAYER_ROW = re.compile(r"^\|\s*`(\w+)/?(?:\.py)?`\s*\|.*\|\s*([^|]*?)\s*\|\s*$", re.M)


def layer_table(text: str) -> dict[str, set[str]]:
    """{folder: the folders its row's last column names} from docs/development.md's layer table."""
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return {folder: set(re.findall(r"`(\w+)`", imports)) for folder, imports in LAYER_ROW.findall(section)}


def test_the_layer_table_is_the_one_the_layer_test_enforces():
    table = layer_table((REPO / "docs" / "development.md").read_text(encoding="utf-8"))
    assert table == FOLDERS


def test_the_layer_table_reader_sees_a_change():
    text = "## Layout\n\n| folder | what | imports |\n| --- | --- | --- |\n| `core/` | x | nothing above |\n"
    text += "| `jobs/` | y | `core`, `analysis` |\n\n## Next\n| `launch/` | z | `core` |\n"
    assert layer_table(text) == {"core": set(), "jobs": {"core", "analysis"}}
