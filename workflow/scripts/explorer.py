"""Rule explorer: the agreement and pairs tables -> the explorer page (oodcorr.jobs.figures.explorer) and the
answer's lines."""

from oodcorr.analysis import Options
from oodcorr.core.answer import answer_lines, read_agreement
from oodcorr.core.atomic_write import write_text_atomic
from oodcorr.core.errors import ResultError
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import read_analysis_table
from oodcorr.jobs.figures.explorer import write_explorer
from oodcorr.launch.runtime import refuse, start_job

sm = snakemake  # noqa: F821
start_job(sm)
opts = Options.from_mapping(sm.params.analysis)
try:  # a staged table cut short or changed since its job wrote it: named, with the way out
    agree, pc = read_analysis_table(sm.input.agreement), read_analysis_table(sm.input.pairs)
except ResultError as e:
    refuse(e)
method, res = sm.params.method, sm.params.residualiser
lines = answer_lines(
    read_agreement(sm.input.agreement), method, res, sm.params.published, consensus_sets=sm.params.consensus_sets
)
print(
    write_explorer(
        agree,
        pc,
        sm.output.page,
        title=f"oodcorr: experiment {sm.params.experiment}",
        settings={"input": f"experiment {sm.params.experiment}", **opts.describe()},
        answer=lines,
        csv_path=sm.input.agreement,
        default=(method, res),
    )
)
write_text_atomic(sm.output.answer, "".join(f"{line}\n" for line in lines))
seal(sm.output)  # what publishing checks the staged file against
