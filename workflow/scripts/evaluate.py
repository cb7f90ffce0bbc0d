"""Rule evaluate: one checkpoint x one testset."""
import logging

from oodcorr.evaluate import evaluate
from oodcorr.runtime import pick_device, retry_sizes, setup_logging, simulate_oom_from_env

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
simulate_oom_from_env()  # a test hook; does nothing unless its environment variable is set
# batch sizes change speed, not results: read from the config so changing them reruns nothing;
# each retry (after an out-of-memory failure, say) halves them
ev = sm.config["evaluation"]
job = sm.params.job
attempt = int(getattr(sm.resources, "attempt", 1))
batch_size, max_tokens = retry_sizes(ev["batch_size"], ev["max_tokens"], attempt)
logging.info("attempt %d: batch_size %d, max_tokens %d", attempt, batch_size, max_tokens)
result = evaluate(model_spec=job["model_spec"], tiny_dir=job["tiny_dir"], checkpoint=sm.params.checkpoint,
                  step=int(sm.wildcards.step), tokenized=sm.input.tokenized, batch_size=batch_size,
                  max_tokens=max_tokens, out_json=sm.output.json, out_predictions=sm.output.predictions,
                  provenance=job["provenance"], device=pick_device(sm.resources.gpu), threads=sm.threads)
print({k: result[k] for k in ("testset", "step", "accuracy", "n", "timing_s")})
