"""Rule finetune: one run, checkpoints on the schedule, resumable."""
from oodcorr.finetune import finetune
from oodcorr.runtime import pick_device, setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
finetune(model_spec=sm.params.model_spec, tiny_dir=sm.params.tiny_dir, train_path=sm.input.train,
         labels=sm.params.labels, prompt=sm.params.prompt, ft=sm.params.finetune,
         n_train=int(sm.wildcards.ntrain), seed=int(sm.wildcards.seed), steps=sm.params.steps,
         max_steps=sm.params.max_steps, run_dir=sm.params.run_dir, manifest_path=sm.output.manifest,
         device=pick_device(sm.resources.gpu), threads=sm.threads)
