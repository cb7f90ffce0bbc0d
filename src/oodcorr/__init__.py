"""oodcorr: do out-of-distribution results generalise?

Finetune language models on one in-domain NLI set, evaluate every checkpoint on
many OOD testsets, and correlate OOD scores across checkpoints after
regressing out in-domain score.
"""

__version__ = "0.1.0"
