"""The rules' conda environments (``envs/``, docs/development.md#environments).

Each rule's ``conda:`` names one of the Snakefile's ``*_ENV`` files: the rules that make or read
models, and those upstream of them, the full one (``envs/oodcorr.yaml``, every pin of
requirements.txt); the rules after the evaluations (``analyse.smk``, ``report.smk``) one without
torch, transformers or peft (``envs/analysis.yaml``). Checked here: every env pins as
requirements.txt does, the analysis env holds every dependency of its packages and none of the
model stack, and each rule's script imports nothing its env lacks: its imports run in a process where
a module of any other installed distribution cannot be found (as in that env), and so does every
import that a function of a module they load makes (read from the source), except those of
:data:`MODEL_ONLY`, which only model rules' scripts call.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
import textwrap
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers import REPO

RULES = REPO / "workflow/rules"
# the rule files whose rules run after the evaluations: every rule there uses the analysis env
ANALYSIS_RULE_FILES = ("analyse.smk", "report.smk")
MODEL_STACK = ("torch", "transformers", "peft", "accelerate", "tokenizers", "safetensors", "datasets")
# functions whose imports only the model rules' scripts reach (they call them; no analysis script
# does, which test_model_only_functions_are_called_by_model_scripts_only checks): module -> functions
MODEL_ONLY = {"oodcorr.launch.runtime": {"pick_device"}}


def _env_vars() -> dict[str, str]:
    """The Snakefile's env variables: name -> env file (relative to the repository)."""
    found = re.findall(r'^(\w+_ENV) = "(.+)"$', (REPO / "Snakefile").read_text(), re.M)
    return {name: str((RULES / rel).resolve().relative_to(REPO)) for name, rel in found}


def _rules() -> list[tuple[str, str, str, str]]:
    """(rule file, rule, its conda variable, its script relative to the repository) of every rule."""
    out = []
    for f in sorted(RULES.glob("*.smk")):
        blocks = re.split(r"^\s*rule (\w+):\n", f.read_text(), flags=re.M)
        for name, body in zip(blocks[1::2], blocks[2::2], strict=True):
            conda = re.search(r"^\s+conda:\n\s+(\w+)\n", body, re.M)
            script = re.search(r'^\s+script:\n\s+"([^"]+)"', body, re.M)
            rel = str((RULES / script.group(1)).resolve().relative_to(REPO)) if script else ""
            out.append((f.name, name, conda.group(1) if conda else "", rel))
    return out


def _pins(path) -> list[str]:
    env = yaml.safe_load((REPO / path).read_text())
    assert "python=3.11" in env["dependencies"], path
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def _requirements() -> list[str]:
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _names(pins) -> set[str]:
    return {canonicalize_name(p.split("==")[0]) for p in pins}


def _optional_extras() -> set[str]:
    """The distributions of pyproject.toml's optional extras (MLflow, W&B): a user who names them in
    finetune.report_to installs them where the rules run; planning and each job check that they are."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    return {canonicalize_name(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for rs in extras.values() for r in rs}


def _installed_closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they depend on, as installed here (markers evaluated, extras left out)."""
    from packaging.requirements import Requirement

    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_each_rule_names_its_env():
    envs = _env_vars()
    assert envs == {"MODEL_ENV": "envs/oodcorr.yaml", "ANALYSIS_ENV": "envs/analysis.yaml"}, envs
    rules = _rules()
    assert len(rules) >= 20 and {r[1] for r in rules} >= {"evaluate", "finetune", "partial_correlations"}
    for file, rule, conda, script in rules:
        want = "ANALYSIS_ENV" if file in ANALYSIS_RULE_FILES else "MODEL_ENV"
        assert conda == want, f"rule {rule} ({file}): conda: {conda or 'missing'}, should be {want}"
        assert (REPO / script).is_file(), f"rule {rule}: script {script}"


def test_every_env_pins_as_requirements_txt_and_the_model_env_pins_all():
    reqs = _requirements()
    assert _pins("envs/oodcorr.yaml") == reqs
    light = _pins("envs/analysis.yaml")
    assert [p for p in light if p not in reqs] == [], "pinned otherwise than in requirements.txt"
    assert light == [p for p in reqs if p in light], "in requirements.txt's order"


