"""The explorer page (oodcorr.jobs.figures.explorer): what it embeds, and the page itself in a real browser.

The browser tests drive Debian's Chromium (``/usr/bin/chromium``, installed here with apt-get when
missing and run as root with apt, as the SLURM test installs its cluster) through Playwright, on a
page written for a table shaped like the embedded default (2 models x 3 runs x 9 checkpoints, 5 OOD
testsets, analysed by the real pipeline) and on a generated whole-suite table (65 tasks: 2,016 OOD
pairs x 16 models, the columns of the real agreement table plus the ladder's new ones). Without a
browser or Playwright they skip and say why.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import oodcorr.jobs.figures
from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.across.agreement_table import AGREEMENT_COLUMNS
from oodcorr.analysis.results import write_tables
from oodcorr.core.answer import NOISE_LIMITED_BY, VERDICTS
from oodcorr.jobs.figures.explorer import page_data, page_style, render, write_explorer

from helpers import measured_study

CHROMIUM = "/usr/bin/chromium"
LADDER = [
    "negative in nearly every model",
    "positive on average, models differ",
    "sign reversal, negative on average",
    "agree near zero",
    "noise-limited",
    "unresolved",
]


def _default_shaped_tables():
    """The embedded default's shape: 2 models x 3 runs x 9 checkpoints, an in-domain set and 5 OOD sets."""
    rng = np.random.default_rng(3)
    rows = []
    for model in ("tiny-opt", "tiny-olmo2"):
        for run in range(3):
            steps = np.arange(9) * 10
            z = 0.5 + 0.3 * (1 - np.exp(-steps / 30)) + 0.01 * rng.normal(size=9)
            latent = np.cumsum(rng.normal(size=9)) * 0.02
            sign = 1 if model == "tiny-opt" else -1
            for k, ts in enumerate(["synth-test", "neg", "overlap", "swap", "long", "short"]):
                if k == 0:
                    score = z
                else:
                    score = 0.4 + 0.2 * z + sign * (k % 2 * 2 - 1) * latent + 0.01 * rng.normal(size=9)
                for s, v in zip(steps, score):
                    row = dict(model=model, run=f"r{run}", unit=int(s), testset=ts, in_domain="synth-test", score=v)
                    rows.append(row)
    long = pd.DataFrame(rows)
    opts = Options(pool_by=())
    pc = analyse(long, opts)
    return pc, agreement(pc, opts.alpha, opts.correction, opts.level, opts.near_zero)


