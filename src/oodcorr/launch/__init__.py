"""What runs when a person or Snakemake starts the workflow, before and around the jobs.

Before any job: ``snakefile`` (what the Snakefile runs around the rules), ``disk_checks`` (what is on
disk, and the end-of-run report), ``free_space`` (room on the file systems a run writes in),
``experiment`` (one writer per experiment folder, the config that wrote it), ``published_check``
(its published set checked), ``report`` (``snakemake --report`` asked of what has not run). Costs:
``sizing`` (parameters, GPU memory, checkpoint sizes), ``budget``, ``budget_work``, ``grid``. Jobs:
``runtime`` (a job's logging, refusal and device). SLURM: ``slurm_cluster`` (what the cluster is
asked, the settings checked), ``slurm_rerun`` (a rerun after the submitting Snakemake died),
``slurm_watch`` (the jobs watched) and ``slurm_wrap`` (SLURM's commands made to wait out a
controller that does not answer).

May import: ``core``, ``planning``, ``modeling``; never ``jobs``, since the Snakefile imports
this folder while it plans.
"""
