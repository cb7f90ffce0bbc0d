"""Testsets that share items: an lm-evaluation-harness group beside its own subtasks (``mmlu`` and
``mmlu_anatomy``), or two groups with a subtask in common."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def leaves(groups: Mapping[str, Iterable[str]] | None) -> dict[str, frozenset[str]]:
    """Every group of ``groups`` (group -> its subtasks, nested) -> the tasks at the bottom of its tree;
    a group with no subtask listed is a task of its own."""
    groups = {str(g): [str(c) for c in (kids or ())] for g, kids in (groups or {}).items()}
    out: dict[str, frozenset[str]] = {}

    def walk(name: str, path: tuple[str, ...]) -> frozenset[str]:
        if name in out:
            return out[name]
        kids = [c for c in groups.get(name, ()) if c not in path]
        if not kids:
            return frozenset([name])
        got = frozenset().union(*(walk(c, (*path, name)) for c in kids))
        out[name] = got
        return got

    for g in groups:
        walk(g, ())
    return {g: v for g, v in out.items() if v != frozenset([g])}


def _why(a: str, b: str, parts: Mapping[str, frozenset[str]]) -> str:
    """How ``a`` and ``b`` share items, in words (``parts``: :func:`leaves`)."""
    pa, pb = (parts.get(t, frozenset([t])) for t in (a, b))
    for outer, inner, p_in, p_out in ((b, a, pa, pb), (a, b, pb, pa)):
        if outer in parts and p_in <= p_out:
            return f"{outer} includes {'the group ' if inner in parts else ''}{inner}"
    common = sorted(pa & pb)
    more = f" and {len(common) - 1} more" if len(common) > 1 else ""
    return f"both include {common[0]}{more}"


def refusals(in_domain: str, ood: Iterable[str], parts: Mapping[str, frozenset[str]]) -> dict[tuple[str, str], str]:
    """The pairs (x, y) of ``ood`` that cannot be analysed for shared items -> the note saying why."""
    ood = list(ood)
    if not parts:
        return {}

    def of(name: str) -> frozenset[str]:
        return parts.get(name, frozenset([name]))

    pz = of(in_domain)
    with_z = {  # every pair of an OOD testset that shares items with the in-domain one
        x: f"{x} shares items with the in-domain testset {in_domain} ({_why(x, in_domain, parts)}): residualised on "
        "it, its series would keep part of the in-domain set's item noise, so its pairs are not computed "
        "(docs/analysis.md#testsets-that-share-items)"
        for x in ood
        if of(x) & pz
    }
    out = {}
    for i, a in enumerate(ood):
        for b in ood[i + 1 :]:
            said = [with_z[t] for t in (a, b) if t in with_z]
            if of(a) & of(b):
                said.insert(
                    0,
                    f"{a} and {b} share items ({_why(a, b, parts)}): their item noise is correlated, so their partial "
                    "correlation is not computed (docs/analysis.md#testsets-that-share-items)",
                )
            if said:
                out[(a, b)] = "; ".join(said)
    return out
