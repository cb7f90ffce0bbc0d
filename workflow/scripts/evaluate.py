"""Rule evaluate: one checkpoint x one testset."""
from oodcorr.evaluate import evaluate
from oodcorr.runtime import pick_device, setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
# batch sizes change speed, not results: read from the config so changing them reruns nothing
ev = sm.config["evaluation"]
job = sm.params.job
result = evaluate(model_spec=job["model_spec"], tiny_dir=job["tiny_dir"], checkpoint=sm.params.checkpoint,
                  step=int(sm.wildcards.step), tokenized=sm.input.tokenized, batch_size=ev["batch_size"],
                  max_tokens=ev["max_tokens"], out_json=sm.output.json, out_predictions=sm.output.predictions,
                  provenance=job["provenance"], device=pick_device(sm.resources.gpu), threads=sm.threads)
print({k: result[k] for k in ("testset", "step", "accuracy", "n", "timing_s")})
