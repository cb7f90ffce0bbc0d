# `snakemake --configfile X --report results/<experiment>/report.html` gathers every output
# wrapped in report() with its caption (workflow/report/*.rst) and this overview. Categories
# are numbered: the report's menu lists them in that order, the answer first (the consensus
# heatmaps and the agreement table), then the detail.
report: "../report/workflow.rst"


# Light: they run on the submitting (login) node under a cluster executor.
localrules:
    accuracy_table,
    training_loss,


rule accuracy_table:
    """The scores as a table: accuracy per run x checkpoint (rows) x testset (columns)."""
    input:
        P.staged(P.scores),
    output:
        # staged, like the analysis: publish_results puts them in place with the rest of the set
        html=report(P.staged(P.accuracy_html), category="5 Accuracy", caption="../report/accuracy.rst"),
        csv=P.staged(P.accuracy_csv),
    log:
        f"{LOGS}/analyse/accuracy_table.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/report_tables.py"


rule training_loss:
    """The training loss of every run of one model, from the runs' manifests."""
    input:
        PLAN.manifests,
    output:
        report(
            f"{A}/training_loss/{{model}}.png",
            category="6 Training loss",
            caption="../report/training_loss.rst",
            labels={"model": "{model}"},
        ),
    log:
        f"{LOGS}/analyse/training_loss_{{model}}.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/report_tables.py"
