"""The explorer page: an analysis's answer as one self-contained HTML file (``explorer.html``) that works
offline from a ``file://`` URL, with no request to anything outside the file."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.answer import NOISE_EXCEEDS, NOISE_LIMITED_BY, every_run_sign, verdict_rank
from ...core.atomic_write import write_text_atomic
from .across_models import EVERY_RUN_MARK, fold_names, verdict_style
from .common import cluster_order, natural_key

EXPLORER_FILE = "explorer.html"
KEYS = ["in_domain", "pool_group", "method", "residualiser"]
OWN = {"x", "y", "verdict", "by_model", *KEYS}  # agreement.csv's columns the page shows other than as numbers
DIGITS = 4  # numbers are embedded to this many decimals (the table to download keeps them all)


def _numbers(values) -> list:
    """Numbers rounded to :data:`DIGITS` decimals, None where not finite (JSON has no NaN), any shape."""
    a = values.astype("float64").to_numpy() if isinstance(values, pd.Series) else np.asarray(values, dtype=float)
    out = np.round(a, DIGITS).astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


def _numeric(col: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(col):
        return False
    if pd.api.types.is_numeric_dtype(col):
        return True
    values = col.dropna().astype(str)
    values = values[values != ""]
    return len(values) > 0 and pd.to_numeric(values, errors="coerce").notna().all()


# a verdict's swatch in the page's legend, by how the figures draw it (across_models.verdict_style)
SWATCHES = {"±": "#7b3294", "≠": "#e08214", "≈0": "#4d9221", "∿": "#8c6d31"}


def page_style(verdict: str) -> dict:
    """How the page shows a verdict: :func:`.across_models.verdict_style`, its rank and a legend swatch."""
    st = verdict_style(str(verdict))
    framed = st["frame"] == "solid"
    return {
        "mark": st["mark"],
        "framed": framed,
        "dashed": st["frame"] == "dashed",
        "dotted": st["frame"] == "dotted",
        "faded": st["faded"],
        "colour": "#000000" if framed else SWATCHES.get(st["mark"], "#bdbdbd" if st["faded"] else "#6a6a6a"),
        "rank": verdict_rank(str(verdict)),
    }


def page_data(
    agree: pd.DataFrame,
    pc: pd.DataFrame,
    title: str = "oodcorr explorer",
    settings: dict | None = None,
    answer: list[str] | None = None,
    csv_text: str | None = None,
    default: tuple[str, str] | None = None,
) -> dict:
    """What the page embeds (JSON) from the two tables; ``default``: the (method, residualiser) shown first."""
    if csv_text is None:  # the table to download, exactly as write_tables writes it
        csv_text = agree.to_csv(index=False)
    agree = agree.reset_index(drop=True)
    for c in ("x", "y", "verdict", *KEYS):
        agree[c] = agree[c].astype(str) if c in agree else ""
    names = sorted(set(agree["x"]) | set(agree["y"]), key=natural_key)
    prefix, labels = fold_names(names)
    idx = {n: i for i, n in enumerate(names)}
    pooled = pc[pc["run"].astype(str) == "pooled"]
    models = sorted(pooled["model"].astype(str).unique(), key=natural_key) if len(pc) else []
    midx = {m: i for i, m in enumerate(models)}
    verdicts = list(dict.fromkeys(agree["verdict"]))
    vidx = {v: i for i, v in enumerate(verdicts)}
    columns = [c for c in agree.columns if c not in OWN]
    numeric = [c for c in columns if _numeric(agree[c])]
    rows = {
        "x": [idx[v] for v in agree["x"]],
        "y": [idx[v] for v in agree["y"]],
        "verdict": [vidx[v] for v in agree["verdict"]],
        # 1: each model's own run finds one sign, the models together nothing (drawn unfaded, marked)
        "every_run": [int(bool(every_run_sign(r))) for r in agree.to_dict("records")],
        "panel": [],
        "values": {
            c: (
                _numbers(pd.to_numeric(agree[c], errors="coerce"))
                if c in numeric
                else ["" if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v) for v in agree[c]]
            )
            for c in columns
        },
    }
    panels, pkey = [], {}
    for key, g in agree.groupby(KEYS, sort=True):
        pkey[key] = len(panels)
        sub = g.assign(r=pd.to_numeric(g["r_consensus"], errors="coerce")) if "r_consensus" in g else g.assign(r=0.0)
        present = sorted(set(g["x"]) | set(g["y"]), key=natural_key)
        order = cluster_order(sub, present) if len(present) > 2 else present
        panels.append(dict(zip(KEYS, key)) | {"order": [idx[n] for n in order], "pairs": len(g)})
    rows["panel"] = [pkey[k] for k in zip(*(agree[c] for c in KEYS))]
    first = next((i for i, p in enumerate(panels) if (p["method"], p["residualiser"]) == default), 0)
    # each model's pooled r, interval and adjusted p (and tasks' r rc, rc_lo, rc_hi where known) for every
    # agreement row, None where a model has none; runs: each model's runs' r where any has several
    n, m = len(agree), len(models)
    fields = [("r", "r"), ("lo", "ci_low"), ("hi", "ci_high"), ("p_adj", "p_adj")]
    if "r_corrected" in pc:
        fields += [("rc", "r_corrected"), ("rc_lo", "ci_low_corrected"), ("rc_hi", "ci_high_corrected")]
    out = {k: np.full((n, m), np.nan) for k, _ in fields}
    row_of = {}
    for i, t in enumerate(zip(*(agree[c] for c in KEYS), agree["x"], agree["y"])):
        row_of[t] = i
        row_of[(*t[:4], t[5], t[4])] = i

    def locate(df):
        """(the agreement row, the model's column) of each row of ``df``, -1 where it has none."""
        cols = [df[c].astype(str).to_numpy() for c in (*KEYS, "x", "y")]
        at = np.array([row_of.get(t, -1) for t in zip(*cols)], dtype=int)
        return at, np.array([midx.get(v, -1) for v in df["model"].astype(str)], dtype=int)

    if len(pooled) and m:
        at, mm = locate(pooled)
        ok = (at >= 0) & (mm >= 0)
        for k, c in fields:
            if c in pooled:
                out[k][at[ok], mm[ok]] = pd.to_numeric(pooled[c], errors="coerce").to_numpy(float)[ok]
    res = {k: _numbers(a) for k, a in out.items()}
    runs = pc[pc["run"].astype(str) != "pooled"] if len(pc) else pc
    res["runs"] = None
    if len(runs) and runs.groupby(["model", "pool_group"])["run"].nunique().max() > 1:
        at, mm = locate(runs)
        r = pd.to_numeric(runs["r"], errors="coerce").to_numpy(float)
        lists: list[list[list[float]]] = [[[] for _ in range(m)] for _ in range(n)]
        for i, j, v in zip(at, mm, r):
            if i >= 0 and j >= 0 and math.isfinite(v):
                lists[i][j].append(round(float(v), DIGITS))
        res["runs"] = lists
    return {
        "title": title,
        "settings": settings or {},
        "answer": answer or [],
        "names": names,
        "prefix": prefix,
        "labels": [labels[n] for n in names],
        "models": models,
        "panels": panels,
        "first_panel": first,
        "verdicts": [{"name": v, **page_style(v)} for v in verdicts],
        "noise_limited_by": NOISE_LIMITED_BY,
        "every_run_mark": EVERY_RUN_MARK,
        "noise_exceeds": NOISE_EXCEEDS,
        "numeric": numeric,
        "columns": columns,
        "rows": rows,
        "by_model": res,
        "csv": csv_text,
    }


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(data: dict) -> str:
    """The page: the template, its style, script and ``data`` inlined ('</' as '<\\/': no value closes the script)."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    html = _asset("explorer.html")
    title = data["title"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for mark, text in (("/*STYLE*/", _asset("explorer.css")), ("/*SCRIPT*/", _asset("explorer.js"))):
        html = html.replace(mark, text, 1)
    return html.replace("{{TITLE}}", title, 1).replace("{{DATA}}", payload, 1)


def write_explorer(
    agree: pd.DataFrame,
    pc: pd.DataFrame,
    out_html: str | Path,
    title: str = "oodcorr explorer",
    settings: dict | None = None,
    answer: list[str] | None = None,
    csv_path: str | Path | None = None,
    default: tuple[str, str] | None = None,
) -> dict:
    """Write the explorer page atomically (``csv_path``: the agreement table to download). Returns pairs, bytes."""
    csv_text = Path(csv_path).read_text(encoding="utf-8") if csv_path is not None else None
    html = render(page_data(agree, pc, title, settings, answer, csv_text, default))
    write_text_atomic(out_html, html)
    return {"pairs": len(agree), "bytes": len(html.encode("utf-8"))}
