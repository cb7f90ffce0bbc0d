"""The grid a config asks for, as ``oodcorr design`` sees it (:func:`grid_of`), and the changes of it
that it prices (:data:`CHANGES`, each a function from a config to a changed copy)."""

from __future__ import annotations

import contextlib
import copy
import statistics
from collections import Counter

from ..core.io import json_or_none

POOL_COLUMNS = ("n_train", "seed")  # the run information the workflow passes to the analysis


def _mode(values):
    return Counter(values).most_common(1)[0][0]


def grid_of(plan) -> dict:
    """The shape of the most common table of ``plan``'s analysis; ``notes`` say where tables differ."""
    by = [c for c in plan.analysis.get("pooling", {}).get("by", ["n_train"]) if c in POOL_COLUMNS]
    drop0 = bool(plan.analysis.get("step0", {}).get("drop"))
    tables: dict[tuple, dict[str, list]] = {}
    for run in plan.runs:
        key = (run.in_domain, *(getattr(run, c) for c in by))
        n = len(run.steps) - (1 if drop0 and 0 in run.steps else 0)
        tables.setdefault(key, {}).setdefault(run.model, []).append(n)
    shapes = []
    for (dom, *_), models in tables.items():
        n_ood = sum(1 for _, role in plan.testsets[dom] if role == "ood")
        shapes.append(
            (
                len(models),
                _mode([len(r) for r in models.values()]),
                _mode([n for r in models.values() for n in r]),
                n_ood * (n_ood - 1) // 2,
            )
        )
    models, runs, checkpoints, pairs = _mode(shapes)
    notes = []
    if len(set(shapes)) > 1:
        notes.append(
            f"the {len(shapes)} tables differ in shape ({len(set(shapes))} kinds: models x runs x checkpoints x "
            f"pairs {sorted(set(shapes))}); the design is for the most common, "
            f"{models} x {runs} x {checkpoints} x {pairs}"
        )
    doms = sorted({k[0] for k in tables})
    groups = sorted({k[1:] for k in tables})
    how = f"{len(doms)} in-domain set(s)" + (
        f" x {len(groups)} pool group(s) ({', '.join(by)})" if by else ", all runs of a model pooled"
    )
    ood = sorted({t for d in doms for t, role in plan.testsets[d] if role == "ood"})
    own = sorted({t for d in doms for t, role in plan.testsets[d] if role != "ood"})
    return {
        "models": models,
        "runs": runs,
        "checkpoints": checkpoints,
        "pairs": pairs,
        "tables": len(tables),
        "tables_how": how,
        "testsets": ood,
        "sizes": testset_sizes(plan, ood),
        "in_domain_sizes": testset_sizes(plan, own),
        "notes": notes,
    }


def testset_sizes(plan, names) -> dict:
    """Examples per testset, where known before running: the config's ``max_examples`` cap, else the prepared
    data's count, else None."""
    out = {}
    for name in names:
        cap = plan.exp.dataset(name).get("max_examples")
        n = int(cap) if cap else None
        if n is None:
            with contextlib.suppress(KeyError, TypeError, ValueError):  # not prepared, or no count in its description
                n = int(json_or_none(plan.paths.data_meta.format(dataset=name))["n"])
        out[name] = n
    return out


def typical_size(sizes: dict) -> int | None:
    vals = list(sizes.values())
    if not vals or any(v is None for v in vals):
        return None
    return int(statistics.median(vals))


def _finetune_blocks(config: dict):
    """The config's finetune block and every model entry's own (the overrides), created where needed."""
    yield config.setdefault("finetune", {})
    for entry in config.get("models", []):
        if isinstance(entry.get("finetune"), dict):
            yield entry["finetune"]


def _more_checkpoints(cfg: dict, plan) -> tuple[dict, str]:
    """Twice the checkpoints per run: ``checkpoints.every`` halved, or a step between every two listed."""
    said = ""
    for ft in _finetune_blocks(cfg):
        sched = ft.get("checkpoints")
        if not isinstance(sched, dict):
            continue
        if "every" in sched:
            sched["every"] = max(1, int(sched["every"]) // 2)
            said = f"finetune.checkpoints.every {sched['every']}"
        elif "steps" in sched:
            steps = [int(x) for x in sched["steps"]]
            full = steps if steps and steps[0] == 0 else [0, *steps]  # planning saves step 0 in any case
            mids = [(a + b) // 2 for a, b in zip(full, full[1:]) if b - a > 1]
            sched["steps"] = sorted(set(steps) | set(mids))
            said = "a checkpoint between every two listed steps"
    if not said:
        raise ValueError("no checkpoint schedule to change")
    return cfg, f"twice the checkpoints per run ({said})"


def _more_seeds(cfg: dict, plan) -> tuple[dict, str]:
    for ft in _finetune_blocks(cfg):
        if "seeds" in ft:
            seeds = [int(s) for s in ft["seeds"]]
            ft["seeds"] = seeds + [max(seeds) + 1, max(seeds) + 2]
    return cfg, "2 more seeds per n_train (finetune.seeds)"


def _more_models(cfg: dict, plan) -> tuple[dict, str]:
    """Half as many more models: a copy of every second entry (``<name>-copy``), so of the grid's sizes."""
    models = cfg.get("models", [])
    add = [dict(copy.deepcopy(entry), name=f"{entry['name']}-copy") for entry in models[::2]]
    cfg["models"] = models + add
    names = ", ".join(e["name"] for e in models[::2])
    return cfg, f"{len(add)} more models, priced as copies of {names} (models of the sizes the grid has)"


MORE_EXAMPLES = 4  # the change "examples x4": the factor on every capped OOD testset's max_examples
EXAMPLES_CHANGE = f"examples x{MORE_EXAMPLES}"


def _more_examples(cfg: dict, plan) -> tuple[dict, str]:
    """:data:`MORE_EXAMPLES` times the examples of every OOD testset that the config caps (``max_examples``)."""
    grown = []
    blocks = cfg.setdefault("datasets", {})
    for name in sorted({t for d in plan.testsets for t, role in plan.testsets[d] if role == "ood"}):
        cap = plan.exp.dataset(name).get("max_examples")
        if cap:
            blocks.setdefault(name, {})["max_examples"] = int(cap) * MORE_EXAMPLES
            grown.append(name)
    if not grown:
        raise ValueError("the OOD testsets are used whole (no max_examples): there are no more examples to add")
    return cfg, f"{MORE_EXAMPLES}x the examples of {', '.join(grown)} (their max_examples; if the sets hold that many)"


CHANGES = {
    "checkpoints x2": _more_checkpoints,
    "seeds +2": _more_seeds,
    "models +50%": _more_models,
    EXAMPLES_CHANGE: _more_examples,
}


def change(name: str, config: dict, plan) -> tuple[dict, str]:
    """The changed config and a description of change ``name``; ValueError when the config cannot have it."""
    return CHANGES[name](copy.deepcopy(config), plan)
