"""What the workflow's rules run, one job at a time.

``data`` (prepare a dataset), ``finetune`` and ``multi_gpu`` (one run, on one GPU or several),
``checkpoints`` (manifests, verification, resume points), ``series`` (checkpoints that already
exist), ``evaluate`` (score a checkpoint on a testset), ``metrics`` (beyond accuracy),
``aggregate`` (the scores table and its accuracy view) and ``plots`` (every figure).

May import: ``core``, ``analysis``, ``planning``, ``modeling``. Planning never imports this
folder (tests/test_layers.py checks what the Snakefile can reach).
"""
