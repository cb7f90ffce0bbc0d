"""Rule pretraining_corpus: unlabelled synthetic text for tokenizer and LM pretraining."""

from oodcorr.core.atomic_write import write_text_atomic
from oodcorr.launch.runtime import start_job
from oodcorr.modeling.synthetic import pretraining_corpus

sm = snakemake  # noqa: F821
start_job(sm)
lines = pretraining_corpus(
    int(sm.params.cfg["n_lines"]), int(sm.params.cfg["seed"]), sm.params.template, tuple(sm.params.answers)
)
write_text_atomic(sm.output[0], "\n".join(lines) + "\n")
print(f"{len(lines)} lines")
