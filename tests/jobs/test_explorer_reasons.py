"""The explorer page says why each verdict, and draws a pair that each model's own run finds with one
sign apart from a pair nothing is known of (oodcorr.jobs.figures.explorer), checked in Debian's Chromium
(the browser fixture of test_explorer: without Chromium or Playwright it skips and says why)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from test_consensus_drawing import _agreement
from test_explorer import Page, browser  # noqa: F401  (the module's browser fixture)

from oodcorr.core.answer import verdict_reason
from oodcorr.jobs.figures.explorer import page_data, write_explorer

NAMES = ["synth-distractor", "synth-negation", "synth-no", "synth-passive", "synth-yes"]
PLANTED = ("synth-no", "synth-yes")


def _tables():
    agree = _agreement(NAMES, PLANTED, r_planted=-0.99)
    agree["ci_low_consensus"], agree["ci_high_consensus"] = agree["r_consensus"] - 0.9, agree["r_consensus"] + 0.9
    agree[["reason", "way_on"]] = [verdict_reason(r, 0.05, 0.5) for r in agree.to_dict("records")]
    rows = []
    for rec in agree.to_dict("records"):
        for m in ("tiny-opt", "tiny-olmo2"):
            r = rec["r_consensus"]
            rows.append(
                {k: rec[k] for k in ("in_domain", "pool_group", "x", "y", "method", "residualiser")}
                | {"model": m, "run": "pooled", "r": r, "ci_low": r - 0.1, "ci_high": min(r + 0.1, 1), "p_adj": 0.01}
            )
    return pd.DataFrame(rows), agree


def test_the_page_carries_which_pairs_every_run_finds():
    pc, agree = _tables()
    data = page_data(agree, pc)
    found = [
        (data["names"][x], data["names"][y])
        for x, y, e in zip(data["rows"]["x"], data["rows"]["y"], data["rows"]["every_run"])
        if e
    ]
    assert found == [PLANTED]
    assert "reason" in data["columns"] and "way_on" in data["columns"]


_PIXEL = """([x, y]) => {
  const c = window.oodcorrExplorer.cellCentre(x, y), cv = document.getElementById("heat");
  const r = cv.getBoundingClientRect(), d = window.devicePixelRatio || 1;
  const px = Math.round((c.x - r.left - 0.3 * c.s) * d), py = Math.round((c.y - r.top - 0.3 * c.s) * d);
  return Array.from(cv.getContext("2d").getImageData(px, py, 1, 1).data);
}"""


def test_the_planted_pair_stands_out_and_the_detail_panel_says_why_in_words(browser, tmp_path):  # noqa: F811
    pc, agree = _tables()
    html = tmp_path / "explorer.html"
    write_explorer(agree, pc, html, settings={"level": 0.95, "alpha": 0.05, "near_zero": 0.1})
    p = Page(browser, html)
    planted = np.array(p.page.evaluate(_PIXEL, list(PLANTED)))
    plain = np.array(p.page.evaluate(_PIXEL, ["synth-distractor", "synth-negation"]))
    assert planted[3] == 255 and plain[3] == 255
    # the unresolved pair nothing is known of: faded to near white; the planted one in the full blue of -0.99
    assert plain[:3].min() > 150 and planted[:3].max() < 120 and planted[2] > planted[0]
    assert planted[:3].sum() < plain[:3].sum() - 400
    assert "not faded: no statement across models" in p.page.inner_text("#legend")
    c = p.centre(*PLANTED)
    p.page.mouse.click(c["x"], c["y"])
    why, way = p.page.inner_text("#pair-why"), p.page.inner_text("#pair-way")
    assert why.startswith("why: 2 models: a statement about a further model needs 3 or more")
    assert why.endswith("each model's own run finds it significant and negative")
    assert way.startswith("what would resolve it: a third model")
    assert "consensus of 2 models" in p.page.inner_text("#pair-numbers")
    # the raw columns one click away: closed, then open
    assert not p.page.is_visible("#pair-table th") and p.page.get_attribute("#pair-raw", "open") is None
    p.page.click("#pair-raw summary")
    assert p.page.is_visible("#pair-table th") and "n_sig_negative" in p.page.inner_text("#pair-table")
    shot = os.environ.get("OODCORR_EXPLORER_SHOT")  # where to keep a screenshot to look at
    if shot:
        p.page.screenshot(path=shot, full_page=True)
    p.close()


def test_long_names_with_a_common_start_are_labelled_without_it():
    names = [f"eval/downstream/{t}_len_norm" for t in ("arc_easy", "hellaswag", "piqa")]
    agree = _agreement(names, (names[0], names[1]))
    data = page_data(agree, pd.DataFrame(columns=["model", "run"]))
    assert data["prefix"] == "eval/downstream/"
    assert data["labels"] == [n.removeprefix("eval/downstream/") for n in data["names"]]
    short = page_data(_agreement(NAMES, PLANTED), pd.DataFrame(columns=["model", "run"]))
    assert short["prefix"] == "" and short["labels"] == short["names"]
