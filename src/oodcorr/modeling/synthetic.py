"""A seeded, deterministic synthetic NLI task with documented distribution shifts."""

from __future__ import annotations

import random
from collections import namedtuple
from collections.abc import Callable

LABELS = ("entailment", "non-entailment")

NOUNS = [
    "cat",
    "dog",
    "bird",
    "fox",
    "horse",
    "cow",
    "lion",
    "tiger",
    "bear",
    "wolf",
    "rabbit",
    "mouse",
    "duck",
    "goat",
    "sheep",
    "frog",
    "pig",
    "owl",
]
HELDOUT_NOUNS = ["otter", "zebra", "camel", "eagle", "panda", "moose", "llama", "badger"]
# (past, base) forms
VERBS = [
    ("chased", "chase"),
    ("saw", "see"),
    ("followed", "follow"),
    ("helped", "help"),
    ("pushed", "push"),
    ("watched", "watch"),
    ("visited", "visit"),
    ("called", "call"),
    ("found", "find"),
    ("kicked", "kick"),
    ("carried", "carry"),
    ("bit", "bite"),
]
HELDOUT_VERBS = [
    ("greeted", "greet"),
    ("admired", "admire"),
    ("ignored", "ignore"),
    ("warned", "warn"),
    ("hugged", "hug"),
]
ADJECTIVES = ["big", "small", "red", "old", "young", "happy", "angry", "quiet", "brown", "tall"]
HELDOUT_ADJECTIVES = ["sleepy", "clever", "shy", "grey"]
PLACES = ["park", "garden", "forest", "house", "river", "field", "barn", "city", "lake", "hill"]
HELDOUT_PLACES = ["desert", "valley", "harbour"]
PASSIVE = {"saw": "seen", "bit": "bitten"}  # irregular participles; the rest use the past form


Vocab = namedtuple("Vocab", "nouns verbs adjectives places")


TRAIN_VOCAB = Vocab(NOUNS, VERBS, ADJECTIVES, PLACES)
HELDOUT_VOCAB = Vocab(HELDOUT_NOUNS, HELDOUT_VERBS, HELDOUT_ADJECTIVES, HELDOUT_PLACES)


def _event(rng: random.Random, v: Vocab) -> dict:
    s, o = rng.sample(v.nouns, 2)
    return {
        "s": s,
        "o": o,
        "v": rng.choice(v.verbs),
        "adj": rng.choice(v.adjectives) if rng.random() < 0.7 else None,
        "place": rng.choice(v.places) if rng.random() < 0.7 else None,
    }


def _np(noun: str, adj: str | None = None) -> str:
    return f"the {adj} {noun}" if adj else f"the {noun}"


def _clause(e: dict, negated: bool = False, with_adj=True, with_place=True) -> str:
    verb = f"did not {e['v'][1]}" if negated else e["v"][0]
    out = f"{_np(e['s'], e['adj'] if with_adj else None)} {verb} {_np(e['o'])}"
    if with_place and e["place"]:
        out += f" in the {e['place']}"
    return out


def _sentence(clause: str) -> str:
    return clause[0].upper() + clause[1:] + "."


def _other(rng: random.Random, pool: list, exclude) -> object:
    return rng.choice([x for x in pool if x not in exclude])


def _detail(rng: random.Random, e: dict) -> tuple[bool, bool, str]:
    """Which optional details (adjective, place) a hypothesis keeps."""
    options = [(True, True, "identical")]
    if e["adj"]:
        options.append((False, True, "drop-adjective"))
    if e["place"]:
        options.append((True, False, "drop-place"))
        if e["adj"]:
            options.append((False, False, "drop-both"))
    return rng.choice(options)


def _entailed(rng: random.Random, e: dict, negated: bool = False) -> tuple[str, str]:
    """A restatement that may drop optional detail; returns (hypothesis, kind)."""
    keep_adj, keep_place, kind = _detail(rng, e)
    return _sentence(_clause(e, negated, keep_adj, keep_place)), kind


def _changed(rng: random.Random, e: dict, v: Vocab, negated: bool = False) -> tuple[str, str]:
    """One visible fact changed to a word absent from the premise; returns (hypothesis, kind)."""
    keep_adj, keep_place, _ = _detail(rng, e)
    h = dict(e)
    options = ["change-subject", "change-verb", "change-object"]
    if e["place"] and keep_place:
        options.append("change-place")
    kind = rng.choice(options)
    if kind == "change-subject":
        h["s"] = _other(rng, v.nouns, (e["s"], e["o"]))
    elif kind == "change-object":
        h["o"] = _other(rng, v.nouns, (e["s"], e["o"]))
    elif kind == "change-verb":
        h["v"] = _other(rng, v.verbs, (e["v"],))
    else:
        h["place"] = _other(rng, v.places, (e["place"],))
    return _sentence(_clause(h, negated, keep_adj, keep_place)), kind


def _swapped(rng: random.Random, e: dict, negated: bool = False) -> str:
    """Subject and object exchanged: every word still occurs in the premise."""
    _, keep_place, _ = _detail(rng, e)
    h = dict(e, s=e["o"], o=e["s"], adj=None)
    return _sentence(_clause(h, negated, False, keep_place))


