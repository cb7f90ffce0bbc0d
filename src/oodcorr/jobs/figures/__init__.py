"""The figures: what they share (``common``), the kinds and :func:`~.kinds.draw` (``kinds``), curves per
model and the design's power (``curves``), the pairs heatmaps (``pair_heatmaps``), the answer across models
(``across_models``), the explorer page (``explorer``) and an analysis's set of them drawn in processes
(``analysis_set``); part of jobs/, imports as jobs/ does."""
