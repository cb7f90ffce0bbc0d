# Analysis: the scores table -> partial correlations, agreement across models, figures.
# All statistics live in oodcorr.analysis (the same code as `oodcorr analyse`).

ANALYSIS = config["analysis"]
# the heatmaps show the first method and the first residualiser of the config
PLOT_METHOD = ANALYSIS["methods"][0]
PLOT_RESIDUALISER = ANALYSIS["residualisers"][0]

# Aggregation and plots are light: they run on the submitting (login) node under a cluster executor.
localrules:
    aggregate_scores,
    partial_correlations,
    heatmap,
    heatmap_grid,
    learning_curves,
    scatter,


rule aggregate_scores:
    """One long table: a row per run x checkpoint x testset (from each evaluation job's summary)."""
    input:
        EXP.eval_summary_targets(f"{RUN_EVAL_DIR}/{{testset}}.json"),
    output:
        parquet="results/scores.parquet",
        csv="results/scores.csv",
    log:
        "logs/analyse/aggregate_scores.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/aggregate_scores.py"


rule partial_correlations:
    """Per run and pooled per model: partial correlations of every OOD pair, with
    block-bootstrap intervals, permutation p-values, corrections; the agreement table."""
    input:
        # the per-example predictions files are named in the scores table (column
        # `predictions`); they are outputs of the evaluation jobs the table depends on
        scores="results/scores.parquet",
    output:
        pairs=report("results/analysis/partial_correlations.csv", category="Tables",
                     caption="../report/partial_correlations.rst"),
        agreement=report("results/analysis/agreement.csv", category="Tables",
                         caption="../report/agreement.rst"),
    params:
        analysis=ANALYSIS,
    log:
        "logs/analyse/partial_correlations.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/partial_correlations.py"


rule heatmap:
    """Heatmap of one model's pooled partial correlations."""
    input:
        "results/analysis/partial_correlations.csv",
    output:
        report("results/analysis/heatmaps/{model}.png", category="Heatmaps",
               caption="../report/heatmap.rst", labels={"model": "{model}"}),
    params:
        kind="heatmap",
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    log:
        "logs/analyse/heatmap_{model}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/plot.py"


rule heatmap_grid:
    """Every model's heatmap side by side, on one colour scale and testset order."""
    input:
        "results/analysis/partial_correlations.csv",
    output:
        report("results/analysis/heatmap_grid.png", category="Heatmaps",
               caption="../report/heatmap_grid.rst", labels={"model": "all models"}),
    params:
        kind="heatmap_grid",
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    log:
        "logs/analyse/heatmap_grid.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/plot.py"


rule learning_curves:
    """Score vs training step for every testset of one model."""
    input:
        "results/scores.parquet",
    output:
        report("results/analysis/learning_curves/{model}.png", category="Learning curves",
               caption="../report/learning_curves.rst", labels={"model": "{model}"}),
    params:
        kind="learning_curves",
    log:
        "logs/analyse/learning_curves_{model}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/plot.py"


rule scatter:
    """In-domain vs OOD score for one model, with the fitted residualiser curves."""
    input:
        "results/scores.parquet",
    output:
        report("results/analysis/scatter/{model}.png", category="Residualiser fits",
               caption="../report/scatter.rst", labels={"model": "{model}"}),
    params:
        kind="scatter",
        analysis=ANALYSIS,
    log:
        "logs/analyse/scatter_{model}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/plot.py"
