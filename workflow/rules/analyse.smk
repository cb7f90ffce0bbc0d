# Aggregation and plots are light: they run on the submitting (login) node under a cluster executor.
localrules:
    aggregate_scores,
    partial_correlations,
    heatmap,


rule aggregate_scores:
    """One long table: a row per run x checkpoint x testset."""
    input:
        EXP.eval_targets(f"{EVAL_DIR}/{{testset}}.json"),
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
    """Per run and OOD pair: partial correlation across checkpoints, in-domain regressed out."""
    input:
        "results/scores.parquet",
    output:
        pairs=report("results/analysis/partial_correlations.csv", category="Tables",
                     caption="../report/partial_correlations.rst"),
        summary=report("results/analysis/model_summary.csv", category="Tables",
                       caption="../report/model_summary.rst"),
    params:
        methods=config["analysis"]["methods"],
        residualisers=config["analysis"]["residualisers"],
    log:
        "logs/analyse/partial_correlations.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/partial_correlations.py"


rule heatmap:
    """Heatmap of the model's partial correlations (Fisher-z mean over runs)."""
    input:
        "results/analysis/model_summary.csv",
    output:
        report("results/analysis/heatmaps/{model}.png", category="Heatmaps",
               caption="../report/heatmap.rst", labels={"model": "{model}"}),
    params:
        method=config["analysis"]["methods"][0],
        residualiser=config["analysis"]["residualisers"][0],
    log:
        "logs/analyse/heatmap_{model}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/heatmap.py"