def _requires(dist: str) -> set[str]:
    out = set()
    for r in md.distribution(dist).requires or []:
        req = Requirement(r)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.add(canonicalize_name(req.name))
    return out


def _missing(names: set[str]) -> dict[str, list[str]]:
    """Each of ``names`` whose dependencies are not all among ``names``, with those dependencies."""
    return {n: sorted(_requires(n) - names) for n in sorted(names) if _requires(n) - names}


def test_the_analysis_env_holds_every_dependency_of_its_packages_and_no_model_stack():
    """pip then installs exactly these pins (no package unpinned, pulled in as a dependency)."""
    pins = _pins("envs/analysis.yaml")
    names = _names(pins)
    for p in pins:  # what this machine has installed is what requirements.txt pins
        assert md.version(p.split("==")[0]) == p.split("==")[1], p
    assert not _missing(names), f"dependencies not in envs/analysis.yaml: {_missing(names)}"
    assert not names & {canonicalize_name(n) for n in MODEL_STACK}, sorted(names & set(MODEL_STACK))
    assert {"numpy", "pandas", "pyarrow", "scipy", "pygam", "matplotlib", "snakemake"} <= names


def test_dependency_check_sees_a_missing_dependency():
    # the check itself: pandas and matplotlib need python-dateutil; tzdata is pandas' on Windows only
    names = _names(_pins("envs/analysis.yaml"))
    assert {"pandas", "matplotlib"} <= set(_missing(names - {"python-dateutil", "tzdata"}))
    assert "tzdata" not in _requires("pandas")


# Run in a fresh interpreter: a finder first in sys.meta_path that refuses (as "No module named ...")
# every top-level module of an installed distribution the env does not list, recording who asked.
# Then each script's module-level imports run, and every import made inside a function of an
# oodcorr module that is now loaded (except MODEL_ONLY's), until no new oodcorr module loads.
_PROBE = textwrap.dedent(
    """
    import ast, importlib, importlib.metadata as md, importlib.util, json, sys
    from packaging.utils import canonicalize_name

    allowed, scripts, model_only = json.loads(sys.argv[1])
    allowed = set(allowed)
    dists = md.packages_distributions()
    refused = []

    def _asker():
        f = sys._getframe(2)
        while f and (f.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib"))):
            f = f.f_back
        return f.f_globals.get("__name__", "?") if f else "?"

    class Refuse:
        def find_spec(self, fullname, path=None, target=None):
            top = fullname.partition(".")[0]
            if top == "oodcorr" or top in sys.stdlib_module_names or top not in dists:
                return None
            if {canonicalize_name(d) for d in dists[top]} & allowed:
                return None
            refused.append([fullname, _asker()])
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)

    sys.meta_path.insert(0, Refuse())

    def lazy(mod):
        # (function, imported module) of each import inside a function of module ``mod``
        tree = ast.parse(open(mod.__file__, encoding="utf-8").read())
        out = []
        def visit(node, fn):
            for child in ast.iter_child_nodes(node):
                name = fn
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn is None:
                    name = child.name
                if name is not None and isinstance(child, ast.Import):
                    out.extend((name, a.name) for a in child.names)
                elif name is not None and isinstance(child, ast.ImportFrom):
                    base = importlib.util.resolve_name("." * child.level + (child.module or ""), mod.__package__)
                    out.extend([(name, base)] + [(name, f"{base}.{a.name}") for a in child.names])
                visit(child, name)
        visit(tree, None)
        return out

    failed = []

    def attempt(name, where):
        # an import that the finder refused and nothing caught: the module could not run in the env
        # (a refusal caught on the way, as optional dependencies are, behaves as in the env)
        try:
            importlib.import_module(name)
        except ImportError as e:
            top = (e.name or "").partition(".")[0]
            if isinstance(e, ModuleNotFoundError) and any(r[0].partition(".")[0] == top for r in refused):
                failed.append([e.name, where])

    for path in scripts:
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    attempt(a.name, path)
            elif isinstance(node, ast.ImportFrom):
                attempt(node.module, path)
                for a in node.names:
                    attempt(f"{node.module}.{a.name}", path)
    seen = set()
    while True:
        todo = [m for m in list(sys.modules) if m.startswith("oodcorr") and m not in seen]
        if not todo:
            break
        for m in todo:
            seen.add(m)
            mod = sys.modules[m]
            if not getattr(mod, "__file__", None):
                continue
            for fn, target in lazy(mod):
                if fn not in model_only.get(m, []):
                    attempt(target, f"{m}.{fn}")
    print(json.dumps({"failed": failed, "refused": refused, "loaded": sorted(seen)}))
    """
)


