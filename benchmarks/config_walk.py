"""How far a config value travels: one section of the config (``analysis`` by default) followed as
a value through the calls of ``src/oodcorr`` (and a rule's script), read from the AST alone.

Started from a function's parameter (``planning/plan.py:load``'s ``config``, and the analysis rule's
script, whose ``snakemake`` object carries the same section as ``params.analysis``), the walk follows
every name bound to the value and enters every function of the package that a call hands it to:

* a *stay* is a function the value enters (as an argument, or as ``self`` of a method called on an
  object that holds it) and in which the section is read or handed on to a stay;
* a *room* is a module holding stays; a *return* is a stay in a room already visited (stays - rooms);
* a *name* is a variable or parameter of a stay bound to the value (the section, a part of it, or
  the whole config that holds it).

The whole config counts only where the section is taken out of it (``config["analysis"]``,
``config.get("analysis")``, ``x.analysis``): a function that receives the config and reads only
other keys is no stay of this value. Calls are resolved statically: functions of the same module,
names imported from the package, ``module.function``, ``Class(...)``, ``Class.method(...)``,
``self.method(...)`` and methods of a variable assigned from ``Class(...)``; anything else
(a library's function, a method of an unknown object) keeps the value in the caller.

    .venv/bin/python benchmarks/config_walk.py                # the analysis section
    .venv/bin/python benchmarks/config_walk.py --key finetune --list
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
NONE, SECTION, WHOLE = 0, 1, 2
CONTAINERS = ("config", "params")  # attributes that hold the whole config (Experiment.config, snakemake.params)
# calls outside the package whose result is the value they are given, and methods that give a part of it
CONVERSIONS = ("int", "float", "str", "bool", "dict", "list", "tuple", "sorted", "deepcopy", "MappingProxyType")
ACCESSORS = ("get", "items", "values", "keys", "copy")
# where the walk starts: (module, function, parameter), or (a rule's script, None, its snakemake object)
ROOTS = (
    ("oodcorr.planning.plan", "load", "config"),
    ("workflow/scripts/partial_correlations.py", None, "snakemake"),
)


class Package:
    """Every module of ``src/oodcorr`` parsed: its functions, classes and imported names."""

    def __init__(self):
        self.funcs: dict[str, ast.FunctionDef] = {}  # "module:func" or "module:Class.method"
        self.classes: dict[str, str] = {}  # "module:Class" -> module
        self.names: dict[str, dict[str, str]] = {}  # module -> local name -> "module:obj" or "module"
        for path in sorted((SRC / "oodcorr").rglob("*.py")):
            parts = path.relative_to(SRC).with_suffix("").parts
            mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.add(mod, ast.parse(path.read_text()), path.name == "__init__.py")

    def add(self, mod: str, tree: ast.Module, is_package: bool = False) -> None:
        names = self.names.setdefault(mod, {})
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs[f"{mod}:{node.name}"] = node
                names[node.name] = f"{mod}:{node.name}"
            elif isinstance(node, ast.ClassDef):
                self.classes[f"{mod}:{node.name}"] = mod
                names[node.name] = f"{mod}:{node.name}"
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.funcs[f"{mod}:{node.name}.{item.name}"] = item
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = self._base(mod, node, is_package)
                for a in node.names:
                    names[a.asname or a.name] = f"{base}:{a.name}" if base else a.name
            elif isinstance(node, ast.Import):
                for a in node.names:
                    names[a.asname or a.name.split(".")[0]] = a.name

    @staticmethod
    def _base(mod: str, node: ast.ImportFrom, is_package: bool) -> str:
        if not node.level:
            return node.module or ""
        parts = mod.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        return ".".join(parts[:keep] + ([node.module] if node.module else []))

    def resolve(self, mod: str, target: str) -> str:
        """ "module:obj" for an imported name, the module itself where ``obj`` is a module of the package."""
        base, _, obj = target.partition(":")
        if obj and f"{base}.{obj}" in self.names:
            return f"{base}.{obj}"
        if obj and obj in self.names.get(base, {}) and self.names[base][obj] != target:
            return self.resolve(base, self.names[base][obj])  # re-exported (an __init__'s import)
        return target


class Walk:
    def __init__(self, pkg: Package, key: str):
        self.pkg, self.key = pkg, key
        self.seen: dict[tuple[str, tuple], tuple[list[str], int]] = {}
        self.names: set[tuple[str, str]] = set()

    # ---- one function, its parameters tainted --------------------------------------------------
    def function(self, qual: str, body, mod: str, taint: dict[str, int], cls: str | None, follow: bool = True):
        """(the stays of this call in the order entered, this one first: empty where the section is
        neither read here nor handed on; the level of what it returns)."""
        memo = (qual, tuple(sorted(taint.items())))
        if memo in self.seen:
            return self.seen[memo]
        self.seen[memo] = ([], NONE)  # recursion: nothing more
        env, types = dict(taint), {"self": cls} if cls else {}
        nodes = sorted(
            (n for stmt in body for n in ast.walk(stmt) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset)
        )
        for _ in range(3):  # to a fixpoint: loops assign names after their use
            for node in nodes:
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    level = self.level(node.value, env, mod, types)
                    kind = self.class_of(node.value, mod, types)
                    for t in targets:
                        for name in ast.walk(t):
                            if isinstance(name, ast.Name):
                                env[name.id] = max(env.get(name.id, NONE), level)
                                if kind:
                                    types[name.id] = kind
                elif isinstance(node, ast.For):
                    self._bind(node.target, self.level(node.iter, env, mod, types), env)
            for node in (n for stmt in body for n in ast.walk(stmt)):
                if isinstance(node, ast.comprehension):
                    self._bind(node.target, self.level(node.iter, env, mod, types), env)
        below, ret = [], NONE
        touched = any(self.takes_section(n, env) for n in nodes)
        for node in nodes:
            if isinstance(node, ast.Call) and follow:
                below += self.call(node, env, mod, types)[0]
            elif isinstance(node, ast.Return) and node.value is not None:
                ret = max(ret, self.level(node.value, env, mod, types))
        seq = [qual, *below] if touched or below else []
        if seq:
            self.names |= {(qual, n) for n, lv in env.items() if lv}
        self.seen[memo] = (seq, ret)
        return seq, ret

    @staticmethod
    def _bind(target, level: int, env: dict) -> None:
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                env[name.id] = max(env.get(name.id, NONE), level)

    def takes_section(self, node, env) -> bool:
        """The section itself used here: a name bound to it, or taken out of the whole config."""
        if isinstance(node, ast.Name) and env.get(node.id) == SECTION:
            return True
        return self._section_of_whole(node, env)

    def _section_of_whole(self, node, env) -> bool:
        inner = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == self.key:
            inner = node.value
        elif isinstance(node, ast.Attribute) and node.attr == self.key:
            inner = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == self.key
        ):
            inner = node.func.value
        return inner is not None and self._whole(inner, env)

    def _whole(self, node, env) -> bool:
        if isinstance(node, ast.Name):
            return env.get(node.id) == WHOLE
        if isinstance(node, ast.Attribute) and node.attr in CONTAINERS:
            return self._whole(node.value, env)
        return False

    # ---- the level of an expression ---------------------------------------------------------------
    def level(self, node, env, mod, types) -> int:
        """What an expression holds of the value: the section (or a part of it), the whole config,
        or nothing. Only what carries the value itself counts: a name, a part of it taken out, a
        container holding it, a conversion (``int``, ``dict``, ``copy.deepcopy`` ...), what a function
        of the package returns of it; a value computed from it (``len(x)``, ``x * 2``) is another."""
        if self._section_of_whole(node, env):
            return SECTION
        if isinstance(node, ast.Name):
            return env.get(node.id, NONE)
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            inner = self.level(node.value, env, mod, types)
            if inner == WHOLE:  # another key of the config: not this value
                return WHOLE if isinstance(node, ast.Attribute) and node.attr in CONTAINERS else NONE
            return inner
        if isinstance(node, ast.Call):
            return self.call(node, env, mod, types)[1]
        if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set, ast.IfExp, ast.BoolOp, ast.Starred)):
            parts = node.values if isinstance(node, ast.Dict) else ast.iter_child_nodes(node)
            return max((self.level(c, env, mod, types) for c in parts if c is not None), default=NONE)
        if isinstance(node, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return max((self.level(g.iter, env, mod, types) for g in node.generators), default=NONE)
        return NONE

    # ---- a call ---------------------------------------------------------------------------------------
    def target(self, func, mod, types) -> tuple[str | None, bool]:
        """(the function called, whether it is called on an instance: ``self`` bound)."""
        names = self.pkg.names.get(mod, {})
        if isinstance(func, ast.Name) and func.id in names:
            t = self.pkg.resolve(mod, names[func.id])
            if t in self.pkg.classes:
                return (f"{t}.__init__" if f"{t}.__init__" in self.pkg.funcs else None), True
            return (t if t in self.pkg.funcs else None), False
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            obj = func.value.id
            if obj in types:
                t = f"{types[obj]}.{func.attr}"
                return (t if t in self.pkg.funcs else None), True
            if obj in names:
                base = self.pkg.resolve(mod, names[obj])
                if base in self.pkg.classes:
                    t = f"{base}.{func.attr}"
                    return (t if t in self.pkg.funcs else None), self._is_classmethod(t)
                t = self.pkg.resolve(base, f"{base}:{func.attr}")
                if t in self.pkg.classes:
                    return (f"{t}.__init__" if f"{t}.__init__" in self.pkg.funcs else None), True
                return (t if t in self.pkg.funcs else None), False
        return None, False

    def _is_classmethod(self, qual: str) -> bool:
        fn = self.pkg.funcs.get(qual)
        return bool(fn) and any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)

    def class_of(self, node, mod, types) -> str | None:
        if isinstance(node, ast.Call):
            qual, bound = self.target(node.func, mod, types)
            if qual and bound:
                return qual.rsplit(".", 1)[0]
            if isinstance(node.func, ast.Name):
                t = self.pkg.resolve(mod, self.pkg.names.get(mod, {}).get(node.func.id, ""))
                return t if t in self.pkg.classes else None
        return None

    def call(self, node: ast.Call, env, mod, types) -> tuple[list[str], int]:
        args = [self.level(a, env, mod, types) for a in node.args]
        kwargs = {k.arg: self.level(k.value, env, mod, types) for k in node.keywords}
        obj = NONE
        if isinstance(node.func, ast.Attribute):
            obj = self.level(node.func.value, env, mod, types)
        if self._section_of_whole(node, env):
            return [], SECTION
        qual, bound = self.target(node.func, mod, types)
        made = self.class_of(node, mod, types) and not isinstance(node.func, ast.Attribute)
        if made:  # an object made of the value holds it
            seq = self.call_function(qual, bound, node, args, kwargs, obj)[0] if qual else []
            return seq, max([*args, *kwargs.values()], default=NONE)
        if qual is None:  # outside the package: a conversion of the value, or something else
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in CONVERSIONS:
                return [], max([*args, *kwargs.values()], default=NONE)
            return [], obj if name in ACCESSORS else NONE
        return self.call_function(qual, bound, node, args, kwargs, obj)

    def call_function(self, qual, bound, node, args, kwargs, obj) -> tuple[list[str], int]:
        fn = self.pkg.funcs[qual]
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        taint: dict[str, int] = {}
        if bound and params and params[0] in ("self", "cls"):
            if params[0] == "self" and obj:
                taint["self"] = obj
            params = params[1:]
        for p, lv in zip(params, args):
            if lv:
                taint[p] = lv
        for k, lv in kwargs.items():
            if lv and k:
                taint[k] = lv
        if not taint:
            return [], NONE
        fmod = qual.split(":")[0]
        cls = qual.split(":")[1].rsplit(".", 1)[0] if "." in qual.split(":")[1] else None
        return self.function(qual, fn.body, fmod, taint, f"{fmod}:{cls}" if cls else None)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--key", default="analysis", help="the config section followed (default: analysis)")
    ap.add_argument("--list", action="store_true", help="print every stay, in the order entered")
    args = ap.parse_args(argv)
    pkg = Package()
    walk = Walk(pkg, args.key)
    stays: list[str] = []
    for mod, func, param in ROOTS:
        if func is None:  # the rule's script: the job that uses the value (its own calls not followed)
            name = f"script:{Path(mod).stem}"
            tree = ast.parse((REPO / mod).read_text())
            pkg.add(name, tree)
            stays += walk.function(f"{name}:<script>", tree.body, name, {param: WHOLE}, None, follow=False)[0]
        else:
            stays += walk.function(f"{mod}:{func}", pkg.funcs[f"{mod}:{func}"].body, mod, {param: WHOLE}, None)[0]
    rooms = [q.split(":")[0] for q in stays]
    returns = sum(1 for i, room in enumerate(rooms) if room in rooms[:i])
    if args.list:
        for i, (q, room) in enumerate(zip(stays, rooms)):
            print(("  return  " if room in rooms[:i] else "          ") + q)
    print(f"{args.key}: {len(stays)} stays in {len(set(rooms))} rooms, {returns} returns, {len(walk.names)} names")


if __name__ == "__main__":
    main()
