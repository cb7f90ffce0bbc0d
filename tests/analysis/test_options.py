"""Every analysis setting (oodcorr.analysis.options.Options): its defaults are the filled config's,
and a wrong key or value is named."""

import pytest

from oodcorr.analysis.options import Options

from helpers import micro_config


def test_options_defaults_equal_the_filled_config_and_unknown_keys_are_named():

    from oodcorr.planning.config import analysis_options
    from oodcorr.planning.schema import fill_defaults

    from helpers import REPO

    cfg = micro_config()
    cfg["analysis"] = {}
    fill_defaults(cfg, REPO / "config/schema.yaml")
    # every key of the filled section reaches its Options field (a nested name mapped wrong would differ)
    assert Options.from_mapping(analysis_options(cfg["analysis"])) == Options()
    with pytest.raises(ValueError, match="analysis.bootstrap.blocks"):
        Options.from_mapping({"bootstrap": {"blocks": 3}})
    with pytest.raises(ValueError, match="analysis.pooling.within"):
        Options.from_mapping({"pooling": {"within": ["n_train"]}})
    # the setting the new inference replaced is named, with what replaced it
    with pytest.raises(ValueError, match="p_method was replaced by analysis.inference"):
        Options.from_mapping({"p_method": "auto"})
    got = Options.from_mapping(
        {
            "inference": "block",
            "pooling": {"by": [], "two_runs": "fixed-effect"},
            "step0": {"drop": True, "check": False},
            "near_zero": 0.2,
        }
    )
    assert (got.inference, got.pool_by, got.pool_two_runs, got.drop_step0, got.step0_check, got.near_zero) == (
        "block",
        (),
        "fixed-effect",
        True,
        False,
        0.2,
    )
    with pytest.raises(ValueError, match="unknown inference 'bootstrap'"):
        Options(inference="bootstrap")


@pytest.mark.parametrize(
    "given, named",
    [
        ({"interval": "bca"}, "unknown interval 'bca'"),
        ({"pool_two_runs": "average"}, "unknown pool_two_runs 'average'"),
        ({"block_length": 0}, "block_length must be 'auto' or a positive integer"),
        ({"pool_by": "seed"}, "pool_by must be a list of column names"),
        ({"agreement_correction": "bonf"}, "unknown agreement_correction 'bonf'"),
    ],
)
def test_options_built_by_hand_refuse_a_value_the_schema_would_have(given, named):
    """Options built in Python skip the config's schema and the CLI's choices: a wrong value that
    would otherwise fall back silently (to fisher-z, to no two-run rule) is refused by name."""
    with pytest.raises(ValueError, match=named):
        Options(**given)
