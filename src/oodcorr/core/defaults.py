"""The defaults that Python reads, written once; the schema states what each key may be and gives
them no default. A switch at its default stays out of every param, so spelling it out reruns nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

ANALYSIS: dict[str, Any] = {
    "methods": ["pearson"],
    "score": "accuracy",
    "residualisers": ["spline"],
    "inference": "modified-t",
    "correction": "holm",
    # across the pairs of the agreement table (the answer): Benjamini-Hochberg, the false discovery
    # rate of its statements (docs/answer.md#many-pairs-the-false-discovery-rate)
    "agreement_correction": "bh",
    "alpha": 0.05,
    "level": 0.95,
    "min_n_eff": 5,
    "near_zero": 0.3,
    "seed": 0,
    "pooling": {"by": ["n_train"], "two_runs": "none"},
    "step0": {"drop": False, "check": True},
    "bootstrap": {"n_boot": 2000, "block_length": "auto", "interval": "fisher-z"},
    "permutation": {"n_perm": 2000},
    "example_bootstrap": {"n_boot": 200},
    "gam": {"n_splines": 10, "min_points": 8},
    # the most cells (OOD pairs x methods x residualisers, summed over runs) an analysis computes
    # unless asked for more; changes no result, so it is in no param (planning.config.analysis_options)
    "max_cells": 200_000,
}


# prompt.*: how a prompt is read (config/schema.yaml explains each)
READING: dict[str, Any] = {"strip_fields": True, "truncation": "left", "scored_position": "last-token"}

# finetune.*: the training loss of pattern models, and where the Trainer logs it
FINETUNE: dict[str, Any] = {"loss": "verbalisers", "report_to": "auto"}

# per model rule: what one job asks for by default. Evaluate's runtime is minutes per checkpoint.
RESOURCES: dict[str, dict[str, Any]] = {
    "build_tiny_model": {"mem_mb": 2000, "runtime": 30},
    "convert_gguf": {"mem_mb": 4000, "runtime": 30},
    "tokenize_testset": {"mem_mb": 2000, "runtime": 30},
    "finetune": {"mem_mb": 4000, "runtime": 60},
    "evaluate": {"mem_mb": 2000, "runtime": 10},
}

# partial_correlations analyses its runs in this many processes (the same table whatever the number)
LOCAL_THREADS: dict[str, int] = {"partial_correlations": 2}


def filled(given: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with every key it lacks taken from ``defaults``, nested mappings in turn; the given keys
    first, then the missing ones in the defaults' order (as the schema validator fills them)."""
    out = dict(given or {})
    for key, default in defaults.items():
        if key not in out:
            out[key] = copy.deepcopy(default)
        elif isinstance(default, Mapping) and isinstance(out[key], Mapping):
            out[key] = filled(out[key], default)
    return out