def _suite_tables(n_models: int = 16, seed: int = 0):
    """A whole lm-eval suite's tables, generated: 64 OOD tasks (57 hendrycksTest-*), 2,016 pairs,
    every column of agreement.csv plus the graded ladder's (direction, spread, p_mean_adj), its
    verdicts, and each model's pooled row in the pairs table."""
    rng = np.random.default_rng(seed)
    tasks = [f"hendrycksTest-subject_{k:02d}" for k in range(57)]
    tasks += ["arc_easy", "arc_challenge", "piqa", "sciq", "winogrande", "wsc", "logiqa"]
    pairs = [(a, b) for i, a in enumerate(tasks) for b in tasks[i + 1 :]]
    n = len(pairs)
    agree = pd.DataFrame({c: [np.nan] * n for c in AGREEMENT_COLUMNS})
    agree["in_domain"], agree["pool_group"] = "lambada_openai", "all runs"
    agree["x"], agree["y"] = [a for a, _ in pairs], [b for _, b in pairs]
    agree["method"], agree["residualiser"] = "pearson", "linear"
    r = np.tanh(rng.normal(0, 0.4, n))
    agree["r_consensus"], agree["ci_low_consensus"], agree["ci_high_consensus"] = r, r - 0.2, r + 0.2
    agree["pi_low_consensus"], agree["pi_high_consensus"] = r - 0.5, r + 0.5
    agree["tol_low_consensus"], agree["tol_high_consensus"] = r - 0.7, r + 0.7
    agree["n_models"] = agree["n_models_consensus"] = agree["n_finite"] = n_models
    agree["n_positive"] = rng.integers(0, n_models + 1, n)
    agree["n_negative"] = n_models - agree["n_positive"]
    agree["n_sig_positive"], agree["n_sig_negative"] = 0, 0
    agree["correction"], agree["family_size"], agree["note"], agree["by_model"] = "holm", n, "", ""
    agree["verdict"] = [LADDER[i % len(LADDER)] for i in range(n)]
    agree["direction"] = ["negative in nearly every model" if v == LADDER[0] else "" for v in agree["verdict"]]
    agree["spread"] = ["models differ" if "differ" in v else "" for v in agree["verdict"]]
    agree["p_mean_adj"] = rng.uniform(size=n)
    # the scores as measurements, as with sizes only (lm-eval's acc_stderr): each testset's bound
    low = dict(zip(tasks, rng.uniform(0, 1, len(tasks))))
    agree["about"] = "tasks (in-domain noise bounded by its size)"
    agree["reliability_x_low"], agree["reliability_y_low"] = agree["x"].map(low), agree["y"].map(low)
    agree["reliability_in_domain_low"] = 0.97
    agree["ci_low_consensus_corrected"], agree["ci_high_consensus_corrected"] = r - 0.4, np.minimum(r + 0.4, 1)
    agree["noise_limited"] = [
        f"{x} (reliability at least {low[x]:.2f}: its size bounds the noise)" if v == "noise-limited" else ""
        for x, v in zip(agree["x"], agree["verdict"])
    ]
    models = [f"pythia-{k}" for k in range(n_models)]
    mr = np.tanh(np.arctanh(np.clip(r, -0.95, 0.95))[:, None] + rng.normal(0, 0.3, (n, n_models)))
    pc = pd.DataFrame(
        {
            "model": np.repeat([models], n, axis=0).ravel(),
            "in_domain": "lambada_openai",
            "run": "pooled",
            "pool_group": "all runs",
            "x": np.repeat(agree["x"].to_numpy(), n_models),
            "y": np.repeat(agree["y"].to_numpy(), n_models),
            "method": "pearson",
            "residualiser": "linear",
            "r": mr.ravel(),
            "ci_low": (mr - 0.4).ravel(),
            "ci_high": (mr + 0.4).ravel(),
            "p_adj": rng.uniform(size=n * n_models),
        }
    )
    return pc, agree, tasks


# ---- what the page embeds -------------------------------------------------------------------
def test_the_page_holds_every_row_and_each_models_numbers():
    pc, agree, tasks = _suite_tables(n_models=4)
    agree.loc[7, "verdict"] = "a verdict no code knows yet"
    data = page_data(agree, pc, csv_text="x\n")
    rows, names = data["rows"], data["names"]
    assert len(rows["x"]) == len(agree) == 2016 and sorted(names) == sorted(tasks)
    assert [names[i] for i in rows["x"][:3]] == agree["x"][:3].tolist()
    # the verdicts are those present, the unknown one among them with the faded style
    assert {v["name"] for v in data["verdicts"]} == set(LADDER) | {"a verdict no code knows yet"}
    unknown = next(v for v in data["verdicts"] if v["name"] == "a verdict no code knows yet")
    assert unknown["faded"] and not unknown["framed"]
    # every column but the keys is carried: numbers as numbers (new ones too), text as text
    assert "p_mean_adj" in data["numeric"] and "direction" not in data["numeric"]
    assert rows["values"]["p_mean_adj"][5] == round(agree.loc[5, "p_mean_adj"], 4)
    assert rows["values"]["direction"][0] == "negative in nearly every model"
    # each model's pooled r lands on its pair's row, in the model's column
    k = data["models"].index("pythia-2")
    want = pc[(pc.model == "pythia-2") & (pc.x == agree.loc[100, "x"]) & (pc.y == agree.loc[100, "y"])]["r"].item()
    assert data["by_model"]["r"][100][k] == round(want, 4)
    assert data["by_model"]["runs"] is None  # one run per model: no dots
    assert data["csv"] == "x\n"
    # the page's words come from core.answer, not from a second copy in the script
    assert data["noise_limited_by"] == NOISE_LIMITED_BY
    script = (Path(oodcorr.jobs.figures.__file__).parent / "explorer.js").read_text(encoding="utf-8")
    assert NOISE_LIMITED_BY not in script


