"""The line as the curve's check: does a cell's answer depend on the form of the regression?"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from ...core.answer import interval_text
from .residualise import parse

LINE_COLUMNS = ("r_line", "ci_low_line", "ci_high_line", "p_line", "se_z_line")
GAIN_COLUMNS = ("curve_r2_x", "curve_p_x", "curve_r2_y", "curve_p_y")


def line_of(residualiser: str) -> str | None:
    """The line a curve-kind residualiser is checked against; None for the line itself."""
    spec = parse(residualiser)
    return spec.line if spec.curve else None


def curve_gain(curve: dict, line: dict) -> dict:
    """Per series of a cell, the share of the line's residual variance the curve explains, and its F test."""
    out = {}
    n = curve["n"]
    for s in ("x", "y"):
        rc, rl = curve[f"r{s}"], line[f"r{s}"]
        rss_c, rss_l = float(rc @ rc), float(rl @ rl)
        df1 = curve[f"dof_{s}"] - line[f"dof_{s}"]
        df2 = n - curve[f"dof_{s}"]
        gain = max(0.0, 1.0 - rss_c / rss_l) if rss_l > 0 else math.nan
        p = math.nan
        if df1 > 1e-6 and df2 > 0 and rss_c > 0:
            p = float(stats.f.sf(((rss_l - rss_c) / df1) / (rss_c / df2), df1, df2))
        elif math.isfinite(gain):
            p = 1.0  # the curve is the line
        out[f"curve_r2_{s}"], out[f"curve_p_{s}"] = gain, p
    return out


def sign_of(lo, hi) -> np.ndarray:
    """+1, -1 or 0: the side of 0 an interval lies on, 0 where it holds 0 (or is not finite)."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    return np.where(lo > 0, 1, np.where(hi < 0, -1, 0))


def mark(out) -> None:
    """``depends_on_form`` and ``form_check`` of each row of ``out``: do the curve's and the line's intervals differ?"""
    lo, hi = out["ci_low"].to_numpy(float), out["ci_high"].to_numpy(float)
    llo, lhi = out["ci_low_line"].to_numpy(float), out["ci_high_line"].to_numpy(float)
    both = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(llo) & np.isfinite(lhi)
    differs = both & (sign_of(lo, hi) != sign_of(llo, lhi))
    out["depends_on_form"] = np.where(both, differs, None)
    texts = np.full(len(out), "", dtype=object)
    r, rl, res = out["r"].to_numpy(float), out["r_line"].to_numpy(float), out["residualiser"].to_numpy(object)
    for i in np.flatnonzero(differs):
        texts[i] = (
            f"depends on the form: {res[i]} {interval_text(r[i], lo[i], hi[i])}, "
            f"{line_of(res[i])} {interval_text(rl[i], llo[i], lhi[i])}"
        )
    out["form_check"] = texts
