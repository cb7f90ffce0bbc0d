import re
from collections import Counter

import pytest

from oodcorr.modeling import synthetic


@pytest.mark.parametrize("shift", list(synthetic.SHIFTS))
def test_deterministic_and_balanced(shift):
    a = synthetic.generate(shift, 301, seed=3)
    b = synthetic.generate(shift, 301, seed=3)
    assert a == b
    c = synthetic.generate(shift, 301, seed=4)
    assert [r["premise"] for r in a] != [r["premise"] for r in c]
    counts = Counter(r["label"] for r in a)
    assert counts == {"entailment": 151, "non-entailment": 150}
    assert all(r["meta"]["shift"] == shift for r in a)


def test_splits_are_independent_streams():
    train = synthetic.generate("in-domain", 200, 0, split="train")
    test = synthetic.generate("in-domain", 200, 0, split="test")
    pairs_train = {(r["premise"], r["hypothesis"]) for r in train}
    pairs_test = {(r["premise"], r["hypothesis"]) for r in test}
    assert len(pairs_train & pairs_test) < 10


def _words(s):
    return set(re.findall(r"[a-z]+", s.lower()))


def test_in_domain_labels_follow_from_words():
    # entailed hypotheses only use premise words; non-entailed ones introduce a new word
    for r in synthetic.generate("in-domain", 400, 1):
        new = _words(r["hypothesis"]) - _words(r["premise"])
        assert (not new) == (r["label"] == "entailment"), r


def test_lexical_overlap_non_entailments_fully_overlap():
    recs = synthetic.generate("lexical-overlap", 400, 1)
    non = [r for r in recs if r["label"] == "non-entailment"]
    assert non and all(_words(r["hypothesis"]) <= _words(r["premise"]) for r in non)
    assert all(r["meta"]["kind"] == "swap-roles" for r in non)


def test_heldout_vocab_is_unseen_in_training_data():
    train_words = set()
    for r in synthetic.generate("in-domain", 2000, 0, split="train"):
        train_words |= _words(r["premise"]) | _words(r["hypothesis"])
    held = set(synthetic.HELDOUT_NOUNS) | {v[0] for v in synthetic.HELDOUT_VERBS}
    assert not (held & train_words)
    test_words = set()
    for r in synthetic.generate("heldout-vocab", 200, 0):
        test_words |= _words(r["premise"])
    assert test_words & held


def test_negation_and_passive_and_distractor_are_marked():
    assert all(
        "did not" in r["premise"] + r["hypothesis"] or r["meta"]["kind"].startswith("pos-")
        for r in synthetic.generate("negation", 200, 0)
    )
    assert all(" was " in r["premise"] and " by " in r["premise"] for r in synthetic.generate("passive", 100, 0))
    assert all(", while " in r["premise"] for r in synthetic.generate("distractor", 100, 0))


def test_no_length_shortcut_in_domain():
    # hypothesis length must not give the label away (it did in an early version)
    recs = synthetic.generate("in-domain", 4000, 0, split="train")
    mean = {
        lab: sum(len(r["hypothesis"].split()) for r in recs if r["label"] == lab) / sum(r["label"] == lab for r in recs)
        for lab in synthetic.LABELS
    }
    assert abs(mean["entailment"] - mean["non-entailment"]) < 0.2, mean
    has_place = {
        lab: sum(" in the " in r["hypothesis"] for r in recs if r["label"] == lab)
        / sum(r["label"] == lab for r in recs)
        for lab in synthetic.LABELS
    }
    assert abs(has_place["entailment"] - has_place["non-entailment"]) < 0.03, has_place


def test_unknown_shift_is_an_error():
    with pytest.raises(ValueError, match="unknown synthetic shift 'nope'"):
        synthetic.generate("nope", 10, 0)


def test_pretraining_corpus_is_deterministic_and_mentions_prompt():
    a = synthetic.pretraining_corpus(500, 2)
    assert a == synthetic.pretraining_corpus(500, 2)
    assert any("Question:" in line for line in a)
    assert any("otter" in line or "zebra" in line for line in a)  # held-out words are in pretraining text
