"""Testsets that share items (oodcorr.analysis.items.shared_items): a group's tasks at the bottom of its
tree, which pairs share items and why, in words."""

from __future__ import annotations

from oodcorr.analysis.items.shared_items import leaves, refusals

# lm-evaluation-harness's group_subtasks: mmlu of two subgroups, a custom group reusing a subject,
# leaves listed with no subtasks (as the harness writes them)
GROUPS = {
    "mmlu": ["mmlu_stem", "mmlu_humanities"],
    "mmlu_stem": ["mmlu_anatomy", "mmlu_astronomy"],
    "mmlu_humanities": ["mmlu_law"],
    "mine": ["mmlu_astronomy", "arc_easy"],
    "mmlu_anatomy": [],
}


def test_a_group_is_the_tasks_at_the_bottom_of_its_tree():
    got = leaves(GROUPS)
    assert got["mmlu"] == {"mmlu_anatomy", "mmlu_astronomy", "mmlu_law"}
    assert got["mmlu_stem"] == {"mmlu_anatomy", "mmlu_astronomy"}
    assert got["mine"] == {"mmlu_astronomy", "arc_easy"}
    assert "mmlu_anatomy" not in got  # a task with no subtasks is its own
    # a damaged file's cycle is not followed round
    assert leaves({"a": ["b"], "b": ["a", "c"]}) == {"a": {"c"}, "b": {"c"}}
    assert leaves(None) == {}


def test_pairs_that_share_items_are_named_with_how():
    ood = ["arc_easy", "mine", "mmlu", "mmlu_anatomy", "mmlu_law", "mmlu_stem", "piqa"]
    got = refusals("lambada", ood, leaves(GROUPS))
    assert set(got) == {
        ("arc_easy", "mine"),
        ("mine", "mmlu"),
        ("mine", "mmlu_stem"),
        ("mmlu", "mmlu_anatomy"),
        ("mmlu", "mmlu_law"),
        ("mmlu", "mmlu_stem"),
        ("mmlu_anatomy", "mmlu_stem"),
    }
    assert "mmlu and mmlu_anatomy share items (mmlu includes mmlu_anatomy)" in got[("mmlu", "mmlu_anatomy")]
    assert "(mmlu includes the group mmlu_stem)" in got[("mmlu", "mmlu_stem")]
    assert "(both include mmlu_astronomy)" in got[("mine", "mmlu")]
    assert "(mine includes arc_easy)" in got[("arc_easy", "mine")]  # the group named as the one including
    assert refusals("lambada", ood, {}) == {}


def test_a_testset_sharing_items_with_the_in_domain_one_has_every_pair_refused():
    got = refusals("mmlu", ["arc_easy", "mmlu_anatomy", "piqa"], leaves(GROUPS))
    assert set(got) == {("arc_easy", "mmlu_anatomy"), ("mmlu_anatomy", "piqa")}
    assert got[("arc_easy", "mmlu_anatomy")].startswith(
        "mmlu_anatomy shares items with the in-domain testset mmlu (mmlu includes mmlu_anatomy)"
    )
