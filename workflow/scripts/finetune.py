"""Rule finetune: one run, checkpoints on the schedule, resumable, one writer at a time."""

from pathlib import Path

from oodcorr.core.errors import ConfigError, DataError, ResultError, WriteFailed
from oodcorr.core.locks import FolderInUse
from oodcorr.core.trackers import check, named
from oodcorr.jobs.finetune import NonFiniteLoss, finetune
from oodcorr.jobs.multi_gpu import run_distributed
from oodcorr.jobs.tracking import root_of_run_dir
from oodcorr.launch.runtime import pick_device, refuse, start_job
from oodcorr.planning.config import report_to
from oodcorr.planning.finetune_job import FinetuneJob

sm = snakemake  # noqa: F821
run = sm.params.run
# how a model is sharded over GPUs, and where the loss is logged while it trains, change no
# result: read from the config, not params (editing them reruns nothing)
entry = next(m for m in sm.config["models"] if m["name"] == sm.wildcards.model)
dist = entry.get("distributed")
start_job(sm)
try:
    # the trackers finetune.report_to names, installed and reachable from this node: said now, not
    # after the training (a compute node is not the login node that planned the run)
    check(named(report_to(sm.config, sm.wildcards.model)), root_of_run_dir(Path(sm.output.manifest).parent))
    job = FinetuneJob(
        model_spec=run["model_spec"],
        built_model_dir=run["built_model_dir"],
        train_path=sm.input.train,
        labels=run["labels"],
        prompt=run["prompt"],
        finetune=run["finetune"],
        n_train=int(sm.wildcards.ntrain),
        seed=int(sm.wildcards.seed),
        steps=run["steps"],
        max_steps=run["max_steps"],
        run_dir=Path(sm.output.manifest).parent,
        manifest_path=sm.output.manifest,
        report_to=report_to(sm.config, sm.wildcards.model),
        # several processes: the launch claims its GPUs and each process picks its own device
        device="cpu" if dist else pick_device(sm.resources.gpu),
        threads=sm.threads,
    )
    # the finetune (rank 0 under several processes) holds the run folder's lock while it reads and
    # writes the folder; a second one is refused at once, with one line naming the holder
    if dist:
        run_distributed(dist, job, log_path=sm.log[0], threads=sm.threads)
    else:
        finetune(job)
except (FolderInUse, NonFiniteLoss, ConfigError, DataError, ResultError, WriteFailed) as e:
    # the message (a held run folder or a lock file that is a link, a diverged run, a verbaliser the
    # tokenizer splits, a training set too small for n_train) is the log's last line
    refuse(e)
