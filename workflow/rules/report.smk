# `snakemake --report report.html` gathers every output wrapped in report() with its
# caption (workflow/report/*.rst) and this overview.
report: "../report/workflow.rst"
