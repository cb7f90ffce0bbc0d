"""What the workflow's rules run, one job at a time (each module's docstring says which part):
datasets prepared, runs finetuned (on one GPU or several), testsets tokenised, checkpoints evaluated,
their scores aggregated and logged to the experiment trackers, and (``figures``) every figure.

May import: ``core``, ``analysis``, ``planning``, ``modeling``. Planning never imports this
folder (tests/meta/test_layers.py checks what the Snakefile can reach).
"""
