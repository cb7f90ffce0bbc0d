"""The figures: what they share, their kinds and :func:`~.kinds.draw`, a module per kind, and an analysis's
set of them drawn in processes (``analysis_set``); part of jobs/, imports as jobs/ does."""
