"""The checks of what the plan built from a config: the models' resources and the runs.

:func:`oodcorr.planning.plan.build_plan` calls them once it has built the models (their resources per
rule) and the runs, after :func:`oodcorr.planning.checks.check_config`; each raises
:class:`~oodcorr.core.errors.ConfigError` naming the key, or returns warnings:

* :func:`check_placement` -- a partition or account set for some of a rule's jobs only;
* :func:`check_schedules` -- fewer checkpoints per run than the analysis needs;
* :func:`check_analysis_size` -- an analysis of more cells than ``analysis.max_cells``.

The plan's units are not imported here (the plan imports this module): what is read of them is said
in each docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core.defaults import ANALYSIS
from ..core.errors import ConfigError
from ..core.limits import analysis_cells, analysis_too_large

# placement keys that a profile's default-resources set (profiles/slurm does): all of a rule's jobs or none
PROFILE_PLACEMENT = ("slurm_partition", "slurm_account")


def check_placement(models: Mapping[str, Any]) -> None:
    """A partition or account is set for all of a rule's jobs or for none of them.

    ``models`` are the plan's :class:`oodcorr.planning.units.ModelSpec` by name (their per-rule
    ``resources``). Snakemake takes a rule's resource from the rule, for every job: a job whose
    model has no partition would get none at all -- not the profile's -- so a half-set key is an
    error. (A constraint, qos or slurm_extra for some models only is fine: the others get none.)"""
    rules = next(iter(models.values())).resources if models else {}
    for rule in rules:
        for key in PROFILE_PLACEMENT:
            have = {
                m: spec.resources[rule] for m, spec in models.items() if getattr(spec.resources[rule], key) is not None
            }
            if have and len(have) < len(models):
                missing = sorted(set(models) - set(have))
                first = next(iter(have.values())).where(key)
                raise ConfigError(
                    f"{first}: {key} is set for the {rule} jobs of {', '.join(sorted(have))} but not for those "
                    f"of {', '.join(missing)}; Snakemake takes it from the rule for all its jobs, so those would "
                    f"get none (not the profile's). Set it for all of them too, e.g. resources.default.{key} "
                    f"or resources.{rule}.{key}"
                )


def analysis_min_points(residualiser: str, gam_min_points: int = ANALYSIS["gam"]["min_points"]) -> int:
    """Checkpoints a run needs for one residualiser's cells to be computed: k + 3 with k
    covariates (in-domain score, plus the step with ``+step``) for OLS, at least
    ``gam.min_points`` for a GAM (the rule of oodcorr.analysis.cell.correlate.min_points)."""
    need = (2 if residualiser.endswith("+step") else 1) + 3
    return max(need, gam_min_points) if residualiser.startswith("gam") else need


def check_schedules(runs: Iterable[Any], analysis: dict) -> list[str]:
    """Fewer checkpoints than every residualiser needs: every cell of the run would be NaN, an
    error; fewer than some residualiser needs: that residualiser's cells are NaN, a warning.

    ``runs`` are the plan's runs (:class:`oodcorr.planning.units.Run`: model, n_train, steps, max_steps,
    series); not imported here, since the plan imports this module. ``analysis`` is the config's
    section with its defaults filled in (:func:`oodcorr.planning.schema.fill_defaults`)."""
    residualisers = list(analysis["residualisers"])
    gam_min = int(analysis["gam"]["min_points"])
    drop0 = bool(analysis["step0"]["drop"])
    need = {r: analysis_min_points(r, gam_min) for r in residualisers}
    warnings, seen = [], set()
    for run in runs:
        n = len(run.steps) - (1 if drop0 and 0 in run.steps else 0)
        key = (
            f"models[{run.model}].series.checkpoints"
            if run.series
            else f"finetune.checkpoints (model {run.model}, n_train {run.n_train})"
        )
        counted = f"{n} checkpoint(s) {list(run.steps)}" + (" without step 0 (analysis.step0.drop)" if drop0 else "")
        if n < min(need.values()):
            fewest = min(need.values())
            every = run.max_steps // (fewest - (0 if drop0 else 1))
            hint = f" (`every: {every}` gives {fewest})" if every >= 1 and not run.series else ""
            more = "list more checkpoints" if run.series else "save checkpoints more often"
            raise ConfigError(
                f"{key}: a run of {run.max_steps} steps saves {counted}, but the analysis needs at "
                f"least {fewest} per run ({', '.join(f'{r}: {k}' for r, k in need.items())}), so "
                f"every cell would be NaN; {more}{hint}"
            )
        short = [r for r, k in need.items() if n < k]
        if short and (run.model, run.n_train) not in seen:
            seen.add((run.model, run.n_train))
            warnings.append(
                f"{key}: runs save {counted}; the {', '.join(short)} residualiser(s) need "
                f"{', '.join(str(need[r]) for r in short)}, so their cells will be NaN"
            )
    return warnings


def check_analysis_size(runs: Iterable[Any], testsets: Mapping[str, Iterable[tuple[str, str]]], analysis: dict) -> None:
    """An analysis of more cells (each run's OOD pairs x methods x residualisers) than
    ``analysis.max_cells``: refused while planning, with the count and the key that allows it, rather
    than found after the evaluations, in an analysis job that runs for hours.

    ``testsets`` are the plan's (in-domain set -> (testset, role) pairs); ``runs`` its runs;
    ``analysis`` the config's section with its defaults filled in."""
    n_ood = {d: sum(1 for _, role in ts if role != "in-domain") for d, ts in testsets.items()}
    cells, detail = analysis_cells(
        [n_ood.get(run.in_domain, 0) for run in runs], len(analysis["methods"]), len(analysis["residualisers"])
    )
    limit = int(analysis["max_cells"])
    if cells > limit:
        raise ConfigError(
            "analysis.max_cells: "
            + analysis_too_large(
                cells,
                detail,
                limit,
                what="the analysis of this config",
                limit_name="analysis.max_cells" + (" (its default)" if limit == ANALYSIS["max_cells"] else ""),
                fewer="ood_testsets, analysis.methods or analysis.residualisers",
                allow=f"set `analysis: {{max_cells: {cells}}}`",
            )
        )