def _in_domain(rng, label, v=TRAIN_VOCAB):
    e = _event(rng, v)
    p = _sentence(_clause(e))
    h, kind = _entailed(rng, e) if label == "entailment" else _changed(rng, e, v)
    return p, h, kind


def _lexical_overlap(rng, label):
    e = _event(rng, TRAIN_VOCAB)
    p = _sentence(_clause(e))
    if label == "entailment":
        h, kind = _entailed(rng, e)
    else:
        h, kind = _swapped(rng, e), "swap-roles"
    return p, h, kind


def _negation(rng, label):
    e = _event(rng, TRAIN_VOCAB)
    p_neg = rng.random() < 0.5
    p = _sentence(_clause(e, negated=p_neg))
    if label == "entailment":
        h, kind = _entailed(rng, e, negated=p_neg)
        kind = ("neg-" if p_neg else "pos-") + kind
    else:
        h, _ = _entailed(rng, e, negated=not p_neg)  # the same event with the opposite polarity
        kind = "neg-premise-pos-hypothesis" if p_neg else "pos-premise-neg-hypothesis"
    return p, h, kind


def _distractor(rng, label):
    e = _event(rng, TRAIN_VOCAB)
    d = _event(rng, TRAIN_VOCAB)
    while d["s"] in (e["s"], e["o"]) or d["o"] in (e["s"], e["o"]):
        d = _event(rng, TRAIN_VOCAB)
    d["place"] = d["place"] or _other(rng, PLACES, (e["place"],))
    p = _sentence(f"{_clause(e)}, while {_np(d['s'])} {d['v'][0]} {_np(d['o'])} near the {d['place']}")
    if label == "entailment":
        h, kind = _entailed(rng, e)
    elif rng.random() < 0.5:
        # words from both clauses: subject from the first, verb and object from the second
        h = _sentence(
            _clause(
                dict(e, v=d["v"] if d["v"] != e["v"] else _other(rng, VERBS, (e["v"],)), o=d["o"]),
                with_adj=False,
                with_place=False,
            )
        )
        kind = "mix-clauses"
    else:
        h, kind = _changed(rng, e, TRAIN_VOCAB)
    return p, h, kind


def _passive(rng, label):
    e = _event(rng, TRAIN_VOCAB)
    participle = PASSIVE.get(e["v"][0], e["v"][0])
    p = f"{_np(e['o'])} was {participle} by {_np(e['s'], e['adj'])}"
    if e["place"]:
        p += f" in the {e['place']}"
    p = _sentence(p)
    if label == "entailment":
        h, kind = _entailed(rng, e)
    elif rng.random() < 0.5:
        h, kind = _swapped(rng, e), "swap-roles"
    else:
        h, kind = _changed(rng, e, TRAIN_VOCAB)
    return p, h, kind


SHIFTS: dict[str, Callable] = {
    "in-domain": _in_domain,
    "lexical-overlap": _lexical_overlap,
    "negation": _negation,
    "heldout-vocab": lambda rng, label: _in_domain(rng, label, HELDOUT_VOCAB),
    "distractor": _distractor,
    "passive": _passive,
}


def generate(shift: str, n: int, seed: int, split: str = "test") -> list[dict]:
    """``n`` examples of ``shift``, exactly balanced (n//2 per label, the odd one entailment)."""
    if shift not in SHIFTS:
        raise ValueError(f"unknown synthetic shift {shift!r}; known: {', '.join(SHIFTS)}")
    # a seed stable across Python processes (no hash randomisation)
    rng = random.Random(seed * 1_000_003 + sum((i + 1) * ord(c) for i, c in enumerate(f"{shift}/{split}")))
    labels = [LABELS[i % 2] for i in range(n)]
    rng.shuffle(labels)
    make = SHIFTS[shift]
    out = []
    for i, label in enumerate(labels):
        p, h, kind = make(rng, label)
        out.append(
            {
                "premise": p,
                "hypothesis": h,
                "label": label,
                "meta": {"shift": shift, "kind": kind, "split": split, "idx": i},
            }
        )
    return out


def pretraining_corpus(
    n_lines: int,
    seed: int,
    template: str = "{premise} Question: {hypothesis} Yes or No?",
    answers: tuple[str, ...] = ("Yes", "No"),
) -> list[str]:
    """Unlabelled text for the tiny models' causal-LM pretraining and tokenizer training."""
    rng = random.Random(seed * 7919 + 17)
    shifts = list(SHIFTS)
    lines = []
    for _ in range(n_lines):
        shift = rng.choice(shifts)
        r = rng.random()
        label = "entailment" if r < 0.7 else rng.choice(LABELS)
        p, h, _ = SHIFTS[shift](rng, label)
        if r < 0.3:
            lines.append(p)
        elif r < 0.7:
            lines.append(f"{p} {h}")
        else:
            lines.append(template.format(premise=p, hypothesis=h) + " " + rng.choice(answers))
    return lines
