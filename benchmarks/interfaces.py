"""Three counts of the package's interfaces, read from the AST alone:

* ``calls``: the fewest calls from the partial-correlation rule's script
  (``workflow/scripts/partial_correlations.py``) to the correlation itself
  (``oodcorr.analysis.cell.correlate:corr``), and the chain. Calls are resolved as in
  ``config_walk.py``; a function handed to a process pool (``pool.map(f, ...)``, ``submit``)
  counts as called by the function that hands it over (the hop counts as none).
* ``params``: the functions of a package (``--under``, default ``oodcorr.analysis``) over
  ``--max`` parameters (default 10), every parameter counted (positional, keyword-only,
  ``*args``, ``**kwargs``; ``self`` and ``cls`` not).
* ``private``: the public functions and classes of that package that no other file uses (the
  name nowhere in another module of ``src``, ``workflow``, ``tests`` or ``benchmarks``): helpers of
  their own module that should carry a leading underscore.

    .venv/bin/python benchmarks/interfaces.py [--under oodcorr.analysis] [--max 10] [--list]
"""

from __future__ import annotations

import argparse
import ast
from collections import deque

from config_walk import REPO, Package, Walk

SCRIPT = "workflow/scripts/partial_correlations.py"
GOAL = "oodcorr.analysis.cell.correlate:corr"
POOL_CALLS = ("map", "submit", "imap", "imap_unordered", "starmap")


def callees(walk: Walk, mod: str, body) -> set[str]:
    out = set()
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if not isinstance(node, ast.Call):
            continue
        qual, _ = walk.target(node.func, mod, {})
        if qual:
            out.add(qual)
        if isinstance(node.func, ast.Attribute) and node.func.attr in POOL_CALLS and node.args:
            qual, _ = walk.target(node.args[0], mod, {})
            if qual:
                out.add(qual)
    return out


def calls_to_number(pkg: Package) -> list[str]:
    walk = Walk(pkg, "analysis")
    tree = ast.parse((REPO / SCRIPT).read_text())
    pkg.add("script", tree)
    start = "script:<script>"
    prev, todo = {start: None}, deque([(start, "script", tree.body)])
    while todo:
        qual, mod, body = todo.popleft()
        for q in sorted(callees(walk, mod, body)):
            if q in prev:
                continue
            prev[q] = qual
            if q == GOAL:
                chain = [q]
                while prev[chain[-1]]:
                    chain.append(prev[chain[-1]])
                return chain[::-1]
            todo.append((q, q.split(":")[0], pkg.funcs[q].body))
    return []


def n_params(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x]
    return len([n for n in names if n not in ("self", "cls")])


def used_names(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[-1])
            out.add(node.name.split(".")[-1])
    return out


def own_module_only(under: str) -> list[str]:
    files = [p for d in ("src", "workflow", "tests", "benchmarks") for p in sorted((REPO / d).rglob("*.py"))]
    mods = {}
    for p in files:
        rel = p.relative_to(REPO / "src").with_suffix("") if p.is_relative_to(REPO / "src") else None
        mod = ".".join(rel.parts) if rel else str(p)
        mods[mod] = p
    names = {m: used_names(p) for m, p in mods.items()}
    out = []
    for mod, p in mods.items():
        if not mod.startswith(under + ".") or mod.endswith("__init__"):
            continue
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                others = (m for m in names if m != mod and not m.endswith(f"{under}.__init__"))
                if not any(node.name in names[m] for m in others):
                    out.append(f"{mod}:{node.name}")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--under", default="oodcorr.analysis", help="the package counted (params, private)")
    ap.add_argument("--max", type=int, default=10, help="the most parameters a function may take")
    ap.add_argument("--list", action="store_true", help="print every function counted")
    args = ap.parse_args(argv)
    pkg = Package()
    chain = calls_to_number(pkg)
    print(f"calls from the rule's script to the correlation: {len(chain) - 1}")
    if args.list:
        print("  " + "\n  -> ".join(chain))
    over = sorted(
        (n_params(fn), q) for q, fn in pkg.funcs.items() if q.startswith(args.under + ".") and n_params(fn) > args.max
    )
    print(f"functions of {args.under} over {args.max} parameters: {len(over)}")
    if args.list:
        for n, q in over[::-1]:
            print(f"  {n:3d}  {q}")
    lonely = own_module_only(args.under)
    print(f"public functions and classes of {args.under} used only in their own module: {len(lonely)}")
    if args.list:
        for q in lonely:
            print(f"  {q}")


if __name__ == "__main__":
    main()
