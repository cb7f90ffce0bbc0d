"""What runs when a person or Snakemake starts the workflow, before and around the jobs: checks before
any job, the costs, a job's set-up and a run on SLURM (docs/development.md#layout names each module).

May import: ``core``, ``planning``, ``modeling``; never ``jobs``, since the Snakefile imports
this folder while it plans.
"""
