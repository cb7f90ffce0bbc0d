"""The consensus heatmap draws a pair by what it says (oodcorr.jobs.figures.across_models.consensus_heatmap):
a pair that each model's own run finds significant with one sign is not drawn like a pair about which
nothing is known, the colour bar's label is whole, and long names with a common start fit."""

from __future__ import annotations

import numpy as np
import pandas as pd

from oodcorr.analysis.across.agreement_table import AGREEMENT_COLUMNS
from oodcorr.jobs.figures import across_models
from oodcorr.jobs.figures.across_models import EVERY_RUN_MARK, fold_names


def _agreement(names: list[str], planted: tuple[str, str], r_planted: float = -1.0) -> pd.DataFrame:
    """The embedded default's answer: 2 models, every pair unresolved; the planted pair significant and
    negative in each model's run (n_sig_negative 2), the others in neither."""
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    df = pd.DataFrame({c: [np.nan] * len(pairs) for c in AGREEMENT_COLUMNS})
    df["in_domain"], df["pool_group"], df["method"], df["residualiser"] = "synth-test", "all runs", "pearson", "linear"
    df["x"], df["y"] = [a for a, _ in pairs], [b for _, b in pairs]
    df["verdict"], df["correction"], df["about"] = "unresolved", "holm", ""
    df["n_models"] = df["n_models_consensus"] = df["n_finite"] = 2
    df["n_sig_positive"], df["n_sig_negative"] = 0, 0
    df["r_consensus"] = np.linspace(-0.4, 0.4, len(pairs))
    hit = [{a, b} == set(planted) for a, b in pairs]
    df.loc[hit, "n_sig_negative"] = 2
    df.loc[hit, "r_consensus"] = r_planted
    return df


def _draw(monkeypatch, agree, path):
    kept = []
    save = across_models.save
    monkeypatch.setattr(across_models, "save", lambda fig, png, tight=True: (kept.append(fig), save(fig, png, tight)))
    cells = across_models.consensus_heatmap(agree, str(path), "pearson", "linear", "synth-test", 0.05, 0.1)
    (fig,) = kept
    return cells, fig


def _cell_rgba(ax, row: str, col: str) -> np.ndarray:
    """The drawn colour (RGBA, 0-255) of the cell at the tick labels ``row`` and ``col``."""
    rows = [t.get_text() for t in ax.get_yticklabels()]
    cols = [t.get_text() for t in ax.get_xticklabels()]
    (image,) = ax.get_images()
    return np.asarray(image.get_array())[rows.index(row), cols.index(col)]


def test_the_planted_pair_is_drawn_in_full_colour_and_marked_and_a_pair_nothing_is_known_of_faded(
    tmp_path, monkeypatch
):
    names = ["synth-distractor", "synth-negation", "synth-no", "synth-passive", "synth-yes"]
    agree = _agreement(names, ("synth-no", "synth-yes"))
    cells, fig = _draw(monkeypatch, agree, tmp_path / "c.png")
    (ax,) = [a for a in fig.axes if a.get_title()]
    assert cells[("all runs", "synth-yes", "synth-no")] == f"-1.00{EVERY_RUN_MARK} (unresolved)"
    planted = _cell_rgba(ax, "synth-yes", "synth-no")
    cmap = fig.axes[-1].images[0].cmap if fig.axes[-1].images else None
    import matplotlib as mpl

    cmap = cmap or mpl.colormaps[across_models.CMAP]
    full = np.round(np.array(cmap(mpl.colors.Normalize(-1, 1)(-1.0))) * 255)
    assert planted[3] == 255 and np.abs(planted.astype(float) - full).max() <= 1  # the colour itself, opaque
    # an unresolved pair no run finds: faded towards white
    other = agree[(agree["x"] == "synth-distractor") & (agree["y"] == "synth-negation")]["r_consensus"].item()
    faded = _cell_rgba(ax, "synth-negation", "synth-distractor")
    want = np.array(cmap(mpl.colors.Normalize(-1, 1)(other)))
    want[:3] = 0.4 * want[:3] + 0.6
    assert faded[3] == 255 and np.abs(faded.astype(float) - np.round(want * 255)).max() <= 1
    assert planted[:3].astype(int).sum() < faded[:3].astype(int).sum() - 200  # far darker: it stands out
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith(f"{EVERY_RUN_MARK}, not faded: no statement across models") for t in legend)
    assert any(t.startswith("faded: unresolved") for t in legend)


def _inside(fig, artist) -> bool:
    renderer = fig.canvas.get_renderer()
    box, page = artist.get_window_extent(renderer), fig.bbox
    return box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1


def test_the_colour_bars_label_and_long_tracker_names_fit_the_figure(tmp_path, monkeypatch):
    names = [f"eval/downstream/{t}_len_norm" for t in ("arc_easy", "hellaswag", "piqa", "winogrande", "social_iqa")]
    agree = _agreement(names, (names[0], names[1]))
    cells, fig = _draw(monkeypatch, agree, tmp_path / "long.png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # the figure as saved (closed since: a canvas of its own to measure on)
    (ax,) = [a for a in fig.axes if a.get_title()]
    ticks = [t.get_text() for t in ax.get_xticklabels()] + [t.get_text() for t in ax.get_yticklabels()]
    assert not any(t.startswith("eval/downstream/") for t in ticks) and "arc_easy_len_norm" in ticks
    assert "common start 'eval/downstream/'" in ax.get_title()
    bar = next(a for a in fig.axes if a is not ax and a.get_ylabel())
    assert bar.get_ylabel().startswith("consensus partial r\n")
    assert _inside(fig, bar.yaxis.label)
    # the label no longer than the bar: it runs into neither the title nor the legend
    renderer = fig.canvas.get_renderer()
    label, box = bar.yaxis.label.get_window_extent(renderer), bar.get_window_extent(renderer)
    assert label.y0 >= box.y0 - 1 and label.y1 <= box.y1 + 1
    assert not label.overlaps(ax.title.get_window_extent(renderer))
    for t in ax.get_xticklabels() + ax.get_yticklabels():
        assert _inside(fig, t)
    # the labels take under a third of the figure's width
    renderer = fig.canvas.get_renderer()
    widest = max(t.get_window_extent(renderer).width for t in ax.get_yticklabels())
    assert widest < fig.bbox.width / 3


def test_fold_names_keeps_the_part_that_tells_names_apart():
    assert fold_names(["eval/downstream/a", "eval/downstream/b"]) == (
        "eval/downstream/",
        {"eval/downstream/a": "a", "eval/downstream/b": "b"},
    )
    assert fold_names(["synth-no", "synth-yes"])[0] == ""  # short names: shown whole
    assert fold_names(["synth-distractor-long", "synth-yes"])[0] == "synth-"
    assert fold_names(["ood0", "ood1"]) == ("", {"ood0": "ood0", "ood1": "ood1"})  # no separator: kept
    long = ["runs/" + "a" * 40 + "1", "runs/" + "a" * 40 + "2"]
    prefix, short = fold_names(long)
    assert (
        prefix == "runs/"
        and len(set(short.values())) == 2
        and all(len(s) <= across_models.LABEL_MAX for s in short.values())
    )
    # two names that would read the same once cut: both kept whole
    same = ["runs/" + "b" * 30 + "c" * 30, "runs/" + "b" * 30 + "d" + "c" * 29]
    assert fold_names(same)[1] == {n: n[5:] for n in same}
