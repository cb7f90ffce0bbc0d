"""Item noise: each testset's, the estimators free of it, testsets that share items."""