def test_runs_are_carried_where_a_model_has_several():
    pc, agree = _default_shaped_tables()
    data = page_data(agree, pc)
    i = 0
    x, y = agree.loc[i, "x"], agree.loc[i, "y"]
    k = data["models"].index("tiny-opt")
    runs = pc[(pc.model == "tiny-opt") & (pc.run != "pooled") & (pc.x == x) & (pc.y == y)]["r"]
    assert sorted(data["by_model"]["runs"][i][k]) == sorted(round(v, 4) for v in runs)


def test_no_value_can_close_the_script_element(tmp_path):
    pc, agree = _default_shaped_tables()
    agree.loc[0, "note"] = "</script><script>alert(1)</script>"
    html = render(page_data(agree, pc, title="a <b>title</b>"))
    assert html.count("</script>") == 2  # the data's and the page script's own
    payload = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1)
    assert json.loads(payload)["rows"]["values"]["note"][0] == "</script><script>alert(1)</script>"
    assert "<title>a &lt;b&gt;title&lt;/b&gt;</title>" in html


def test_the_page_asks_for_nothing_outside_itself(tmp_path):
    pc, agree = _default_shaped_tables()
    out = tmp_path / "explorer.html"
    got = write_explorer(agree, pc, out)
    html = out.read_text()
    assert got["bytes"] == len(html.encode()) and got["pairs"] == len(agree)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "default-src 'none'" in html  # and the browser is told to refuse anything else


@pytest.mark.parametrize(
    "verdict, mark, framed, faded",
    [
        ("negative in nearly every model", "", True, False),
        ("positive in nearly every model, models differ", "≠", True, False),
        ("sign reversal", "±", False, False),
        ("sign reversal, negative on average", "±", False, False),
        ("positive on average, models differ", "≠", False, False),
        ("positive on average", "", False, False),
        ("agree near zero", "≈0", False, False),
        ("noise-limited", "∿", False, True),
        ("unresolved", "", False, True),
        ("no data", "", False, True),
        ("something new", "", False, True),
    ],
)
def test_the_page_shows_each_verdict_as_the_figures_do(verdict, mark, framed, faded):
    s = page_style(verdict)
    assert (s["mark"], s["framed"], s["faded"]) == (mark, framed, faded)
    assert s["dashed"] == (verdict == "agree near zero") and s["dotted"] == (verdict == "noise-limited")
    # in the ladder's order (the filter list's), a word no code knows last
    assert (s["rank"] == len(VERDICTS)) == (verdict == "something new")


