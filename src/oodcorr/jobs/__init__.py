"""What the workflow's rules run, one job each: datasets prepared, runs finetuned, testsets tokenised,
checkpoints evaluated, scores aggregated and sent to the trackers, and (``figures``) every figure.

May import ``core``, ``analysis``, ``planning``, ``modeling``; planning never imports this folder."""
