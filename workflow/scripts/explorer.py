"""Rule explorer: the agreement and pairs tables -> the explorer page (oodcorr.jobs.explorer) and the answer's lines."""

import pandas as pd

from oodcorr.analysis import Options
from oodcorr.core.answer import answer_lines, read_agreement
from oodcorr.core.io import write_text_atomic
from oodcorr.core.records import seal
from oodcorr.jobs.explorer import write_explorer
from oodcorr.launch.runtime import start_job

sm = snakemake  # noqa: F821
start_job(sm)
opts = Options.from_mapping(sm.params.analysis)
agree = pd.read_csv(sm.input.agreement, keep_default_na=False, na_values=[""])
pc = pd.read_csv(sm.input.pairs, keep_default_na=False, na_values=[""])
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
