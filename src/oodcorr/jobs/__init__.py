"""What the workflow's rules run, one job each, and (``figures``) every figure; may import ``core``, ``analysis``,
``planning``, ``modeling`` (planning never imports this folder)."""