# ---- in a real browser ----------------------------------------------------------------------
def _chromium() -> str:
    """Debian's Chromium, installed with apt-get when missing (root with apt); else a skip that says why."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"no {CHROMIUM}, and no root with apt-get to install Debian's chromium (apt-get install chromium)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
    inst = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if inst.returncode != 0 or not Path(CHROMIUM).exists():
        pytest.skip(f"apt-get install chromium failed (no mirror?): {(inst.stderr or inst.stdout)[-300:]}")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser():
    sync = pytest.importorskip("playwright.sync_api", reason="Playwright (requirements.txt) is not installed")
    path = _chromium()
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"], timeout=60_000)
        yield b
        b.close()


class Page:
    """One explorer page open in the browser, with every request it makes and every error it reports."""

    def __init__(self, browser, html: Path):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(30_000)
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = html.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready='1']")

    def centre(self, x: str, y: str):
        return self.page.evaluate("([x, y]) => window.oodcorrExplorer.cellCentre(x, y)", [x, y])

    def hover(self, x: str, y: str) -> str:
        c = self.centre(x, y)
        assert c is not None, f"no cell drawn for {x} x {y}"
        self.page.mouse.move(c["x"], c["y"])
        return self.page.inner_text("#tip") if self.page.is_visible("#tip") else ""

    def shown(self) -> int:
        return self.page.evaluate("window.oodcorrExplorer.shown()")

    def close(self):
        outside = [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:"))]
        assert outside == [], f"the page asked for {outside}"
        assert self.errors == []
        self.page.close()


def test_the_default_shaped_page_in_a_browser(browser, tmp_path):
    pc, agree = _default_shaped_tables()
    html = tmp_path / "explorer.html"
    write_explorer(agree, pc, html, settings={"level": 0.95, "alpha": 0.05, "near_zero": 0.3})
    p = Page(browser, html)
    assert p.shown() == len(agree) == 10
    row = agree.iloc[3]
    tip = p.hover(row["x"], row["y"])
    assert f"{row['x']} × {row['y']}" in tip and f"verdict: {row['verdict']}" in tip
    assert f"consensus r {row['r_consensus']:+.2f}" in tip
    assert f"[{row['ci_low_consensus']:+.2f}, {row['ci_high_consensus']:+.2f}]" in tip
    assert f"models positive / negative: {int(row['n_positive'])} / {int(row['n_negative'])}" in tip
    c = p.centre(row["x"], row["y"])
    p.page.mouse.click(c["x"], c["y"])
    assert p.page.get_attribute("#detail", "data-pair") == f"{row['x']}+{row['y']}"
    # the forest plot: one row per model with its pooled r, and the consensus diamond
    assert p.page.locator("#forest g.model-row").count() == 2
    assert p.page.locator("#forest polygon.consensus").count() == (1 if math.isfinite(row["ci_low_consensus"]) else 0)
    opt = pc[(pc.model == "tiny-opt") & (pc.run == "pooled") & (pc.x == row["x"]) & (pc.y == row["y"])]["r"].item()
    assert f"{opt:+.2f}" in p.page.text_content("#forest g.model-row[data-model='tiny-opt']")
    p.close()


def test_the_forest_plot_shows_the_end_of_a_long_model_name_and_the_whole_on_hover(browser, tmp_path):
    """Models named as in the Pythia suite: each forest-plot row's name fits its column (nothing
    cut off at the page's left edge), keeps the end that tells the models apart, and carries the
    whole name as its hover title."""
    pc, agree = _default_shaped_tables()
    names = {"tiny-opt": "EleutherAI/pythia-v1.1-160m-deduped", "tiny-olmo2": "EleutherAI/pythia-v1.1-1.4b"}
    pc["model"] = pc["model"].map(names)
    html = tmp_path / "explorer.html"
    write_explorer(agree, pc, html, settings={"level": 0.95, "alpha": 0.05, "near_zero": 0.3})
    p = Page(browser, html)
    row = agree.iloc[0]
    c = p.centre(row["x"], row["y"])
    p.page.mouse.click(c["x"], c["y"])
    rows = p.page.evaluate(
        """() => [...document.querySelectorAll('#forest g.model-row')].map((g) => {
             const t = g.querySelector('text'), b = t.getBBox(), title = t.querySelector('title');
             return {model: g.dataset.model, shown: t.firstChild.textContent, left: b.x, right: b.x + b.width,
                     title: title && title.textContent};
           })"""
    )
    assert sorted(r["model"] for r in rows) == sorted(names.values())
    for r in rows:
        assert r["left"] >= 0 and r["right"] <= 150, r  # within the names' column, not cut by the page's edge
        assert r["title"] == r["model"]
        assert r["shown"].startswith("…") and r["model"].endswith(r["shown"][1:]) and len(r["shown"]) > 8, r
    shown = {r["model"]: r["shown"] for r in rows}
    assert shown["EleutherAI/pythia-v1.1-160m-deduped"].endswith("160m-deduped")
    assert shown["EleutherAI/pythia-v1.1-1.4b"].endswith("1.1-1.4b")
    p.close()


def test_the_legend_counts_the_table_shown_and_the_settings_name_both_corrections(browser, tmp_path):
    """Two tables (Pearson and Spearman) on one page: each verdict's count in the legend is of the
    table shown, and changes with it; the settings line names the cells' correction and the
    answer's apart (they differ by default: Holm, Benjamini-Hochberg)."""
    pc, agree = _default_shaped_tables()
    other = agree.copy()
    other["method"], other["verdict"] = "spearman", "unresolved"
    both = pd.concat([agree, other], ignore_index=True)
    html = tmp_path / "explorer.html"
    settings = {"level": 0.95, "alpha": 0.05, "near_zero": 0.3, "correction": "holm", "agreement_correction": "bh"}
    write_explorer(both, pc, html, settings=settings)
    p = Page(browser, html)

    def legend() -> dict[str, int]:
        out = {}
        for label in p.page.locator("#verdicts label").all():
            name, count = re.fullmatch(r"(.+) \((\d+)\)", label.inner_text().strip()).groups()
            out[name] = int(count)
        return {k: v for k, v in out.items() if v}

    assert legend() == agree["verdict"].value_counts().to_dict()
    p.page.select_option("#panel", index=1)
    assert legend() == {"unresolved": len(other)}
    settings_line = p.page.inner_text("#settings")
    assert "cells corrected across pairs: holm" in settings_line and "the answer's statements: bh" in settings_line
    p.close()


