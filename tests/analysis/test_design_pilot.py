"""Which assumption of ``oodcorr design`` comes from where (:func:`choose_assumptions`): a flag as
given, else the pilot's estimate, else the default; every phi taken into [0, PHI_CAP]."""

from oodcorr.analysis.design_pilot import (
    DEFAULT_PHIS,
    HEADLINE_PHI,
    PHI_CAP,
    choose_assumptions,
    sampling_with_more_examples,
)

PILOT = {
    "phi": {"estimate": 0.6, "low": 0.4, "high": 0.99},
    "model_sd": {"estimate": 0.1, "pairs": 3},
    "run_sd": {"estimate": 0.05},
    "sampling": {"estimate": 0.3, "per_testset": {"a": {"sampling": 0.3}, "b": {}}},
}


def test_without_a_pilot_the_defaults_and_the_flags():
    c = choose_assumptions(sampling=0.2, sources={"sampling": "sizes"})
    assert (c.phis, c.headline, c.model_sd, c.run_sd, c.sampling) == (list(DEFAULT_PHIS), HEADLINE_PHI, 0, 0, 0.2)
    assert c.sources == {"sampling": "sizes"}
    c = choose_assumptions(phi=[0.1, 0.3, 1.5], model_sd=0.2, sampling=0.0, sources={})
    assert c.phis == [0.1, 0.3, PHI_CAP] and c.headline == 0.3 and c.model_sd == 0.2  # 0.8 absent: the middle one


def test_a_pilot_replaces_only_what_no_flag_gives():
    c = choose_assumptions(sampling=0.2, sources={"sampling": "sizes"}, pilot=PILOT)
    assert c.phis == [0.4, 0.6, PHI_CAP] and c.headline == 0.6
    assert (c.model_sd, c.run_sd, c.sampling) == (0.1, 0.05, 0.3)
    assert set(c.sources) == {"sampling", "phi", "model_sd", "run_sd"} and "pilot" in c.sources["sampling"]
    c = choose_assumptions(phi=[0.5], phi_alternatives=0.7, run_sd=0.0, sampling=0.2, sources={}, pilot=PILOT)
    assert c.phis == [0.5] and c.headline == 0.7 and c.run_sd == 0.0 and c.model_sd == 0.1
    no_sizes = {**PILOT, "sampling": {"estimate": 0.0, "per_testset": {"a": {}}}}
    assert choose_assumptions(sampling=0.2, sources={}, pilot=no_sizes).sampling == 0.2


def test_four_times_the_examples_halve_the_sampling_noise():
    assert sampling_with_more_examples(0.3, 4) == 0.15
