# Analysis: the scores table -> partial correlations, agreement across models, figures.
# All statistics live in oodcorr.analysis (the same code as `oodcorr analyse`).
#
# Results are replaced as a set. Snakemake deletes a job's outputs before it runs, so every
# step below writes into results/<experiment>/.staging/ (P.staged), sealing each file it makes
# (oodcorr.core.seals.seal), and publish_results, once every step has succeeded, checks the
# seals and publishes the whole set as a new version switched by one rename
# (oodcorr.core.published): a failed or killed step leaves the previous scores, tables and
# figures as they were. The files people read (scores.csv, analysis/...) are links into the
# published version, so they are no rule's outputs; publish_results declares only its record
# (P.published), which planning removes when the published files no longer match it.

ANALYSIS = PLAN.analysis
ANALYSIS_FORMAT = PLAN.analysis_format
# the heatmaps show the first method and the first residualiser of the config
PLOT_METHOD = ANALYSIS["methods"][0]
PLOT_RESIDUALISER = ANALYSIS["residualisers"][0]


# Aggregation and plots are light: they run on the submitting (login) node under a cluster executor.
localrules:
    aggregate_scores,
    partial_correlations,
    consensus_heatmap,
    explorer,
    forest_plots,
    heatmap,
    heatmap_grid,
    learning_curves,
    scatter,
    publish_results,


rule aggregate_scores:
    """One long table: a row per run x checkpoint x testset (from every predictions file's
    record, or with `evaluation.unit: run` from each job's summary); and what made it."""
    input:
        PLAN.eval_outputs(),
    output:
        parquet=P.staged(P.scores),
        csv=P.staged(P.scores_csv),
        # the libraries the finetunes and evaluations recorded, and the code that aggregated them
        provenance=report(P.staged(P.provenance), category="8 Provenance", caption="../report/provenance.rst"),
    log:
        f"{LOGS}/analyse/aggregate_scores.log",
    conda:
        ANALYSIS_ENV
    params:
        # every record's data is checked against the prepared testset (and its local file)
        data=lambda wc: {"records": P.data, "meta": P.data_meta},
        # and every record against its file's place: run, step, testset, checkpoint, experiment
        places=PLAN.record_places(),
    script:
        "../scripts/aggregate_scores.py"


rule partial_correlations:
    """Per run and pooled per model: partial correlations of every OOD pair, with
    block-bootstrap intervals, permutation p-values, corrections; the agreement table."""
    input:
        # the per-example predictions files are named in the scores table (column
        # `predictions`); they are outputs of the evaluation jobs the table depends on
        scores=P.staged(P.scores),
    output:
        pairs=report(f"{A}/partial_correlations.csv", category="3 Tables", caption="../report/partial_correlations.rst"),
        agreement=report(f"{A}/agreement.csv", category="1 The answer", caption="../report/agreement.rst"),
    log:
        f"{LOGS}/analyse/partial_correlations.log",
    # on the critical path: every figure and the publish wait for it, so it starts before the
    # figures of the scores that are ready at the same time
    priority: 1
    conda:
        ANALYSIS_ENV
    # its runs are analysed in this many processes (the same table whatever the number; Snakemake
    # gives fewer where --cores, or --local-cores on a cluster, are fewer)
    threads: PLAN.threads("partial_correlations")
    params:
        analysis=ANALYSIS,
        score=PLAN.score,
        # the tables' format: a new one (new columns, a new verdict) recomputes the analysis of an
        # experiment analysed before, and nothing upstream of it
        tables=ANALYSIS_FORMAT,
    script:
        "../scripts/partial_correlations.py"


rule consensus_heatmap:
    """The answer for one in-domain set: every OOD pair's consensus across models, marked by its verdict."""
    input:
        rules.partial_correlations.output.agreement,
    output:
        report(
            f"{A}/consensus/{{indomain}}.png",
            category="1 The answer",
            caption="../report/consensus_heatmap.rst",
            labels={"in-domain set": "{indomain}"},
        ),
    log:
        f"{LOGS}/analyse/consensus_heatmap_{{indomain}}.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="consensus_heatmap",
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    script:
        "../scripts/plot.py"