@pytest.fixture(scope="module")
def suite_page(tmp_path_factory):
    pc, agree, tasks = _suite_tables()
    html = tmp_path_factory.mktemp("suite") / "explorer.html"
    got = write_explorer(agree, pc, html, settings={"level": 0.95, "alpha": 0.05, "near_zero": 0.3})
    return html, pc, agree, tasks, got


def test_a_whole_suite_page_in_a_browser(browser, suite_page):
    html, pc, agree, tasks, got = suite_page
    assert got["bytes"] < 20 * 2**20
    p = Page(browser, html)
    assert p.shown() == 2016
    # hover: the numbers of the pair under the pointer
    row = agree[(agree.x == "piqa") | (agree.y == "piqa")].iloc[0]
    tip = p.hover(row["x"], row["y"])
    assert f"consensus r {row['r_consensus']:+.2f}" in tip and row["verdict"] in tip
    assert (
        f"reliability {row['x']} at least {row['reliability_x_low']:.2f}, {row['y']} at least "
        f"{row['reliability_y_low']:.2f}, in-domain lambada_openai at least 0.97" in tip
    )
    # click: that pair's forest plot, with its 16 models
    c = p.centre(row["x"], row["y"])
    p.page.mouse.click(c["x"], c["y"])
    assert p.page.get_attribute("#detail", "data-pair") == f"{row['x']}+{row['y']}"
    assert p.page.locator("#forest g.model-row").count() == 16
    p.page.click("#pair-raw summary")  # every column one click away
    assert "p_mean_adj" in p.page.inner_text("#pair-table")  # a column the page was not written for
    # filter by name: only the hendrycksTest family's 57 x 56 / 2 pairs stay
    p.page.fill("#names", "hendrycksTest-*")
    assert p.shown() == 57 * 56 // 2
    assert p.centre("arc_easy", "piqa") is None and p.centre(tasks[0], tasks[1]) is not None
    p.page.fill("#names", "")
    # filter by verdict: unticking one hides exactly its pairs
    gone = LADDER[1]
    p.page.locator("#verdicts label", has_text=gone).locator("input").uncheck()
    assert p.shown() == 2016 - int((agree["verdict"] == gone).sum())
    hidden = agree[agree.verdict == gone].iloc[0]
    assert p.centre(hidden["x"], hidden["y"]) is None
    # one model's view: the hover gives that model's own r
    p.page.select_option("#view", label="model pythia-3")
    r3 = pc[(pc.model == "pythia-3") & (pc.x == row["x"]) & (pc.y == row["y"])]["r"].item()
    assert f"model pythia-3: r {r3:+.2f}" in p.hover(row["x"], row["y"])
    p.close()


def test_the_table_downloads_as_written(browser, suite_page, tmp_path):
    """The page offers agreement.csv byte for byte as write_tables writes it, whether it is given the
    file or makes the text itself (as in a drawing process, beside the tables being written)."""
    html, _, agree, _, _ = suite_page
    write_tables(pd.DataFrame({"a": [1]}), agree, tmp_path)
    csv = tmp_path / "agreement.csv"
    assert page_data(agree, pd.DataFrame(columns=["model", "run"]))["csv"].encode() == csv.read_bytes()
    page_html = tmp_path / "explorer.html"
    write_explorer(agree, pd.DataFrame(columns=["model", "run"]), page_html, csv_path=csv)
    p = Page(browser, page_html)
    with p.page.expect_download() as dl:
        p.page.click("#download-csv")
    assert Path(dl.value.path()).read_bytes() == csv.read_bytes()
    p.close()


# ---- the scores as measurements -------------------------------------------------------------
@pytest.fixture(scope="module")
def measured():
    return measured_study()


