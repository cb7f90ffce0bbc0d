"""The switches that reproduce the authors' code (prompt.strip_fields, prompt.truncation,
prompt.scored_position, finetune.loss): each does exactly what it says, checked against a
hand computation or the tokenizer's own behaviour; at their defaults nothing changes."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oodcorr.core.errors import ConfigError
from oodcorr.jobs.finetune import _collate, training_loss
from oodcorr.modeling import adaptation, synthetic
from oodcorr.modeling.prompting import encode_prompts, pad_batch, verbaliser_ids
from oodcorr.planning.plan import build_plan, load
from oodcorr.planning.schema import fill_defaults

from helpers import LABELS, PROMPT, REPO, micro_config

AUTHORS = {
    "template": "{premise}Question: {hypothesis} Yes or No?",
    "verbalisers": PROMPT["verbalisers"],
    "strip_fields": False,
    "truncation": "right",
    "scored_position": "padded-end",
}


@pytest.fixture(params=["opt", "olmo2"])
def lm(request, tiny_models):
    d = tiny_models[request.param]
    return AutoTokenizer.from_pretrained(d), AutoModelForCausalLM.from_pretrained(d).eval()


def _records(n=6):
    return synthetic.generate("distractor", n // 2, 0) + synthetic.generate("in-domain", n - n // 2, 1)


def _batch(tok, prompt, recs, max_length=64):
    ids, _, extra = adaptation.Pattern.encode(
        tok, recs, labels=LABELS, prompt=prompt, max_length=max_length, model_name="tiny"
    )
    feats = [{"input_ids": x, "labels": LABELS.index(r["label"])} for x, r in zip(ids, recs)]
    return _collate(tok.pad_token_id, feats), ids, extra


@pytest.mark.parametrize("prompt", [PROMPT, AUTHORS], ids=["last-token", "authors"])
def test_vocabulary_loss_equals_a_hand_computation(lm, prompt):
    """finetune.loss vocabulary on a fixed batch: the mean over examples of
    logsumexp(all vocabulary logits) - logit(gold verbaliser), the logits read where the prompt
    is scored; verbalisers: the same over the two verbaliser logits only."""
    tok, model = lm
    recs = _records()
    batch, ids, extra = _batch(tok, prompt, recs)
    verb = extra["verbaliser_ids"]
    with torch.no_grad():
        got_vocab, _ = training_loss(adaptation.Pattern, model, batch, extra, "vocabulary")
        got_verb, _ = training_loss(adaptation.Pattern, model, batch, extra, "verbalisers")
        vocab_terms, verb_terms = [], []
        for x, r in zip(ids, recs):
            if prompt.get("scored_position") == "padded-end":  # the authors' reading: pad to 64, read [-1]
                inp, mask = pad_batch([x], tok.pad_token_id, tok.padding_side, width=64)
                logits = model(input_ids=inp, attention_mask=mask).logits[0, -1].double()
            else:  # the prompt alone, its last token
                logits = model(input_ids=torch.tensor([x])).logits[0, -1].double()
            gold = verb[LABELS.index(r["label"])]
            vocab_terms.append(torch.logsumexp(logits, 0) - logits[gold])
            verb_terms.append(torch.logsumexp(logits[verb], 0) - logits[gold])
    want_vocab, want_verb = torch.stack(vocab_terms).mean(), torch.stack(verb_terms).mean()
    assert got_vocab.item() == pytest.approx(want_vocab.item(), rel=1e-4)
    assert got_verb.item() == pytest.approx(want_verb.item(), rel=1e-4)
    assert got_vocab.item() > got_verb.item()  # the vocabulary's mass beyond the two verbalisers


def test_vocabulary_loss_needs_a_vocabulary():
    with pytest.raises(ConfigError, match="vocabulary needs the pattern method"):
        training_loss(adaptation.Head, None, {"labels": torch.tensor([0])}, {}, "vocabulary")


def _long_record():
    return {
        "premise": " ".join(["the big cat saw the dog in the park."] * 12),
        "hypothesis": "The cat saw the dog.",
        "label": "entailment",
    }


def test_right_truncation_loses_the_question_as_the_tokenizer_does(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    rec = _long_record()
    text = PROMPT["template"].format(**rec)
    right, n_right = encode_prompts(tok, [rec], PROMPT["template"], 24, truncation="right")
    left, n_left = encode_prompts(tok, [rec], PROMPT["template"], 24, truncation="left")
    assert n_right == n_left == 1 and len(right[0]) == len(left[0]) == 24
    # right: exactly what the tokenizer's own truncation keeps; the question is gone
    assert right[0] == tok(text, truncation=True, max_length=24)["input_ids"]
    assert "Question" not in tok.decode(right[0]) and tok.decode(right[0][1:]).startswith("the big cat")
    # left (the default) keeps the BOS, the hypothesis and the question
    assert left[0][0] == tok.bos_token_id and tok.decode(left[0][1:]).endswith("The cat saw the dog. Yes or No?")


def test_right_truncation_keeps_an_appended_special_token_where_the_authors_reading_keeps_it(tiny_models):
    from tokenizers import processors

    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    bos, eos = tok.bos_token, tok.eos_token
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, tok.bos_token_id), (eos, tok.eos_token_id)]
    )
    rec = _long_record()
    text = PROMPT["template"].format(**rec)
    kept, _ = encode_prompts(tok, [rec], PROMPT["template"], 24, truncation="right", keep_appended=True)
    assert kept[0] == tok(text, truncation=True, max_length=24)["input_ids"] and kept[0][-1] == tok.eos_token_id
    stripped, _ = encode_prompts(tok, [rec], PROMPT["template"], 24, truncation="right")
    assert stripped[0][-1] != tok.eos_token_id and len(stripped[0]) == 24


def test_strip_fields_false_inserts_the_fields_as_they_are(tiny_models):
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    rec = {"premise": " The cat sat. ", "hypothesis": "A cat sat.\n", "label": "entailment"}
    template = AUTHORS["template"]
    as_is, _ = encode_prompts(tok, [rec], template, 64, strip_fields=False)
    stripped, _ = encode_prompts(tok, [rec], template, 64)
    assert tok.decode(as_is[0], skip_special_tokens=True) == " The cat sat. Question: A cat sat.\n Yes or No?"
    assert tok.decode(stripped[0], skip_special_tokens=True) == "The cat sat.Question: A cat sat. Yes or No?"


@pytest.mark.parametrize("room", [4, -8], ids=["longer-than-every-prompt", "some-prompts-truncated"])
def test_padded_end_reads_what_the_authors_code_reads(lm, room):
    """scored_position padded-end: the logits the authors' code reads, i.e. the tokenizer's own
    encoding padded to max_length (padding="max_length", truncation=True), the model called with
    ids and mask, position -1; a pad position for prompts shorter than max_length, so not the
    last-token score."""
    tok, model = lm
    recs = _records()
    longest = max(len(x) for x in encode_prompts(tok, recs, AUTHORS["template"], 512, strip_fields=False)[0])
    max_length = longest + room
    batch, ids, extra = _batch(tok, AUTHORS, recs, max_length)
    assert extra["position"] == "padded-end" and extra["pad_to"] == max_length
    texts = [AUTHORS["template"].format(premise=r["premise"], hypothesis=r["hypothesis"]) for r in recs]
    enc = tok(texts, truncation=True, padding="max_length", max_length=max_length, return_tensors="pt")
    verb = verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)
    with torch.no_grad():
        want = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, -1, verb]
        got = adaptation.Pattern.label_logits(model, batch["input_ids"], batch["attention_mask"], extra)
        default = adaptation.Pattern.label_logits(
            model, batch["input_ids"], batch["attention_mask"], {"verbaliser_ids": verb}
        )
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    pad = enc["attention_mask"][:, -1] == 0  # position -1 is a pad: the authors' score is not the last token's
    assert pad.any() and (pad.all() or room < 0)
    assert not torch.allclose(got[pad], default[pad], atol=1e-3)
    if not pad.all():  # a prompt cut to max_length: its last position is its last (kept) token
        torch.testing.assert_close(got[~pad], want[~pad], atol=1e-4, rtol=1e-4)


def test_padded_end_under_left_padding_is_the_last_token(tiny_models):
    """OPT counts positions from the attention mask: padded on the left, the authors' position
    -1 is the prompt's last token, and the score equals the default one."""
    tok = AutoTokenizer.from_pretrained(tiny_models["opt"])
    model = AutoModelForCausalLM.from_pretrained(tiny_models["opt"]).eval()
    tok.padding_side = "left"
    recs = _records()
    batch, _, extra = _batch(tok, dict(AUTHORS, strip_fields=True, truncation="left"), recs)
    assert extra["padding_side"] == "left"
    with torch.no_grad():
        got = adaptation.Pattern.label_logits(model, batch["input_ids"], batch["attention_mask"], extra)
        default = adaptation.Pattern.label_logits(
            model, batch["input_ids"], batch["attention_mask"], {"verbaliser_ids": extra["verbaliser_ids"]}
        )
    torch.testing.assert_close(got, default, atol=1e-4, rtol=1e-4)


