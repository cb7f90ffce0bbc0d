"""The figures: what they share (``common``), their registry (``kinds``), a module per kind, ``analysis_set``."""