def test_each_models_tasks_correlation_is_carried(measured):
    pc, agree, _ = measured["items"]
    data = page_data(agree, pc)
    pooled = pc[pc["run"] == "pooled"]
    for k, m in enumerate(data["models"]):
        want = pooled.loc[pooled["model"] == m, ["r_corrected", "ci_low_corrected", "ci_high_corrected"]]
        got = [data["by_model"][c][0][k] for c in ("rc", "rc_lo", "rc_hi")]
        assert got == [None if not np.isfinite(v) else round(v, 4) for v in want.iloc[0]]
    assert sum(v is not None for v in data["by_model"]["rc"][0]) >= 4
    assert "rc" not in page_data(agree, pc.drop(columns="r_corrected"))["by_model"]  # an older pairs table


def _sgn(v: float) -> str:
    return f"{v:+.2f}"


def test_a_measured_page_shows_reliabilities_the_tasks_and_noise_limited_pairs(browser, measured, tmp_path):
    settings = {"level": 0.95, "alpha": 0.05, "near_zero": 0.3}
    # only sizes known: the pair is noise-limited, its own legend entry; the hover says why
    pc, agree, _ = measured["bound"]
    (row,) = agree.to_dict("records")
    html = tmp_path / "bound.html"
    write_explorer(agree, pc, html, settings=settings)
    p = Page(browser, html)
    assert [t.strip() for t in p.page.locator("#verdicts label").all_inner_texts()] == ["noise-limited (1)"]
    assert "noise-limited: dotted frame, '∿', faded" in p.page.inner_text("#legend")
    tip = p.hover("ood0", "ood1")
    assert "about the tasks (in-domain noise bounded by its size)" in tip
    assert (
        f"reliability ood0 at least {row['reliability_x_low']:.2f}, ood1 at least {row['reliability_y_low']:.2f}, "
        f"in-domain in-domain at least {row['reliability_in_domain_low']:.2f}" in tip
    )
    lo, hi = row["ci_low_consensus_corrected"], row["ci_high_consensus_corrected"]
    assert f"the tasks' consensus (item noise out) no estimate [{_sgn(lo)}, {_sgn(hi)}]" in tip
    assert f"noise-limited by {row['noise_limited']}" in tip
    p.page.locator("#verdicts label", has_text="noise-limited").locator("input").uncheck()
    assert p.shown() == 0
    p.close()
    # each item known: the forest plot shows each model's tasks' correlation and the tasks' consensus
    pc, agree, _ = measured["items"]
    (row,) = agree.to_dict("records")
    html = tmp_path / "items.html"
    write_explorer(agree, pc, html, settings=settings)
    p = Page(browser, html)
    c = p.centre("ood0", "ood1")
    p.page.mouse.click(c["x"], c["y"])
    pooled = pc[pc["run"] == "pooled"]
    assert p.page.locator("#forest circle.tasks").count() == int(np.isfinite(pooled["r_corrected"]).sum()) >= 4
    tasks = p.page.text_content("#forest g.consensus-row[data-row='corrected']")
    assert tasks == "the tasks' consensus" + " ".join(
        [
            _sgn(row["r_consensus_corrected"]),
            f"[{_sgn(row['ci_low_consensus_corrected'])},",
            f"{_sgn(row['ci_high_consensus_corrected'])}]",
        ]
    )
    assert f"reliability ood0 {row['reliability_x']:.2f}, ood1 {row['reliability_y']:.2f}" in p.page.inner_text(
        "#pair-measured"
    )
    # one model's view: its own tasks' correlation in the hover
    m0 = pooled[pooled["model"] == "m0"].iloc[0]
    p.page.select_option("#view", label="model m0")
    if np.isfinite(m0["r_corrected"]):
        assert f"its tasks' correlation {_sgn(m0['r_corrected'])}" in p.hover("ood0", "ood1")
    # the pairs shown, downloaded, carry the measured columns
    with p.page.expect_download() as dl:
        p.page.click("#download-visible")
    shown = pd.read_csv(dl.value.path())
    for c in ("about", "r_consensus_corrected", "reliability_x", "reliability_y_low", "noise_limited"):
        assert c in shown.columns
    assert shown["r_consensus_corrected"].item() == pytest.approx(row["r_consensus_corrected"], abs=1e-4)
    assert shown["about"].item() == "tasks"
    p.close()