rule explorer:
    """The explorer page: every OOD pair in a browser (the consensus heatmap, each pair's forest plot
    on a click, filters, each model's view, the table to download), one file that works offline; and
    the answer in a few lines of text."""
    input:
        pairs=rules.partial_correlations.output.pairs,
        agreement=rules.partial_correlations.output.agreement,
    output:
        page=report(f"{A}/explorer.html", category="1 The answer", caption="../report/explorer.rst"),
        # the answer's lines as the run's last lines say them: the report's landing text reads them from here
        answer=report(f"{A}/answer.txt", category="1 The answer", caption="../report/answer.rst"),
    log:
        f"{LOGS}/analyse/explorer.log",
    conda:
        ANALYSIS_ENV
    params:
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
        analysis=ANALYSIS,
        experiment=PLAN.experiment,
        # where the published tables and figures are, and the in-domain sets with a consensus
        published=P.analysis,
        consensus_sets=PLAN.consensus_sets(),
    script:
        "../scripts/explorer.py"


rule forest_plots:
    """Why each OOD pair got its verdict: a forest plot per pair of every in-domain set with a consensus."""
    input:
        pairs=rules.partial_correlations.output.pairs,
        agreement=rules.partial_correlations.output.agreement,
    output:
        [
            report(
                png,
                category="1 The answer",
                subcategory="Forest plots: why each pair got its verdict",
                caption="../report/forest.rst",
                labels=labels,
            )
            for png, labels in PLAN.forest_figures()
        ],
    log:
        f"{LOGS}/analyse/forest_plots.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="forest",
        # (in-domain set, x, y) of each output, in order
        pairs=[(d, x, y) for d, pairs in PLAN.forest_pairs().items() for x, y in pairs],
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    script:
        "../scripts/plot.py"


rule heatmap:
    """Heatmap of one model's pooled partial correlations."""
    input:
        rules.partial_correlations.output.pairs,
    output:
        report(
            f"{A}/heatmaps/{{model}}.png",
            category="2 Heatmaps per model",
            caption="../report/heatmap.rst",
            labels={"model": "{model}"},
        ),
    log:
        f"{LOGS}/analyse/heatmap_{{model}}.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="heatmap",
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    script:
        "../scripts/plot.py"


rule heatmap_grid:
    """Every model's heatmap side by side, on one colour scale and testset order."""
    input:
        rules.partial_correlations.output.pairs,
    output:
        report(
            f"{A}/heatmap_grid.png",
            category="2 Heatmaps per model",
            caption="../report/heatmap_grid.rst",
            labels={"model": "all models"},
        ),
    log:
        f"{LOGS}/analyse/heatmap_grid.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="heatmap_grid",
        method=PLOT_METHOD,
        residualiser=PLOT_RESIDUALISER,
    script:
        "../scripts/plot.py"


rule learning_curves:
    """Score vs training step (or a series' steps or tokens) for every testset of one model."""
    input:
        P.staged(P.scores),
    output:
        report(
            f"{A}/learning_curves/{{model}}.png",
            category="4 Learning curves",
            caption="../report/learning_curves.rst",
            labels={"model": "{model}"},
        ),
    log:
        f"{LOGS}/analyse/learning_curves_{{model}}.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="learning_curves",
        score=PLAN.score,
        x_label=PLAN.x_label,
    script:
        "../scripts/plot.py"


rule scatter:
    """In-domain vs OOD score for one model, with the fitted residualiser curves."""
    input:
        P.staged(P.scores),
    output:
        report(
            f"{A}/scatter/{{model}}.png",
            category="7 Residualiser fits",
            caption="../report/scatter.rst",
            labels={"model": "{model}"},
        ),
    log:
        f"{LOGS}/analyse/scatter_{{model}}.log",
    conda:
        ANALYSIS_ENV
    params:
        kind="scatter",
        analysis=ANALYSIS,
        score=PLAN.score,
    script:
        "../scripts/plot.py"


rule publish_results:
    """The scores, tables and figures, published together once every step succeeded: a new
    version of the set, switched by one rename; its record (each file's sha256) is the output."""
    input:
        PLAN.staged_targets(),
    output:
        P.published,
    log:
        f"{LOGS}/analyse/publish_results.log",
    conda:
        ANALYSIS_ENV
    params:
        # each input's path in the published set (relative to the experiment folder), in order
        rels=PLAN.published_rels(),
        experiment=PLAN.experiment,
    script:
        "../scripts/publish_results.py"
