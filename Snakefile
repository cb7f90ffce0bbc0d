# oodcorr: do out-of-distribution results generalise?
# Finetune -> evaluate every checkpoint on every testset -> partial correlations.
# The logic lives in src/oodcorr; the plan (oodcorr.plan) enumerates the jobs, and the
# rules below only wire its paths, params and resources together.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

# kept though `make` installs the package: envs/oodcorr.yaml does not, so with --sdm conda both
# this process and its jobs import it from src/
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p))

from oodcorr.config import NAME_RE  # noqa: E402
from oodcorr.plan import build_plan  # noqa: E402
from oodcorr.schema import check_config  # noqa: E402

# The embedded default, unless the user gives their own with --configfile: configs
# are complete on their own (schema defaults fill the rest), never merged with it.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


CONFIG_FILES = workflow.overwrite_configfiles or [Path(workflow.basedir) / "config/config.yaml"]
# Everything an experiment produces lives in results/<experiment>/: a config without an
# `experiment:` key is named after its file (my-grid.yaml -> results/my-grid/).
config.setdefault("experiment", Path(CONFIG_FILES[-1]).stem)
# first our own check, which names every offending key with its file and line (Snakemake's
# message buries the key under a dump of the schema); then Snakemake's, which fills defaults
check_config(config, Path(workflow.basedir) / "config/schema.yaml", sources=CONFIG_FILES)
validate(config, "config/schema.yaml", set_default=True)
PLAN = build_plan(config, workflow.basedir)
PLAN.exp.check_inputs_exist()
for _warning in PLAN.warnings:
    print(f"oodcorr warning: {_warning}", file=sys.stderr)
P = PLAN.paths
LOGS = P.logs
# every rule's conda environment; the path is relative to workflow/rules/, where the rules live
ENV = "../../envs/oodcorr.yaml"
# a model, dataset or testset name as the config checks it (oodcorr.config.NAME_RE), unanchored
NAME = NAME_RE.pattern.removeprefix("^").removesuffix("$")

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


rule all:
    default_target: True
    input:
        PLAN.targets(),


onsuccess:
    # warnings that do not stop a run (a testset with one class, say) are repeated here
    for line in PLAN.exp.dataset_warnings(P.data_meta.rsplit("/", 1)[0]):
        print(f"oodcorr: WARNING: {line}")
    print(
        f"oodcorr: scores in {P.scores_csv}, partial correlations in "
        f"{rules.partial_correlations.output.pairs}, heatmaps in {P.analysis}/heatmaps/"
    )
