"""Size budgets of a YAML file or a loaded config, checked before any work.

PyYAML builds aliases (``*name``) as shared objects, so a few lines can stand for a billion values
that every reader then expands, and a config nested thousands deep makes every recursive reader
fail with a RecursionError. :func:`scan_yaml` refuses such a file from its parser events;
:func:`check_tree` a mapping already loaded (Snakemake reads ``--configfile`` itself).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from .errors import ConfigError

MAX_NODES = 100_000  # values (scalars, mappings, lists, keys), aliases counted as expanded
MAX_DEPTH = 32  # mappings and lists inside each other


class TooLarge(ConfigError):
    """A YAML file or config beyond a size budget; ``parts``: the key path of the block (None: file and line)."""

    def __init__(self, message: str, parts: list | None = None):
        super().__init__(message)
        self.parts = parts


def _nodes_message(n: int | None, limit: int) -> str:
    got = f"{n:,} values" if n is not None else f"more than {limit:,} values"
    return (
        f"holds {got} once its YAML aliases are expanded (each *alias counts as the block it repeats); "
        f"oodcorr reads at most {limit:,} values in one file or config: remove the aliases (*name) that repeat "
        "this block, or write the values out once"
    )


def _depth_message(depth: int | None, limit: int) -> str:
    got = f"{depth:,} levels deep" if depth is not None else f"more than {limit} levels deep"
    return f"is nested {got}; oodcorr reads at most {limit} levels of mappings and lists inside each other: flatten it"


CYCLE_MESSAGE = (
    "holds a YAML alias to a block that contains it (a value that holds itself); remove the alias, which makes "
    "the block contain itself"
)


# ---- a YAML file, before it is built ----------------------------------------------------------------
def scan_yaml(stream, path: str | os.PathLike) -> None:
    """Raise :class:`TooLarge` (``<file>:<line>: ...``) if the YAML in ``stream`` is beyond the budgets or
    holds an alias to a block that contains it; invalid YAML is left to ``yaml.safe_load``."""
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, height) of the block it names
    open_anchors: set[str] = set()
    stack: list[list] = []  # one frame per open mapping or list: [anchor, values before it, height]
    total = 0

    def fail(mark, message: str):
        line = f":{mark.line + 1}" if mark is not None else ""
        raise TooLarge(f"{path}{line}: {message}")

    try:
        for ev in yaml.parse(stream, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                stack.append([ev.anchor, total, 0])
                total += 1
                if ev.anchor:
                    open_anchors.add(ev.anchor)
                if len(stack) > MAX_DEPTH:
                    fail(ev.start_mark, "the YAML here " + _depth_message(None, MAX_DEPTH))
                continue
            if isinstance(ev, yaml.AliasEvent):
                if ev.anchor in open_anchors:
                    fail(ev.start_mark, f"*{ev.anchor} " + CYCLE_MESSAGE)
                n, height = sizes.get(ev.anchor, (1, 1))
                total += n
                if len(stack) + height > MAX_DEPTH:
                    fail(ev.start_mark, f"*{ev.anchor} repeats a block that " + _depth_message(None, MAX_DEPTH))
            elif isinstance(ev, yaml.ScalarEvent):
                n, height = 1, 1
                total += 1
                if ev.anchor:
                    sizes[ev.anchor] = (1, 1)
                if len(stack) + 1 > MAX_DEPTH:
                    fail(ev.start_mark, "the YAML here " + _depth_message(None, MAX_DEPTH))
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, before, inner = stack.pop()
                height = inner + 1
                if anchor:
                    sizes[anchor] = (total - before, height)
                    open_anchors.discard(anchor)
            else:  # stream and document start and end
                continue
            if total > MAX_NODES:
                where = "the file" if not stack else "the file, at this line,"
                fail(ev.start_mark, f"{where} " + _nodes_message(None, MAX_NODES))
            if stack:
                stack[-1][2] = max(stack[-1][2], height)
    except yaml.YAMLError:
        return  # not valid YAML: yaml.safe_load says where and why


# ---- a mapping already loaded -------------------------------------------------------------------------
def _children(obj) -> list:
    if isinstance(obj, dict):
        return list(obj.items())
    if isinstance(obj, (list, tuple)):
        return list(enumerate(obj))
    return []


def _measure(root, max_nodes: int) -> dict[int, tuple[int, int]]:
    """(values, height) of every mapping and list under ``root`` by ``id``, shared ones counted as often
    as used, values saturating above ``max_nodes``; iterative. :class:`TooLarge` for a value that holds itself."""
    memo: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    parts: list = []
    # frame: [object, its (key, child) pairs, next index, values so far, tallest child]
    stack = [[root, _children(root), 0, 1, 0]]
    on_path.add(id(root))
    while stack:
        frame = stack[-1]
        obj, kids, i = frame[0], frame[1], frame[2]
        if i == len(kids):
            stack.pop()
            on_path.discard(id(obj))
            memo[id(obj)] = (min(frame[3], max_nodes + 1), frame[4] + 1)
            if parts:
                parts.pop()
            continue
        key, child = kids[i]
        if isinstance(child, (dict, list, tuple)) and id(child) not in memo:  # measured, then counted below
            if id(child) in on_path:
                raise TooLarge(CYCLE_MESSAGE, [*parts, key])
            parts.append(key)
            on_path.add(id(child))
            stack.append([child, _children(child), 0, 1, 0])
            continue
        frame[2] += 1
        n, h = memo.get(id(child), (1, 1))  # a scalar: one value, one level
        frame[3] = min(frame[3] + isinstance(obj, dict) + n, max_nodes + 1)  # a mapping's key counts too
        frame[4] = max(frame[4], h)
    return memo


def key_path(parts: list, root: Any = None) -> str:
    """``models[micro-opt].tiny.config``: list items by their ``name`` where they have one."""
    out, node = "", root
    for p in parts:
        if isinstance(p, int):
            item = node[p] if isinstance(node, (list, tuple)) and p < len(node) else None
            name = item.get("name") if isinstance(item, dict) else None
            out += f"[{name}]" if isinstance(name, str) and name else f"[{p}]"
            node = item
        else:
            out += f".{p}" if out else str(p)
            node = node.get(p) if isinstance(node, dict) else None
    return out or "(top level)"


def check_tree(root: Any, max_nodes: int = MAX_NODES) -> None:
    """Raise :class:`TooLarge` naming the key if ``root`` is beyond the budgets or holds itself."""
    if not isinstance(root, (dict, list, tuple)):
        return
    try:
        memo = _measure(root, max_nodes)
    except TooLarge as e:
        raise TooLarge(f"{key_path(e.parts, root)}: {e}", e.parts) from None
    n, height = memo[id(root)]
    if height > MAX_DEPTH:  # follow the tallest child to the level past the limit
        parts, _ = _descend(root, lambda kids: max(kids, key=lambda kc: memo[id(kc[1])][1], default=None), MAX_DEPTH)
        raise TooLarge(f"{key_path(parts, root)}...: the config " + _depth_message(height, MAX_DEPTH), parts)
    if n > max_nodes:  # the smallest block that alone is over the limit
        parts, node = _descend(root, lambda kids: next((kc for kc in kids if memo[id(kc[1])][0] > max_nodes), None))
        where = key_path(parts, root) if parts else "the config"
        raise TooLarge(f"{where}: " + _nodes_message(_measure(node, 10**30)[id(node)][0], max_nodes), parts)


def _descend(root, pick, depth: int | None = None) -> tuple[list, Any]:
    """The key path and the block reached from ``root`` by taking the child ``pick`` chooses among the
    mappings and lists below, until it chooses none (or ``depth`` levels down)."""
    parts, node = [], root
    while depth is None or len(parts) < depth:
        chosen = pick([(k, c) for k, c in _children(node) if isinstance(c, (dict, list, tuple))])
        if chosen is None:
            return parts, node
        k, node = chosen
        parts.append(k)
    return parts, node


# ---- the analysis ---------------------------------------------------------------------------------------
def analysis_cells(ood_per_run: list[int], methods: int, residualisers: int) -> tuple[int, str]:
    """The cells an analysis computes (OOD pairs x methods x residualisers) and how they add up."""
    pairs = sum(n * (n - 1) // 2 for n in ood_per_run)
    runs = len(ood_per_run)
    detail = (
        f"{pairs:,} OOD pair(s) summed over {runs:,} run(s) x {methods} method(s) x {residualisers} residualiser(s)"
    )
    return pairs * methods * residualisers, detail


def analysis_too_large(
    cells: int, detail: str, limit: int, *, what: str, limit_name: str, fewer: str, allow: str
) -> str:
    return (
        f"{what} would compute {cells:,} cells ({detail}), more than the {limit:,} that {limit_name} allows "
        f"(time and memory grow with the cells: millions run for tens of minutes). Analyse fewer ({fewer}), "
        f"or {allow} to run it anyway"
    )