def _probe(allowed: set[str], scripts: list[str], model_only: dict) -> dict:
    arg = json.dumps([sorted(allowed), scripts, {k: sorted(v) for k, v in model_only.items()}])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, arg], capture_output=True, text=True, cwd=REPO / "src", timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_analysis_rules_scripts_import_only_what_their_env_holds():
    """Every script of a rule on the analysis env, with every import its loaded modules make inside a
    function: nothing of torch, transformers, peft or any package the env does not pin (but the optional
    extras a user installs for a tracker)."""
    scripts = sorted({s for _, _, env, s in _rules() if env == "ANALYSIS_ENV"})
    assert len(scripts) >= 6, scripts
    allowed = _names(_pins("envs/analysis.yaml")) | _installed_closure(_optional_extras())
    result = _probe(allowed, [str(REPO / s) for s in scripts], MODEL_ONLY)
    assert result["failed"] == [], f"imported, but not in envs/analysis.yaml (module, by): {result['failed']}"
    # what was followed: the jobs' modules the scripts use, the statistics and the figures
    assert {"oodcorr.jobs.aggregate_scores", "oodcorr.analysis.pipeline", "oodcorr.jobs.figures.curves"} <= set(
        result["loaded"]
    )


def test_the_probe_refuses_what_the_env_lacks():
    """The check itself: without pyarrow in the env, the aggregation's script fails in the records' reader
    (which imports it inside a function), and without MODEL_ONLY, pick_device's torch is found; pyarrow's
    own optional dependencies (cloudpickle, refused and caught) are no failure."""
    names = _names(_pins("envs/analysis.yaml"))
    result = _probe(names - {"pyarrow"}, [str(REPO / "workflow/scripts/aggregate_scores.py")], {})
    assert ["pyarrow", "oodcorr.core.records.read_result"] in result["failed"], result["failed"]
    assert ["torch", "oodcorr.launch.runtime.pick_device"] in result["failed"], result["failed"]
    assert not [f for f in result["failed"] if f[0] == "cloudpickle"]


def test_model_only_functions_are_called_by_model_scripts_only():
    """A function of MODEL_ONLY is imported or called by model rules' scripts only: by no analysis rule's
    script and by no module of the package (so only the model rules' scripts reach its imports)."""
    model = {s for _, _, env, s in _rules() if env == "MODEL_ENV"}
    for module, functions in MODEL_ONLY.items():
        home = REPO / "src" / (module.replace(".", "/") + ".py")
        for fn in functions:
            assert re.search(rf"^def {fn}\(", home.read_text(), re.M), (module, fn)
            users = set()
            for p in [*(REPO / "src").rglob("*.py"), *(REPO / "workflow/scripts").glob("*.py")]:
                for node in ast.walk(ast.parse(p.read_text())):
                    called = isinstance(node, ast.Call) and fn in (
                        getattr(node.func, "id", None),
                        getattr(node.func, "attr", None),
                    )
                    imported = isinstance(node, ast.ImportFrom) and fn in [a.name for a in node.names]
                    if (called or imported) and p != home:
                        users.add(str(p.relative_to(REPO)))
            assert users and users <= model, (fn, sorted(users - model))


def test_every_third_party_import_of_the_package_is_pinned():
    """What src/oodcorr and the rules' scripts import (at any level) comes from a distribution that
    requirements.txt, and so the model env, pins, or from one of pyproject.toml's optional extras (MLflow,
    W&B: installed by the user who names them in finetune.report_to, checked while planning)."""
    pinned = _names(_requirements()) | _optional_extras()
    dists = md.packages_distributions()
    unpinned = set()
    for p in [*(REPO / "src/oodcorr").rglob("*.py"), *(REPO / "workflow/scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and not node.level and node.module
                else []
            )
            for name in names:
                top = name.partition(".")[0]
                if top in sys.stdlib_module_names or top == "oodcorr":
                    continue
                if not {canonicalize_name(d) for d in dists.get(top, [])} & pinned:
                    unpinned.add(f"{p.relative_to(REPO)}: {name}")
    assert not unpinned, sorted(unpinned)
