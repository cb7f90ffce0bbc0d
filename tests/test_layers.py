"""The package's import order, checked statically (issue 17).

Every import of an ``oodcorr`` module, at module level or inside a function, is read from the
source with ``ast`` (nothing is imported) and checked against :data:`LAYERS`: a module may import
its own layer or a lower one, never a higher one, and the module graph has no cycle. An import
kept inside a function (of an oodcorr module or a heavy library) says why on its line or the
line above, so a reader can tell "keeps torch out of planning" from "hides a cycle".
Imports under ``if TYPE_CHECKING:`` count as edges too: a name needed only for annotations still
couples the two modules, and an upward one would hide a cycle the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PKG = SRC / "oodcorr"

# Lowest first. A module belongs to the lowest layer whose modules it needs; the comment says why.
LAYERS: list[tuple[str, list[str]]] = [
    # stdlib-only helpers everything may use: the error types users see, atomic/verified file IO,
    # folder locks, GPU claims. They import no other oodcorr module.
    ("base", ["errors", "io", "defaults", "model_dirs", "locks", "gpus", "ranks"]),
    # the statistics: pandas/numpy/scipy only, reads tables through io; never torch-side code
    ("analysis", ["analysis", "analysis.*"]),
    # the validated config and the plan built from it: what runs, on what, with which params.
    # checks are the plan's semantic checks of the config alone (plan calls them while building);
    # those that read tokenizers or job outputs are disk_checks, in the launch layer.
    # finetune_job: one run's finetuning as a typed object (the rule builds it from the plan's params)
    ("plan", ["config", "schema", "checks", "plan", "finetune_job"]),
    # how a model is loaded, scored and prompted; tiny and synthetic build the offline stand-ins;
    # hub: which commit a model or dataset loads (the lock) and prefetching it, which sizes a
    # model on the meta device through its method (so above methods, below data and finetune)
    ("models", ["models", "methods", "prompting", "tiny", "synthetic", "hub"]),
    # checkpoint manifests, verification, resume points, run identity: written by finetune,
    # read by evaluate (its own module so evaluation does not reach into the trainer)
    ("checkpoints", ["checkpoints"]),
    # the jobs the rules run: prepare data, finetune (one or many processes), evaluate,
    # series checkpoints, aggregate scores, metrics on predictions, figures
    ("jobs", ["data", "metrics", "series", "finetune", "distributed", "evaluate", "aggregate", "plots"]),
    # what a person or Snakemake starts: planning checks of what is on disk (tokenizers, job
    # outputs), GPU sizing and the disk/time budget (from the hub and the models), per-job
    # runtime set-up, the report, the CLI
    ("launch", ["disk_checks", "sizing", "budget", "runtime", "report", "cli"]),
]

HEAVY = ("torch", "transformers", "peft", "datasets", "accelerate", "tokenizers")
TORCH_SIDE = {
    "models",
    "methods",
    "prompting",
    "tiny",
    "checkpoints",
    "data",
    "finetune",
    "distributed",
    "evaluate",
    "series",
    "hub",
    "sizing",
    "runtime",
}

# Imports that still go upward, each with why it is not fixed yet. The test fails if one is
# fixed (remove it here) or a new one appears. Keep this list shrinking.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _short(mod: str) -> str:
    return mod[len("oodcorr.") :] if mod.startswith("oodcorr.") else mod


def _layer_of(short: str) -> int:
    for i, (_, mods) in enumerate(LAYERS):
        for m in mods:
            if short == m or (m.endswith(".*") and short.startswith(m[:-1])):
                return i
    raise AssertionError(f"oodcorr.{short} is in no layer of tests/test_layers.py: add it where it belongs")


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
            # "from oodcorr import metrics" imports the module oodcorr.metrics
            subs = (
                [
                    f"{pkg}.{a.name}"
                    for a in node.names
                    if (PKG / a.name).with_suffix(".py").exists() or (PKG / a.name).is_dir()
                ]
                if pkg == "oodcorr"
                else []
            )
            if pkg == "oodcorr.analysis":
                subs = [f"{pkg}.{a.name}" for a in node.names if (PKG / "analysis" / f"{a.name}.py").exists()]
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


def test_every_module_has_a_layer():
    for f in FILES:
        if _module_name(f) != "oodcorr":
            _layer_of(_short(_module_name(f)))


def test_no_module_imports_a_higher_layer():
    found = {}
    for src, targets in _edges().items():
        if src == "oodcorr":
            continue
        for t in targets:
            if _layer_of(t) > _layer_of(src):
                found[(src, t)] = f"{LAYERS[_layer_of(src)][0]} -> {LAYERS[_layer_of(t)][0]}"
    new = {k: v for k, v in found.items() if k not in KNOWN_UPWARD}
    assert not new, "imports that go up a layer:\n" + "\n".join(
        f"  oodcorr.{a} -> oodcorr.{b} ({v})" for (a, b), v in sorted(new.items())
    )
    fixed = sorted(set(KNOWN_UPWARD) - set(found))
    assert not fixed, f"fixed, remove from KNOWN_UPWARD: {fixed}"


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


def test_analysis_never_imports_torch_side_code():
    for f in sorted((PKG / "analysis").rglob("*.py")):
        for line, _, t in _imports(f):
            top = t.split(".")[0]
            assert top not in HEAVY, f"{f.relative_to(SRC)}:{line} imports {t}"
            assert _short(t) not in TORCH_SIDE, f"{f.relative_to(SRC)}:{line} imports {t}"


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


def test_the_checker_sees_imports_inside_functions(tmp_path):
    # the parser itself: a function-level relative import is found and flagged as such
    pkg = tmp_path / "oodcorr"
    pkg.mkdir()
    (pkg / "x.py").write_text("import os\n\ndef f():\n    from .config import ConfigError\n    import torch\n")
    global SRC
    old = SRC
    SRC = tmp_path
    try:
        assert _imports(pkg / "x.py") == [(4, True, "oodcorr.config"), (5, True, "torch")]
    finally:
        SRC = old


def test_job_modules_import_nothing_only_planning_needs():
    """An evaluation or finetune process pays for every module its imports load, once per job
    (benchmarks/README.md, section 9). Importing the job modules must not load what only
    planning uses (the schema validator, Snakemake) or the tables library; torch comes lazily."""
    import subprocess
    import sys

    code = (
        "import sys, oodcorr.evaluate, oodcorr.finetune, oodcorr.finetune_job, oodcorr.series; "
        "print(' '.join(m for m in ('jsonschema', 'snakemake', 'pandas', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC)
    assert out.stdout.split() == [], out.stdout
