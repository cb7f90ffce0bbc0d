"""Rule finetune: one run, checkpoints on the schedule, resumable."""
from oodcorr.distributed import run_distributed
from oodcorr.finetune import finetune
from oodcorr.runtime import pick_device, setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
run = sm.params.run
kwargs = dict(model_spec=run["model_spec"], tiny_dir=run["tiny_dir"], train_path=sm.input.train,
              labels=run["labels"], prompt=run["prompt"], ft=run["finetune"],
              n_train=int(sm.wildcards.ntrain), seed=int(sm.wildcards.seed), steps=run["steps"],
              max_steps=run["max_steps"], run_dir=str(sm.output.manifest).rsplit("/", 1)[0],
              manifest_path=sm.output.manifest)
# how a model is sharded over GPUs changes no result: read from the config, not a param
dist = next(m for m in sm.config["models"] if m["name"] == sm.wildcards.model).get("distributed")
if dist:
    run_distributed(dist, kwargs, log_path=sm.log[0], threads=sm.threads)
else:
    finetune(**kwargs, device=pick_device(sm.resources.gpu), threads=sm.threads)
