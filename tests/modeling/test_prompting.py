import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import oodcorr.modeling.prompting as prompting
from oodcorr.core.errors import ConfigError
from oodcorr.modeling import synthetic
from oodcorr.modeling.prompting import encode_prompts, last_positions, pad_batch, verbaliser_ids, verbaliser_logits

from helpers import LABELS, PROMPT


@pytest.fixture(params=["opt", "olmo2"])
def lm(request, tiny_models):
    d = tiny_models[request.param]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    return tok, model


def test_last_positions_left_and_right():
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    assert last_positions(right).tolist() == [2, 3, 0]
    assert last_positions(left).tolist() == [3, 3, 3]


@pytest.mark.parametrize("per_row_keep", [True, False], ids=["logits_to_keep", "all-positions"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_verbaliser_score_equals_manual_logits(lm, side, per_row_keep, monkeypatch):
    """Both paths: projecting only each row's last position (transformers 5.2x) and, where
    transformers cannot keep one position per row, projecting all and gathering."""
    assert prompting._per_row_logits_to_keep()  # the pinned transformers has it
    monkeypatch.setattr(prompting, "_per_row_logits_to_keep", lambda: per_row_keep)
    tok, model = lm
    recs = synthetic.generate("distractor", 3, 0) + synthetic.generate("in-domain", 3, 0)
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    assert len({len(x) for x in ids}) > 1  # lengths differ, so padding matters
    verb = verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)
    inp, mask = pad_batch(ids, tok.pad_token_id, side=side)
    with torch.no_grad():
        got = verbaliser_logits(model, inp, mask, verb)
        for i, x in enumerate(ids):  # one unpadded example at a time: the ground truth
            logits = model(input_ids=torch.tensor([x])).logits[0, -1]
            want = logits[verb]
            torch.testing.assert_close(got[i], want, atol=1e-4, rtol=1e-4)


def test_left_and_right_padding_agree(lm):
    tok, model = lm
    recs = synthetic.generate("passive", 5, 1)
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    verb = verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)
    with torch.no_grad():
        a = verbaliser_logits(model, *pad_batch(ids, tok.pad_token_id, "left"), verb)
        b = verbaliser_logits(model, *pad_batch(ids, tok.pad_token_id, "right"), verb)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_prompt_ends_with_real_token_and_bos_kept(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    ids, _ = encode_prompts(tok, synthetic.generate("in-domain", 2, 0), PROMPT["template"], 128)
    for x in ids:
        assert x[0] == tok.bos_token_id
        assert x[-1] not in tok.all_special_ids
        assert tok.decode(x, skip_special_tokens=True).endswith("Yes or No?")


def test_appended_eos_is_stripped(tiny_models):
    from tokenizers import processors

    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    eos = tok.eos_token
    # a tokenizer that appends EOS, as some do
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", special_tokens=[(eos, tok.eos_token_id)]
    )
    recs = synthetic.generate("in-domain", 2, 0)
    assert tok(PROMPT["template"].format(**recs[0]))["input_ids"][-1] == tok.eos_token_id
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    assert all(x[-1] != tok.eos_token_id for x in ids)


def test_left_truncation_keeps_the_question(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    rec = {"premise": " ".join(["the big cat saw the dog."] * 30), "hypothesis": "The cat saw the dog."}
    ids, n_trunc = encode_prompts(tok, [rec], PROMPT["template"], 24)
    assert n_trunc == 1 and len(ids[0]) == 24 and ids[0][0] == tok.bos_token_id
    assert tok.decode(ids[0][1:]).endswith("Question: The cat saw the dog. Yes or No?")


def test_multi_token_verbaliser_is_refused(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    with pytest.raises(ConfigError, match=r"prompt.verbalisers.entailment: ' Absolutely' is \d+ tokens"):
        verbaliser_ids(tok, {"entailment": " Absolutely", "non-entailment": " No"}, LABELS, "tiny")


def test_template_ending_in_a_special_token_keeps_it(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    template = "{premise} Question: {hypothesis} Answer:" + tok.eos_token
    ids, _ = encode_prompts(tok, synthetic.generate("in-domain", 2, 0), template, 128)
    assert all(x[-1] == tok.eos_token_id for x in ids)


def test_a_model_that_slices_logits_to_keep_its_own_way_falls_back(lm, monkeypatch):
    """A model class whose forward takes logits_to_keep but indexes every row with every
    row's position (as transformers before 5.2x did) is detected by the logits' shape and
    scored on all positions; the class is remembered."""
    tok, model = lm
    recs = synthetic.generate("negation", 4, 0)
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    verb = verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)
    inp, mask = pad_batch(ids, tok.pad_token_id, "right")
    with torch.no_grad():
        want = verbaliser_logits(model, inp, mask, verb)
    real_forward = type(model).forward
    calls = []

    def old_style(self, *args, logits_to_keep=0, **kwargs):
        calls.append(logits_to_keep if isinstance(logits_to_keep, int) else tuple(logits_to_keep.shape))
        out = real_forward(self, *args, **kwargs)
        if not isinstance(logits_to_keep, int):
            out.logits = out.logits[:, logits_to_keep, :]  # [batch, batch, 1, vocab]
        return out

    monkeypatch.setattr(type(model), "forward", old_style)
    monkeypatch.setattr(prompting, "_SLICES_OWN_WAY", set())
    with torch.no_grad():
        got = verbaliser_logits(model, inp, mask, verb)
        again = verbaliser_logits(model, inp, mask, verb)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(again, want, atol=1e-4, rtol=1e-4)
    assert calls == [(4, 1), 0, 0]  # one try with per-row positions, then all positions only
    assert prompting._SLICES_OWN_WAY == {type(model)}
