"""Checkpoints (oodcorr.jobs.checkpoints): saved weights follow the umask like every other result."""

import os

import pytest


# ---- class 8: weights follow the umask -------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_saved_checkpoint_follows_the_umask_like_every_other_result(tmp_path, umask):
    """safetensors writes through a temporary file and leaves model.safetensors at 0600, so a
    colleague in your group could not evaluate your checkpoints; its manifest was 0644."""
    import torch
    from safetensors.torch import save_file

    from oodcorr.jobs.checkpoints import verify_checkpoint, write_ckpt_manifest

    old = os.umask(umask)
    try:
        ckpt = tmp_path / "checkpoint-4"
        ckpt.mkdir()
        save_file({"w": torch.zeros(4)}, str(ckpt / "model.safetensors"))
        torch.save({"state": 1}, ckpt / "optimizer.pt")
        (ckpt / "config.json").write_text("{}")
        write_ckpt_manifest(ckpt, 4, resumable=True)
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    modes = {f.name: f.stat().st_mode & 0o777 for f in ckpt.iterdir()}
    assert modes == dict.fromkeys(modes, want), {k: oct(v) for k, v in modes.items()}
    assert verify_checkpoint(ckpt, full=True)[0]  # the mode was set before the hashes' stat was recorded
