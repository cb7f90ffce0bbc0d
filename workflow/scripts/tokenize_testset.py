"""Rule tokenize_testset: prompts -> token ids, cached per tokenizer x testset."""

from oodcorr.core.errors import ConfigError, DataError, ResultError, WriteFailed
from oodcorr.jobs.tokenize_testset import tokenize_testset
from oodcorr.launch.runtime import end_job, refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
job = sm.params.job
try:
    info = tokenize_testset(
        model_spec=job["model_spec"],
        built_model_dir=job["built_model_dir"],
        testset=sm.wildcards.testset,
        data_path=sm.input.data,
        data_meta=sm.input.meta,
        labels=job["labels"],
        prompt=job["prompt"],
        max_length=job["max_length"],
        coarse=job["coarse"],
        out_path=sm.output[0],
    )
except (ConfigError, DataError, ResultError, WriteFailed) as e:
    # a verbaliser this tokenizer splits, an unreadable prepared testset: the message is the log's last line
    refuse(e)
print(info)
end_job()  # skip the interpreter's teardown (oodcorr.launch.runtime.end_job says why)
