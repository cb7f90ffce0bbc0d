"""What `snakemake --report` shows beyond the analysis figures: the accuracy table and the
training-loss curves, and a clear word when the report is asked of an experiment that has
not run.

``snakemake --configfile X --report results/<experiment>/report.html`` reports the
experiment of the config given. Without ``--configfile`` that is the embedded default,
``results/default/``: asked after running another config, Snakemake used to print a
"Missing metadata" line per job of the default experiment and then fail on the first
missing figure. :func:`check_report_inputs` stops that at planning with one message
naming the config to pass.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..core.errors import ConfigError
from ..core.io import atomic_path, write_text_atomic

RUN_KEYS = ["model", "in_domain", "n_train", "seed"]


def report_requested(argv: list[str]) -> bool:
    """Whether this Snakemake was started with ``--report`` (the Snakefile cannot ask Snakemake)."""
    return any(a == "--report" or a.startswith("--report=") for a in argv)


def check_report_inputs(plan, configfile, argv: list[str]) -> None:
    """Under ``--report``: every file the report shows must exist, else one error naming the config."""
    if not report_requested(argv):
        return
    missing = [t for t in plan.targets() if not Path(t).exists()]
    if not missing:
        return
    root = Path(plan.paths.root)
    others = sorted(p.parent.name for p in root.parent.glob("*/scores.parquet") if p.parent != root)
    here = f" (experiments with results here: {', '.join(others)})" if others else ""
    raise ConfigError(
        f"--report: experiment {plan.experiment!r} (from {configfile}) has not finished here: {len(missing)} of the "
        f"report's {len(plan.targets())} files are missing (e.g. {missing[0]}). The report covers the experiment "
        f"of the config given with --configfile{here}. Run `snakemake --configfile <that config> --report "
        f"{root.parent}/<experiment>/report.html`, or run this experiment first."
    )


# ---- the accuracy table ----------------------------------------------------------------------


def accuracy_table(scores):
    """One row per run x checkpoint, one column per testset (in-domain first), accuracy in the cells."""
    df = scores.copy()
    order = (
        df.sort_values("role", key=lambda r: r.ne("in-domain"))  # the in-domain set first
        .drop_duplicates("testset")["testset"]
        .tolist()
    )
    wide = df.pivot_table(index=RUN_KEYS + ["step"], columns="testset", values="accuracy", aggfunc="first")
    wide = wide.reindex(columns=[t for t in order if t in wide.columns])
    wide.columns.name = None
    return wide.reset_index().sort_values(RUN_KEYS + ["step"], ignore_index=True)


def write_accuracy(scores, out_html: str, out_csv: str, experiment: str) -> dict:
    """The accuracy table as CSV and as an HTML page (one table per run) for the report."""
    import pandas as pd

    wide = accuracy_table(scores)
    with atomic_path(out_csv) as tmp:
        wide.to_csv(tmp, index=False)
    testsets = [c for c in wide.columns if c not in RUN_KEYS + ["step"]]
    info = scores.drop_duplicates("testset").set_index("testset")
    head = "".join(
        f"<th>{html.escape(t)}<br><small>{html.escape(str(info.at[t, 'role']))}, n={int(info.at[t, 'n'])}</small></th>"
        for t in testsets
    )
    parts = [
        f"<h1>Accuracy per checkpoint: {html.escape(experiment)}</h1>",
        "<p>Share of each testset's examples classified correctly at each saved checkpoint "
        "(step 0: before any update). The same numbers are in accuracy.csv and, one row per "
        "checkpoint x testset with counts and provenance, scores.csv.</p>",
    ]
    for key, g in wide.groupby(RUN_KEYS, sort=True):
        model, dom, n, seed = key
        rows = "".join(
            "<tr><td>{}</td>{}</tr>".format(
                int(r["step"]), "".join(f"<td>{'' if pd.isna(r[t]) else f'{r[t]:.3f}'}</td>" for t in testsets)
            )
            for _, r in g.iterrows()
        )
        parts.append(
            f"<h2>{html.escape(str(model))}, in-domain {html.escape(str(dom))}, n_train {n}, seed {seed}</h2>"
            f"<table><thead><tr><th>step</th>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    style = (
        "body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse;margin-bottom:1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right} th{background:#f3f3f3}"
    )
    write_text_atomic(
        out_html,
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>\n",
    )
    return {"runs": int(wide.groupby(RUN_KEYS).ngroups), "rows": len(wide), "testsets": testsets}


# ---- the training loss ----------------------------------------------------------------------


def training_loss(manifests: list[str], model: str, out_png: str) -> dict:
    """The training loss against the step, one line per run of ``model``, from each run's manifest
    (``loss_history``: the Trainer's logged losses, earlier attempts included after a resume)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    drawn = {}
    for path in sorted(manifests):
        man = json.loads(Path(path).read_text(encoding="utf-8"))
        hist = man.get("loss_history") or []
        label = "/".join(Path(path).parent.parts[-3:])  # <in_domain>/n<N>/seed<S>
        if hist:
            ax.plot([h["step"] for h in hist], [h["loss"] for h in hist], lw=1.2, marker="o", ms=2, label=label)
        drawn[label] = len(hist)
    if not any(drawn.values()):
        ax.text(
            0.5,
            0.5,
            "no loss logged: the runs' checkpoints existed already,\nso nothing was trained",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    n = len(drawn)
    ax.set(
        xlabel="training step",
        ylabel="training loss (cross-entropy)",
        title=f"{model}: training loss ({n} run{'s' if n != 1 else ''})",
    )
    ax.grid(alpha=0.3)
    if any(drawn.values()):
        ax.legend(fontsize=7, loc="best", ncol=1 + n // 12)
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    return drawn
