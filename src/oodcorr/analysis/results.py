"""The analysis' two tables written and their headline numbers logged (``oodcorr analyse``, the analysis rule)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.answer import CELL_CONCLUSIONS, about, noise_clause, reliability_line
from ..core.atomic_write import atomic_path
from .items.measurement import NOISE_LIMITED


def write_tables(pc: pd.DataFrame, agree: pd.DataFrame, out: Path) -> None:
    for df, name in ((pc, "partial_correlations.csv"), (agree, "agreement.csv")):
        with atomic_path(out / name) as tmp:
            df.to_csv(tmp, index=False)


def summarise(pc: pd.DataFrame, agree: pd.DataFrame, opts, logger) -> None:
    """Log the headline numbers: finite, significant and unresolved cells, checks, verdicts."""
    pooled = pc[pc["run"] == "pooled"]
    for (m, r), g in pooled.groupby(["method", "residualiser"]):
        conc = g["conclusion"].value_counts()
        logger.info(
            "%s/%s pooled cells: %d, finite %d, significant (%s, alpha %s) %d; positive %d, negative %d, "
            "near zero %d, unresolved %d; the line concludes otherwise %d; conclusion changes "
            "without step 0 %d",
            m,
            r,
            len(g),
            int(g["r"].notna().sum()),
            opts.correction,
            opts.alpha,
            int(g["significant"].sum()),
            *(conc.get(word, 0) for word in CELL_CONCLUSIONS),
            int(g["depends_on_form"].eq(True).sum()),
            int(g["step0_changes"].eq(True).sum()),
        )
    runs = pc[pc["run"] != "pooled"]
    low = runs["note"].astype(str).str.startswith("effective sample size")
    if low.any():
        logger.info(
            "%d of %d run cells have too little effective information (n_eff < %g): see their note",
            int(low.sum()),
            len(runs),
            opts.min_n_eff,
        )
    capped = runs["note"].astype(str).str.contains("reached its cap")
    if capped.any():
        logger.info(
            "%d of %d run cells have a residual AR(1) estimate at its cap (the series trends or wanders; "
            "docs/answer.md#when-the-ar1-estimate-reaches-its-cap)",
            int(capped.sum()),
            len(runs),
        )
    if not agree.empty:
        counts = agree.groupby(["method", "residualiser", "verdict"]).size()
        for (m, r, v), k in counts.items():
            logger.info("agreement %s/%s: %s %d", m, r, v, k)
        for (m, r), g in agree.groupby(["method", "residualiser"]):
            records = g.to_dict("records")
            said = "; ".join(c for c in (about(records), noise_clause(records)) if c)
            if said:
                logger.info("agreement %s/%s: %s", m, r, said)
        for dom, g in agree.groupby("in_domain"):
            line = reliability_line(g.to_dict("records"), NOISE_LIMITED)
            if line:
                logger.info("in-domain %s: %s", dom, line)
