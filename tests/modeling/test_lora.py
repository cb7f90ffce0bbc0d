"""LoRA adapters folded into the base weights for scoring (oodcorr.modeling.lora): the same
predictions as peft's unfolded adapter layers, logits within float rounding; the weights put
back bit for bit; and every adapter a fold does not know scored with peft, as before."""

import json
import shutil

import pytest
import torch

from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.finetune import apply_lora
from oodcorr.jobs.scoring import score
from oodcorr.modeling import lora, synthetic
from oodcorr.modeling.adaptation import get
from oodcorr.modeling.loading import load_checkpoint, load_folded, load_model, loaded_by

from helpers import LABELS, PROMPT

# the largest |logit| difference folded vs unfolded accepted here, relative to the logits' scale
# (float32: x (W + sBA)^T and x W^T + s (x A^T) B^T differ by rounding only)
REL_TOL = 1e-5


def _adapter(tmp_path, built_model_dir, method: str, lora_cfg: dict, seed=0, scale=0.2):
    """A LoRA checkpoint whose B is not zero (so the adapter changes the logits), as finetuning saves it."""
    spec = ModelEntry(name="tiny", path=str(built_model_dir), method=method)
    torch.manual_seed(seed)
    model = apply_lora(load_model(spec, None, "cpu", LABELS, 1), lora_cfg, get(method).peft_task)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * scale)
    ck = tmp_path / f"ck-{method}-{seed}"
    model.save_pretrained(ck)
    return spec, ck


def _cache(built_model_dir, method: str, n=24):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built_model_dir)
    recs = synthetic.generate("negation", n, 3)
    ids, _, extra = get(method).encode(tok, recs, labels=LABELS, prompt=PROMPT, max_length=128, model_name="t")
    return {"input_ids": ids, "method": method, "label_names": LABELS, "pad_id": tok.pad_token_id, "extra": extra}


@pytest.mark.parametrize(
    "kind, method",
    [("opt", "pattern"), ("olmo2", "pattern"), ("opt", "head")],
)
@pytest.mark.parametrize("rslora", [False, True])
def test_a_folded_adapter_predicts_what_peft_predicts(tmp_path, tiny_models, kind, method, rslora):
    cfg = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    spec, ck = _adapter(tmp_path, tiny_models[kind], method, cfg)
    if rslora:
        path = ck / "adapter_config.json"
        path.write_text(json.dumps(dict(json.loads(path.read_text()), use_rslora=True)))
    cache = _cache(tiny_models[kind], method)
    unfolded = load_checkpoint(spec, ck, None, "cpu", LABELS, 1)  # peft's layers, as before
    assert hasattr(unfolded, "peft_config")
    folded, done, why = load_folded(spec, ck, None, "cpu", LABELS, 1)
    assert why == "" and not hasattr(folded, "peft_config")
    # a pattern model folds into the lean model, a head model into transformers' own
    assert loaded_by(folded) == ("lean" if method == "pattern" else "transformers")
    want, got = score(unfolded, cache, 8, 10**6), score(folded, cache, 8, 10**6)
    base = score(load_model(spec, None, "cpu", LABELS, 1), cache, 8, 10**6)
    assert (want - base).abs().max() > 1e-2  # the adapter really changes the scores
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    assert (got - want).abs().max() <= REL_TOL * want.abs().max()
    if method == "head":  # peft trained the head whole: the fold takes its weights
        assert any(name.startswith("score.") for name in done.originals)


def test_restoring_a_fold_gives_back_the_base_weights_bit_for_bit(tmp_path, tiny_models):
    spec, ck = _adapter(
        tmp_path, tiny_models["opt"], "pattern", {"r": 4, "alpha": 8, "target_modules": ["q_proj", "fc1"]}
    )
    model = load_model(spec, lean=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    adapter, _ = lora.read_adapter(ck)
    done, why = lora.fold(model, adapter)
    assert why == "" and sorted(done.originals) == sorted(f"{m}.weight" for m in adapter.pairs)
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert sorted(changed) == sorted(done.originals)
    done.restore(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    "change, why",
    [
        ({"use_dora": True}, "use_dora"),
        ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
        ({"bias": "all"}, "bias"),
        ({"fan_in_fan_out": True}, "fan_in_fan_out"),
        ({"peft_type": "IA3"}, "IA3"),
        ({"some_future_option": [1]}, "some_future_option"),
    ],
)
def test_an_adapter_a_fold_does_not_know_is_scored_with_peft(tmp_path, tiny_models, change, why):
    spec, ck = _adapter(tmp_path, tiny_models["opt"], "pattern", {"r": 4, "alpha": 8, "target_modules": ["q_proj"]})
    path = ck / "adapter_config.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), **change)))
    adapter, reason = lora.read_adapter(ck)
    assert adapter is None and why in reason
    assert load_folded(spec, ck)[0] is None


def test_adapter_weights_a_fold_cannot_place_are_refused_whole(tmp_path, tiny_models):
    """A LoRA pair on an embedding (not a linear layer), a pair without its other half, or a tensor
    that is neither a pair nor in modules_to_save: no fold, and nothing in the model changed."""
    from safetensors.torch import load_file, save_file

    spec, ck = _adapter(tmp_path, tiny_models["opt"], "pattern", {"r": 4, "alpha": 8, "target_modules": ["q_proj"]})
    weights = load_file(ck / "adapter_model.safetensors")
    base = load_model(spec, lean=True)
    before = {k: v.clone() for k, v in base.state_dict().items()}

    def variant(name, tensors):
        d = tmp_path / name
        shutil.copytree(ck, d)
        save_file(tensors, d / "adapter_model.safetensors")
        return d

    a_key = next(k for k in weights if k.endswith("lora_A.weight"))
    half = variant("half", {k: v for k, v in weights.items() if k != a_key})
    assert "lora_B only" in lora.read_adapter(half)[1]
    odd = variant("odd", dict(weights, **{"base_model.model.model.decoder.layers.0.fc2.bias": torch.zeros(32)}))
    assert "neither a LoRA A/B pair" in lora.read_adapter(odd)[1]
    emb = "base_model.model.model.decoder.embed_tokens"
    on_embedding = variant(
        "emb",
        dict(weights, **{f"{emb}.lora_A.weight": torch.zeros(4, 32), f"{emb}.lora_B.weight": torch.zeros(300, 4)}),
    )
    adapter, _ = lora.read_adapter(on_embedding)
    done, reason = lora.fold(base, adapter)
    assert done is None and "Embedding" in reason
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())


def test_a_fold_into_a_tied_weight_is_refused(tmp_path, tiny_models):
    """OPT ties its LM head to the embeddings: folding into one would change the other. peft saves
    such an adapter with the base layer's weights (refused when read); a plain pair on the tied
    head is refused by the fold, with the model unchanged."""
    spec, ck = _adapter(tmp_path, tiny_models["opt"], "pattern", {"r": 2, "alpha": 4, "target_modules": ["lm_head"]})
    assert lora.read_adapter(ck)[0] is None
    base = load_model(spec, lean=True)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    vocab, hidden = base.lm_head.weight.shape
    pair = (torch.ones(2, hidden), torch.ones(vocab, 2), 1.0)
    done, reason = lora.fold(base, lora.Adapter("tied", {"lm_head": pair}, {}))
    assert done is None and "tied to ['model.decoder.embed_tokens.weight']" in reason
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())
