"""From a config to the plan of every job (``plan.load``), without loading a model or running a job.

May import ``core`` only: planning stays fast and torch-free."""