def _micro(**changes):
    cfg = micro_config()
    cfg["prompt"] = copy.deepcopy(PROMPT)  # the schema's default, spelled out
    for key, value in changes.items():
        block, _, leaf = key.partition(".")
        cfg.setdefault(block, {})[leaf] = value
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return cfg


def _params(cfg):
    plan = build_plan(copy.deepcopy(cfg), REPO)
    run = plan.runs[0]

    class WC:
        model, indomain, ntrain, seed = run.model, run.in_domain, str(run.n_train), str(run.seed)
        testset = "synth-overlap"

        def keys(self):
            return ["model", "indomain", "ntrain", "seed", "testset"]

    return plan.tokenize_params(WC()), plan.finetune_params(WC()), plan.eval_params(WC())


@pytest.mark.parametrize(
    "key,value",
    [
        ("prompt.strip_fields", True),
        ("prompt.truncation", "left"),
        ("prompt.scored_position", "last-token"),
        ("finetune.loss", "verbalisers"),
    ],
)
def test_a_switch_spelled_out_at_its_default_changes_no_param(key, value):
    """Params are what Snakemake compares to decide on reruns: spelling a default out (or
    upgrading from a version without the switch) must leave every one as it was."""
    assert _params(_micro(**{key: value})) == _params(_micro())


