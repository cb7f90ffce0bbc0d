"""The workflow's forest plots (rule forest_plots): one per OOD pair of each in-domain set with a consensus."""

from __future__ import annotations

import itertools

import yaml

from oodcorr.planning.plan import build_plan
from oodcorr.planning.schema import fill_defaults

from helpers import REPO


def _plan(name):
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return build_plan(cfg, REPO)


def test_every_pair_of_a_consensus_set_gets_a_forest_plot_published_with_the_set():
    plan = _plan("config.yaml")
    (dom,) = plan.consensus_sets()
    ood = sorted(t for t, _ in plan.testsets[plan.runs[0].in_domain][1:])
    assert plan.forest_pairs() == {dom: list(itertools.combinations(ood, 2))}
    a = plan.paths.analysis
    wanted = {f"{a}/forest/{dom}/{x}+{y}.png" for x, y in itertools.combinations(ood, 2)}
    assert wanted <= set(plan.targets())
    staged = [png for png, _ in plan.forest_figures()]
    assert staged == [plan.paths.staged(t) for t in plan.targets() if "/forest/" in t]
    assert plan.forest_figures()[0][1] == {"in-domain set": dom, "pair": f"{ood[0]} × {ood[1]}"}


def test_one_model_has_no_forest_plot():
    plan = _plan("micro.yaml")
    assert plan.forest_pairs() == {} and not [t for t in plan.targets() if "/forest/" in t]
