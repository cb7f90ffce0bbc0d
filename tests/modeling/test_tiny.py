"""Tiny models (oodcorr.modeling.tiny): a built model follows the umask."""

import os


def test_a_built_tiny_model_follows_the_umask(tmp_path):
    from oodcorr.modeling.tiny import build_pretrained

    from helpers import TINY_CONFIGS

    old = os.umask(0o022)
    try:
        spec = {
            "model_type": "opt",
            "vocab_size": 300,
            "config": TINY_CONFIGS["opt"],
            "pretrain": {"steps": 1, "batch_size": 2},
        }
        build_pretrained("t", spec, ["the cat sat on the mat"] * 20, tmp_path / "tiny", seed=0)
    finally:
        os.umask(old)
    weights = tmp_path / "tiny/model.safetensors"
    assert weights.stat().st_mode & 0o777 == 0o644
    assert {f.stat().st_mode & 0o777 for f in (tmp_path / "tiny").iterdir() if f.is_file()} == {0o644}
