"""Which assumption of ``oodcorr design`` comes from where (:func:`choose_assumptions`): a flag (or for
the testsets' sizes the config) as given, else the pilot's estimate, else the default; every phi taken
into [0, PHI_CAP]."""

import math

from oodcorr.analysis.design.pilot import DEFAULT_PHIS, HEADLINE_PHI, PHI_CAP, choose_assumptions
from oodcorr.analysis.design.power import ItemNoise

ITEMS = {"in_domain_items": 9815, "ood_items": 1000, "persistence": 0.6, "difficulty": 0.4, "residual_sd": 0.01}
PILOT = {
    "phi": {"estimate": 0.6, "low": 0.4, "high": 0.99},
    "model_sd": {"estimate": 0.1, "pairs": 3},
    "run_sd": {"estimate": 0.05},
    "items": {**ITEMS, "accuracy": None, "how": "fitted"},
}


def test_without_a_pilot_the_defaults_and_the_flags():
    c = choose_assumptions(items={"ood": 300}, sources={"items": "config"})
    assert (c.phis, c.headline, c.model_sd, c.run_sd) == (list(DEFAULT_PHIS), HEADLINE_PHI, 0, 0)
    assert c.items == ItemNoise(ood=300) and c.sources == {"items": "config"}
    c = choose_assumptions(phi=[0.1, 0.3, 1.5], model_sd=0.2, sources={})
    assert c.phis == [0.1, 0.3, PHI_CAP] and c.headline == 0.3 and c.model_sd == 0.2  # 0.8 absent: the middle one
    assert c.items.none  # no sizes known: no item noise


def test_a_pilot_replaces_only_what_no_flag_gives():
    c = choose_assumptions(sources={}, pilot=PILOT)
    assert c.phis == [0.4, 0.6, PHI_CAP] and c.headline == 0.6
    assert (c.model_sd, c.run_sd) == (0.1, 0.05)
    assert c.items == ItemNoise(in_domain=9815, ood=1000, persistence=0.6, difficulty=0.4, residual_sd=0.01)
    assert {"phi", "model_sd", "run_sd", "items", "persistence", "residual_sd"} == set(c.sources)
    c = choose_assumptions(phi=[0.5], phi_alternatives=0.7, run_sd=0.0, sources={}, pilot=PILOT)
    assert c.phis == [0.5] and c.headline == 0.7 and c.run_sd == 0.0 and c.model_sd == 0.1
    # a size given (the config, a flag) wins over the pilot's; 'inf' is no item noise
    c = choose_assumptions(items={"ood": 300, "in_domain": math.inf, "persistence": 0.9}, sources={}, pilot=PILOT)
    assert (c.items.ood, c.items.in_domain, c.items.persistence, c.items.residual_sd) == (300, None, 0.9, 0.01)
    assert "persistence" not in c.sources and "items" not in c.sources  # the caller names its own
