"""The model lifecycle of an evaluation job (oodcorr.modeling.loading.CheckpointLoader): adapters swapped into
one base model, or loaded afresh where their settings differ."""

import json
from pathlib import Path

import pandas as pd
import pytest

from helpers import (
    LABELS,
    checkpoint_series,
    synthetic_testset,
)


@pytest.mark.parametrize("lean", ["0", "1"])
def test_run_unit_swaps_adapters_whose_config_differs_only_in_the_order_of_target_modules(
    tmp_path, tiny_models, monkeypatch, lean
):
    """peft writes target_modules (a set) in an order that changes between processes, so one run's
    checkpoints can differ in that order (a finetuning job resumed after a kill). With peft's adapter
    layers (OODCORR_LEAN=0, or an adapter a fold does not know) such an adapter is still swapped in,
    not loaded afresh with its base model; one whose settings really differ (lora_alpha) is loaded
    afresh. Folded, every adapter of the run is folded into the one base model. Either way the
    predictions equal a fresh load's, bit for bit."""

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run

    monkeypatch.setenv("OODCORR_LEAN", lean)
    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    data, meta, cache = synthetic_testset(tmp_path, tiny, spec, "negation", 30, 5)
    cks = checkpoint_series(tmp_path, tiny, spec, True, LABELS, n_ckpt=3)

    def rewrite_config(ck: dict, change) -> None:
        path = Path(ck["checkpoint"]) / "adapter_config.json"
        cfg = json.loads(path.read_text())
        change(cfg)
        path.write_text(json.dumps(cfg, indent=2))
        write_ckpt_manifest(Path(ck["checkpoint"]), ck["step"], resumable=False)

    first = json.loads((Path(cks[0]["checkpoint"]) / "adapter_config.json").read_text())["target_modules"]
    assert len(first) == 2
    rewrite_config(cks[1], lambda c: c.update(target_modules=first[::-1]))  # the same set, the other order
    rewrite_config(cks[2], lambda c: c.update(lora_alpha=2 * c["lora_alpha"]))  # really another adapter
    common = dict(
        job=EvalParams(spec, tiny, {"run_id": "r"}),
        tokenized=str(cache),
        batch_size=8,
        max_tokens=10**6,
    )
    one_job = evaluate_run(
        checkpoints=[dict(c, predictions=str(tmp_path / f"run{c['step']}.parquet")) for c in cks], **common
    )
    loads = [r["load"] for r in one_job["checkpoints"]]
    assert loads == (["fresh", "adapter swap", "fresh"] if lean == "0" else ["fresh", "adapter swap", "adapter swap"])
    assert {r["lora"] for r in one_job["checkpoints"]} == {"peft" if lean == "0" else "folded"}
    for c in cks:
        fresh = evaluate_run(checkpoints=[dict(c, predictions=str(tmp_path / f"ck{c['step']}.parquet"))], **common)
        assert fresh["checkpoints"][0]["load"] == "fresh"
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / f"run{c['step']}.parquet"), pd.read_parquet(tmp_path / f"ck{c['step']}.parquet")
        )
