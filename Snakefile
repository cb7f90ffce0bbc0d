# oodcorr: do out-of-distribution results generalise?
# Finetune -> evaluate every checkpoint on every testset -> partial correlations.
# The logic lives in src/oodcorr; the rules below only wire files together.
import os
import re
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
# job processes (scripts, SLURM steps) import the same package
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p))

from oodcorr.config import Experiment  # noqa: E402
from oodcorr.schema import check_config  # noqa: E402

# The embedded default, unless the user gives their own with --configfile: configs
# are complete on their own (schema defaults fill the rest), never merged with it.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# first our own check, which names every offending key with its file and line (Snakemake's
# message buries the key under a dump of the schema); then Snakemake's, which fills defaults
check_config(config, Path(workflow.basedir) / "config/schema.yaml",
             sources=workflow.overwrite_configfiles or [Path(workflow.basedir) / "config/config.yaml"])
validate(config, "config/schema.yaml", set_default=True)
EXP = Experiment(config, workflow.basedir)
EXP.check_inputs_exist()
for _warning in EXP.warnings:
    print(f"oodcorr warning: {_warning}", file=sys.stderr)
ENV = "envs/oodcorr.yaml"

wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    indomain=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    testset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    ntrain=r"\d+",
    seed=r"\d+",
    step=r"\d+",


include: "workflow/rules/common.smk"
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
        "results/scores.parquet",
        "results/scores.csv",
        "results/analysis/partial_correlations.csv",
        "results/analysis/agreement.csv",
        "results/analysis/heatmap_grid.png",
        expand("results/analysis/{kind}/{model}.png", kind=["heatmaps", "learning_curves", "scatter"],
               model=list(EXP.models)),


onsuccess:
    # warnings that do not stop a run (a testset with one class, say) are repeated here
    for line in EXP.dataset_warnings("results/data"):
        print(f"oodcorr: WARNING: {line}")
    print(
        "oodcorr: scores in results/scores.csv, partial correlations in "
        "results/analysis/partial_correlations.csv, heatmaps in results/analysis/heatmaps/"
    )
