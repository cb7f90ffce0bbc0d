# oodcorr: do out-of-distribution results generalise? Finetune -> evaluate every checkpoint on every
# testset -> partial correlations. The rules wire the plan's (oodcorr.planning.plan) paths, params, resources.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# with --sdm conda (its envs do not install the package) this process and its jobs import it from src/
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p))

from oodcorr.core.yaml_files import load_yaml  # noqa: E402
from oodcorr.launch.snakefile import on_error, on_start, on_success, plan_run  # noqa: E402
from oodcorr.planning.config import NAME_RE  # noqa: E402

# the embedded default unless --configfile gives one; load_yaml names a YAML slip's line (Snakemake does not)
if not workflow.overwrite_configfiles:
    load_yaml(Path(workflow.basedir) / "config/config.yaml")

    configfile: str(Path(workflow.basedir) / "config/config.yaml")  # a full path: `-d <elsewhere>` finds it


PLAN = plan_run(workflow, config)  # the plan, once every check before the rules passed (oodcorr.launch.snakefile)
P = PLAN.paths
LOGS = P.logs
A = P.staged(P.analysis)  # where the analysis and the report's figures are written, then published
NAME = NAME_RE.pattern.removeprefix("^").removesuffix("$")  # a name as the config checks it, unanchored
# the rules' conda envs, from workflow/rules/: the models' and one without torch (docs/development.md#environments)
MODEL_ENV = "../../envs/oodcorr.yaml"
ANALYSIS_ENV = "../../envs/analysis.yaml"


wildcard_constraints:
    model=NAME,
    indomain=NAME,
    dataset=NAME,
    testset=NAME,
    ntrain=r"\d+",
    seed=r"\d+",
    step=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analyse.smk"
include: "workflow/rules/report.smk"


localrules:
    all,


# a run with jobs to run: its config recorded under the experiment's lock, the SLURM cluster checked
onstart:
    on_start(workflow, PLAN, config)


rule all:
    default_target: True
    input:
        # the record of the published set (scores, tables, figures: links into results/<experiment>/.published/)
        P.published,
        # asked for directly: Snakemake does not rebuild a missing file whose consumers are up to date
        # (a deleted predictions file, the staged outputs of a failed analysis step)
        PLAN.staged_targets(),
        PLAN.eval_outputs(),


# what the run made, or why it stopped (each job's sentence, the job named), last on the console
onsuccess:
    on_success(workflow, PLAN)


onerror:
    on_error(workflow, PLAN)
