"""What the workflow's rules run, one job at a time.

``prepare_dataset`` (prepare a dataset), ``finetune`` and ``multi_gpu`` (one run, on one GPU or several),
``checkpoints`` (manifests, verification, resume points), ``checkpoint_saves`` (a checkpoint's
size, and a save the file system stops as its sentence), ``series_checkpoint`` (checkpoints that
already exist), ``tokenize_testset`` (a testset's prompts as token ids, cached), ``evaluate`` (a run's
checkpoints chosen, checked and scored on a testset), ``scoring`` (the batching policy, the forward
pass, its dtype), ``predictions`` (the predictions file), ``metrics`` (beyond accuracy),
``aggregate_scores`` (the scores table and its accuracy view), ``tracking`` (each checkpoint's scores and
the answer in the experiment trackers, once), ``figures`` (every figure and the
explorer page, one registry of their kinds).

May import: ``core``, ``analysis``, ``planning``, ``modeling``. Planning never imports this
folder (tests/meta/test_layers.py checks what the Snakefile can reach).
"""
