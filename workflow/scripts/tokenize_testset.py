"""Rule tokenize_testset: prompts -> token ids, cached per tokenizer x testset."""
from oodcorr.evaluate import tokenize_testset
from oodcorr.runtime import setup_logging

sm = snakemake  # noqa: F821
setup_logging(sm.log[0])
info = tokenize_testset(model_spec=sm.params.model_spec, tiny_dir=sm.params.tiny_dir,
                        testset=sm.wildcards.testset, data_path=sm.input.data, data_meta=sm.input.meta,
                        labels=sm.params.labels, prompt=sm.params.prompt, max_length=sm.params.max_length,
                        coarse=sm.params.coarse, out_path=sm.output[0])
print(info)
