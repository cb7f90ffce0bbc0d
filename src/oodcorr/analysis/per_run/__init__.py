"""The partial correlation per run: a run's cells, their measurement and example bootstrap, stacked runs."""
