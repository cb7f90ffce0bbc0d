"""The figures: what they share (``common``), a module per kind, their registry and an analysis's (``analysis_set``)."""
