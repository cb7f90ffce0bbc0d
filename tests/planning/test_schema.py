"""The config schema (oodcorr.planning.schema): a value of the wrong type names the key, its line
and the spelling that works."""

from __future__ import annotations

import pytest
import yaml

from oodcorr.core.errors import ConfigError
from oodcorr.planning.plan import load

from helpers import MICRO, REPO


def test_a_number_yaml_reads_as_text_gets_the_spelling_that_works(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text(MICRO.read_text().replace("learning_rate: 0.003", "learning_rate: 3e-3"))
    path.write_text(path.read_text().replace("max_steps: 16", "max_steps: 1.6e1"))
    cfg = yaml.safe_load(path.read_text())
    assert cfg["finetune"]["learning_rate"] == "3e-3"  # YAML 1.1: no dot in the mantissa, so text
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO, sources=[path])
    msg = str(e.value)
    assert (
        f"{path}:30: finetune.learning_rate: must be a number, got a string '3e-3'; YAML reads 3e-3 as text (its "
        "numbers in exponent notation need a dot and a signed exponent): write 3.0e-3"
    ) in msg, msg
    assert (
        f"{path}:28: finetune.max_steps: must be an integer, got a string '1.6e1'; YAML reads 1.6e1 as text (its "
        "numbers in exponent notation need a dot and a signed exponent): write 16\n"
    ) in msg, msg
    for fixed in ("3.0e-3", "0.003"):  # and the spelling it gives reads as a number
        assert isinstance(yaml.safe_load(f"x: {fixed}")["x"], float)


@pytest.mark.parametrize(
    "edit, unknown, required",
    [
        (lambda c: c.__setitem__("ood_testset", c.pop("ood_testsets")), "ood_testset: unknown key", "ood_testsets"),
        (
            lambda c: c["in_domain"][0].__setitem__("tset", c["in_domain"][0].pop("test")),
            "in_domain[synth].tset: unknown key; did you mean 'test'?",
            "in_domain[synth].test",
        ),
    ],
)
def test_a_misspelt_required_key_is_one_problem_not_also_a_missing_one(tmp_path, edit, unknown, required):
    """A required key written with a typo was two problems: the unknown key (with its 'did you mean')
    and then 'required key is missing' for the very key the user wrote. Now it is the one; a
    required key left out is still said, with why (it has no default)."""
    cfg = yaml.safe_load(MICRO.read_text())
    edit(cfg)
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO)
    msg = str(e.value)
    assert unknown in msg and "(1 problem)" in msg and "required key is missing" not in msg, msg
    cfg = yaml.safe_load(MICRO.read_text())
    del cfg["in_domain"][0]["test"]
    with pytest.raises(ConfigError, match=r"in_domain\[synth\]\.test: required key is missing \(it has no default\)"):
        load(cfg, REPO)
