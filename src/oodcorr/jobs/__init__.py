"""What the workflow's rules run, one job at a time.

``data`` (prepare a dataset), ``finetune`` and ``multi_gpu`` (one run, on one GPU or several),
``checkpoints`` (manifests, verification, resume points), ``checkpoint_saves`` (a checkpoint's
size, and a save the file system stops as its sentence), ``series`` (checkpoints that already
exist), ``tokenize_testset`` (a testset's prompts as token ids, cached), ``evaluate`` (a run's
checkpoints chosen, checked and scored on a testset), ``scoring`` (the batching policy, the forward
pass, its dtype), ``predictions`` (the predictions file), ``metrics`` (beyond accuracy),
``aggregate`` (the scores table and its accuracy view), ``tracking`` (each checkpoint's scores and
the answer in the experiment trackers, once), the figures: ``plotting`` (what they share),
``answer_figures`` (across models), ``heatmaps`` (the pairs heatmaps: one model's, every model's side
by side), ``plots`` (the other figures per model, and ``draw``, which draws any of them).

May import: ``core``, ``analysis``, ``planning``, ``modeling``. Planning never imports this
folder (tests/meta/test_layers.py checks what the Snakefile can reach).
"""
