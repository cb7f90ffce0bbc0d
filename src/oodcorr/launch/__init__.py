"""What runs when a person or Snakemake starts the workflow, before and around the jobs.

``disk_checks`` (planning-time checks of what is on disk, and the end-of-run warnings), ``free_space``
(room to run on the file systems a run writes in besides its results), ``sizing`` (parameter
counts, GPU memory, checkpoint sizes), ``budget`` (what a config will cost, at its time limits)
and ``budget_work`` (its GPU-hours from the work), ``grid`` (a plan's tables as the design command
sees them, and the changes of a config it prices), ``runtime`` (a job's logging and device, set
up by the rule scripts), ``experiment`` (one writer per experiment folder, the config that wrote
it, its published set checked at the start), ``report`` (``snakemake --report`` asked of an
experiment that has not run, or whose staged files are not what was published), and a run on
SLURM: ``slurm_cluster`` (what the cluster is asked, and the settings checked before anything is
submitted), ``slurm_rerun`` (a rerun after the submitting Snakemake died: its lock, its jobs SLURM
still runs), ``slurm_watch`` (the run's jobs watched, the jobs SLURM ended named at the end) and
``slurm_wrap`` (SLURM's commands made to wait out a controller that does not answer).

May import: ``core``, ``planning``, ``modeling``; never ``jobs``, since the Snakefile imports
this folder while it plans.
"""
