"""Rule evaluate: checkpoints of one run scored on one testset, a predictions file each.

Unit `checkpoint`: the step is a wildcard and the output is its predictions file.
Unit `run`: every step of the run, then the job's summary (its declared output).
"""

import logging

from oodcorr.core.errors import ConfigError, DataError, ResultError, WriteFailed
from oodcorr.core.locks import UnsafeLockFile
from oodcorr.jobs.evaluate import EvalParams, EvaluationRefused, checkpoints_to_score, evaluate_run
from oodcorr.launch.runtime import end_job, pick_device, refuse, retry_sizes, start_job

sm = snakemake  # noqa: F821
start_job(sm)
# batch sizes change speed, not results: read from the config so changing them reruns nothing;
# each retry (after an out-of-memory failure, say) halves them
ev = sm.config["evaluation"]
job = sm.params.job
attempt = int(getattr(sm.resources, "attempt", 1))
batch_size, max_tokens = retry_sizes(ev["batch_size"], ev["max_tokens"], attempt)
logging.info("attempt %d: batch_size %d, max_tokens %d", attempt, batch_size, max_tokens)
if "step" in sm.wildcards.keys():
    steps, outputs, summary = [int(sm.wildcards.step)], [sm.output[0]], None
else:
    steps, outputs, summary = job["steps"], job["predictions"], sm.output.summary
manifests = [sm.input.manifest] if isinstance(sm.input.manifest, str) else list(sm.input.manifest)
try:
    # each checkpoint with what its run's manifest recorded of it (checked before it is scored);
    # an unreadable manifest: named, with the way out
    checkpoints = checkpoints_to_score(manifests, steps, outputs)
    result = evaluate_run(
        EvalParams.from_mapping(job),
        checkpoints=checkpoints,
        tokenized=sm.input.tokenized,
        batch_size=batch_size,
        max_tokens=max_tokens,
        out_summary=summary,
        device=pick_device(sm.resources.gpu),
        threads=sm.threads,
        testset=sm.wildcards.testset,  # what the tokenised testset must hold (a swapped one is refused)
    )
except (EvaluationRefused, ConfigError, DataError, ResultError, UnsafeLockFile, WriteFailed) as e:
    # a damaged checkpoint, weights file or manifest, scores that are not finite, a GPU lock that is a
    # link: the message is the log's last line, no traceback
    refuse(e)
print(
    {
        "testset": result["testset"],
        "accuracy": [r["accuracy"] for r in result["checkpoints"]],
        "timing_s": result["timing_s"],
    }
)
end_job()  # skip the interpreter's teardown (oodcorr.launch.runtime.end_job says why)
