"""The package's folders and the imports between them, checked statically (issues 17 and 22).

``src/oodcorr`` has one folder per responsibility (:data:`FOLDERS`; docs/development.md#layout
describes each). The rule: a module may import a module of its own folder or of a folder that
its folder's entry in :data:`FOLDERS` names, nothing else, and the module graph has no cycle.
The folders are groups by responsibility, not by what each module happens to import: a module
that imports nothing (``jobs/metrics``) still sits with the jobs that use it.

Every import of an ``oodcorr`` module, at module level or inside a function, is read from the
source with ``ast`` (nothing is imported). An import kept inside a function (of an oodcorr module
or a heavy library) says why on its line or the line above, so a reader can tell "keeps torch
out of planning" from "hides a cycle". Imports under ``if TYPE_CHECKING:`` count as edges too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

SRC = REPO / "src"
PKG = SRC / "oodcorr"

# folder -> the folders its modules may import (besides their own)
FOLDERS: dict[str, set[str]] = {
    # stdlib-only helpers: errors, atomic/verified IO, job records, defaults, locks, GPU claims
    "core": set(),
    # the statistics: pandas/numpy/scipy, never torch-side code
    "analysis": {"core"},
    # the config, its schema and checks, the plan; never a model or a job
    "planning": {"core"},
    # loading, adapting and prompting models, the offline stand-ins, the hub
    "modeling": {"core"},
    # what the rules run
    "jobs": {"core", "analysis", "planning", "modeling"},
    # what runs when a person or Snakemake starts: planning-time checks, sizing, budget, runtime
    "launch": {"core", "planning", "modeling"},
    # the command line: everything
    "cli": {"core", "analysis", "planning", "modeling", "jobs", "launch"},
}

# analysis/'s rooms (subpackages, and its top-level modules), in an order in which each imports only
# those before it (docs/development.md#layout)
ANALYSIS_ROOMS = [
    "readers", "cell", "items", "across", "options", "per_run", "pipeline", "results", "simulate", "design",
]  # fmt: skip

HEAVY = ("torch", "transformers", "peft", "datasets", "accelerate", "tokenizers")
# what the Snakefile imports, read from it (checked against the file below)
SNAKEFILE_IMPORT = re.compile(r"^from (oodcorr[\w.]*) import", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _short(mod: str) -> str:
    return mod[len("oodcorr.") :] if mod.startswith("oodcorr.") else mod


def _folder_of(short: str) -> str:
    top = short.split(".")[0]
    if top in FOLDERS:
        return top
    raise AssertionError(f"oodcorr.{short} is in no folder of tests/meta/test_layers.py: move it into one")


def _imports(path: Path) -> list[tuple[int, bool, str]]:
    """(line, inside a function, imported module) for each oodcorr or heavy import in ``path``."""
    mod = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    in_fn: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_fn.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                pkg = ".".join(base + ([node.module] if node.module else []))
            else:
                pkg = node.module or ""
            # "from oodcorr.jobs import metrics" imports the module oodcorr.jobs.metrics
            folder = SRC.joinpath(*pkg.split("."))
            subs = (
                [
                    f"{pkg}.{a.name}"
                    for a in node.names
                    if (folder / f"{a.name}.py").exists() or (folder / a.name).is_dir()
                ]
                if pkg.startswith("oodcorr") and folder.is_dir()
                else []
            )
            targets = subs or [pkg]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for t in targets:
            if t.startswith("oodcorr") or t.split(".")[0] in HEAVY:
                out.append((node.lineno, id(node) in in_fn, t))
    return sorted(out)


FILES = sorted(PKG.rglob("*.py"))


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for f in FILES:
        src = _short(_module_name(f))
        graph.setdefault(src, set())
        for _, _, t in _imports(f):
            if t.startswith("oodcorr.") and t != "oodcorr":
                graph[src].add(_short(t))
    return graph


def test_the_package_is_its_folders():
    """Every module is in one of the folders, each folder says what lives there and what it may
    import in a docstring-only __init__.py, and the folders are the ones declared here."""
    tops = {p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert tops == set(FOLDERS)
    assert {p.name for p in PKG.glob("*.py")} == {"__init__.py"}
    for folder in tops:
        init = PKG / folder / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree) or ""
        assert len(doc) > 80 and "import" in doc, f"{init}: say what lives here and what it may import"
        # the statistics' public API is its package (oodcorr.analysis); the command line's entry point
        # is oodcorr.cli:main (pyproject.toml)
        if folder not in ("analysis", "cli"):
            assert len(tree.body) == 1, f"{init}: a docstring only"
    for f in FILES:
        if _module_name(f) != "oodcorr":
            _folder_of(_short(_module_name(f)))


def test_no_module_imports_a_folder_it_may_not():
    found = []
    for src, targets in _edges().items():
        if src == "oodcorr":
            continue
        mine = _folder_of(src)
        for t in targets:
            theirs = _folder_of(t)
            if theirs != mine and theirs not in FOLDERS[mine]:
                allowed = sorted(FOLDERS[mine]) or "nothing"
                found.append(f"  oodcorr.{src} -> oodcorr.{t} ({mine}/ may import {allowed})")
    assert not found, "imports across folders that the folders' rule forbids:\n" + "\n".join(sorted(found))


def test_the_analysis_rooms_import_one_way():
    rooms = {p.stem for p in (PKG / "analysis").iterdir() if p.name != "__init__.py" and not p.name.startswith(".")}
    assert rooms - {"__pycache__"} == set(ANALYSIS_ROOMS), "a room of analysis/ is missing from ANALYSIS_ROOMS"
    order = {room: i for i, room in enumerate(ANALYSIS_ROOMS)}
    found = []
    for src, targets in _edges().items():
        if not src.startswith("analysis."):
            continue
        mine = src.split(".")[1]
        for t in targets:
            theirs = t.split(".")[1] if t.startswith("analysis.") else None
            if theirs and order[theirs] > order[mine]:
                found.append(f"  oodcorr.{src} -> oodcorr.{t} ({mine} comes before {theirs})")
    assert not found, "analysis/ rooms importing a later room:\n" + "\n".join(sorted(found))


def test_the_folders_form_no_cycle():
    """The allowed imports between folders are themselves a hierarchy."""
    state: dict[str, int] = {}

    def visit(n: str) -> None:
        state[n] = 1
        for m in FOLDERS[n]:
            assert state.get(m) != 1, f"folders import each other: {n} <-> {m}"
            if not state.get(m):
                visit(m)
        state[n] = 2

    for n in FOLDERS:
        if not state.get(n):
            visit(n)


def test_no_import_cycles():
    graph = _edges()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m == n or m.startswith(n + "."):
                continue  # a package importing its own submodules
            if state.get(m) == 1:
                cyc = stack[stack.index(m) :] + [m]
                pytest.fail("import cycle: " + " -> ".join(cyc))
            if not state.get(m):
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n)


def test_analysis_never_imports_torch():
    for f in sorted((PKG / "analysis").rglob("*.py")):
        for line, _, t in _imports(f):
            assert t.split(".")[0] not in HEAVY, f"{f.relative_to(SRC)}:{line} imports {t}"


def _snakefile_imports() -> list[str]:
    return SNAKEFILE_IMPORT.findall((REPO / "Snakefile").read_text())


def _reachable(start: list[str]) -> set[str]:
    """Every oodcorr module that importing ``start`` can load, following every import statement,
    those inside functions included (so no job module is kept out only by an import's place)."""
    graph = _edges()
    seen: set[str] = set()
    todo = [_short(s) for s in start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(graph.get(m, ()))
        # a package's __init__ runs before any of its modules
        parent = m.rsplit(".", 1)[0] if "." in m else None
        if parent:
            todo.append(parent)
    return seen


def test_planning_reaches_no_job_module():
    """What the Snakefile imports to plan can reach no module of jobs/, through any import
    statement, at module level or inside a function; and importing it loads no torch."""
    imported = _snakefile_imports()
    assert "oodcorr.launch.snakefile" in imported and len(imported) >= 3, imported
    assert "planning.plan" in _reachable(imported)  # (short names: without "oodcorr.")
    reached = _reachable(imported)
    jobs = sorted(m for m in reached if _folder_of(m) == "jobs")
    assert not jobs, f"the Snakefile's imports reach job modules: {jobs}"
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in imported)
        + "print(' '.join(m for m in sys.modules if m.startswith('oodcorr.jobs') or m.split('.')[0] in "
        + repr(HEAVY)
        + "))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC)
    assert out.stdout.split() == [], out.stdout


def test_the_reach_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    # a launch module whose function imports a job module: reached, though no import at load time runs it
    pkg = tmp_path / "oodcorr"
    for d in ("launch", "jobs"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text('"""x"""\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "launch" / "a.py").write_text("def f():\n    from ..jobs import b  # why\n")
    (pkg / "jobs" / "b.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(pkg.rglob("*.py")))
    assert "jobs.b" in _reachable(["oodcorr.launch.a"])


def test_function_level_imports_say_why():
    """An import inside a function says why in a comment on its line or just above its group."""
    missing = []
    for f in FILES:
        lines = f.read_text().splitlines()
        for line, inside, t in _imports(f):
            if not inside:
                continue
            # the reason is on the line, on the first line of its run of imports, or just above it
            i = line - 2
            while i >= 0 and lines[i].strip().startswith(("import ", "from ")) and "#" not in lines[i]:
                i -= 1
            above = lines[i].strip() if i >= 0 else ""
            first_of_run = above.startswith(("import ", "from ")) and "#" in above
            if "#" not in lines[line - 1] and not above.startswith("#") and not first_of_run:
                missing.append(f"{f.relative_to(SRC)}:{line} imports {t} inside a function without a '# why'")
    assert not missing, "\n".join(missing)


def test_the_checker_sees_imports_inside_functions(tmp_path, monkeypatch):
    # the parser itself: a function-level relative import is found and flagged as such
    pkg = tmp_path / "oodcorr" / "jobs"
    pkg.mkdir(parents=True)
    body = "import os\n\ndef f():\n    from ..planning.config import ConfigError\n    import torch\n"
    (pkg / "x.py").write_text(body)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert _imports(pkg / "x.py") == [(4, True, "oodcorr.planning.config"), (5, True, "torch")]


def test_job_modules_import_nothing_only_planning_needs():
    """An evaluation or finetune process pays for every module its imports load, once per job
    (benchmarks/README.md, section 9). Importing the job modules must not load what only
    planning uses (the schema validator, Snakemake) or the tables library; torch comes lazily."""
    code = (
        "import sys, oodcorr.jobs.evaluate, oodcorr.jobs.tokenize_testset, oodcorr.jobs.finetune, "
        "oodcorr.planning.finetune_job, oodcorr.jobs.series_checkpoint; "
        "print(' '.join(m for m in ('jsonschema', 'snakemake', 'pandas', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC)
    assert out.stdout.split() == [], out.stdout