@pytest.mark.parametrize(
    "key,value,changes",
    [
        ("prompt.strip_fields", False, {"tokenize", "finetune"}),
        ("prompt.truncation", "right", {"tokenize", "finetune"}),
        ("prompt.scored_position", "padded-end", {"tokenize", "finetune"}),
        ("finetune.loss", "vocabulary", {"finetune"}),
    ],
)
def test_a_switch_changes_the_params_of_what_it_changes_and_no_other(key, value, changes):
    base = dict(zip(("tokenize", "finetune", "eval"), _params(_micro())))
    got = dict(zip(("tokenize", "finetune", "eval"), _params(_micro(**{key: value}))))
    assert {k for k in base if base[k] != got[k]} == changes


def test_the_vocabulary_loss_on_a_head_model_is_refused_when_planning():
    cfg = _micro(**{"finetune.loss": "vocabulary"})
    cfg["models"][0]["method"] = "head"
    with pytest.raises(ConfigError, match=r"finetune.loss: vocabulary .* needs method pattern"):
        build_plan(cfg, REPO)


def test_a_models_own_prompt_switch_is_checked():
    """A model's `prompt` override is checked by the schema as the global prompt is, naming the model."""
    cfg = _micro()
    cfg["models"][0]["prompt"] = {"scored_position": "first-token"}
    with pytest.raises(ConfigError, match=r"models\[micro-opt\].prompt.scored_position: 'first-token' is not one"):
        load(cfg, REPO)
    cfg["models"][0]["prompt"] = {"truncation": "right"}
    assert build_plan(cfg, REPO).models["micro-opt"].prompt["truncation"] == "right"
