"""Never run: benchmarks/dag_floor plans only (snakemake -n)."""
