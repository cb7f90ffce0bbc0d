# Input functions shared by the rules (no rules here, so --lint stays quiet).

RUN_DIR = "results/finetune/{model}/{indomain}/n{ntrain}/seed{seed}"
# an evaluation job: one run x one testset, all of the run's checkpoints
RUN_EVAL_DIR = "results/eval/{model}/{indomain}/n{ntrain}/seed{seed}"


def tiny_model_dir(wildcards):
    """The built tiny model a job needs, or nothing for hub/local models."""
    if EXP.models[wildcards.model].get("tiny"):
        return f"results/models/{wildcards.model}"
    return []


def tiny_dir_param(wildcards, input):
    return input.model if EXP.models[wildcards.model].get("tiny") else None


# Planning cost: Snakemake expands every job's params while it plans (its conda-env and
# script look-ups read them), and each callable costs it signature inspections and
# containers besides the call. So rule evaluate has one params callable, its value
# computed once per run x testset (benchmarks/README.md has the numbers).
def eval_params(wildcards):
    """model_spec, tiny_dir and provenance of an evaluation job (one run x one testset)."""
    return {
        "model_spec": EXP.model_spec(wildcards.model),
        "tiny_dir": f"results/models/{wildcards.model}" if EXP.models[wildcards.model].get("tiny") else None,
        "provenance": EXP.eval_provenance(wildcards),
    }


def eval_runtime(n_checkpoints):
    """Minutes of an evaluation job: the config's `runtime` is per checkpoint."""

    def get(wildcards, attempt):
        return EXP.resources(wildcards.model, "evaluate").get("runtime", 10) * n_checkpoints * attempt

    return get


def model_resource(rule, key, default):
    """A resource callable: the model's per-rule value, else the config's, else ``default``."""

    def get(wildcards, attempt):
        value = EXP.resources(wildcards.model, rule).get(key, default)
        # retries scale memory and time with the attempt number
        return value * attempt if key in ("mem_mb", "runtime") else value

    return get


def finetune_gpus(wildcards):
    """GPUs of a finetune job: the model's `distributed.gpus` when it trains on several."""
    dist = EXP.models[wildcards.model].get("distributed")
    if dist:
        return int(dist["gpus"])
    return EXP.resources(wildcards.model, "finetune").get("gpu", 0)


def gpu_model(rule):
    """A resource callable: the GPU type asked of SLURM (`gpu_model`); None (no such resource) if unset."""

    def get(wildcards):
        res = EXP.resources(wildcards.model, rule)
        gpus = finetune_gpus(wildcards) if rule == "finetune" else res.get("gpu", 0)
        return res.get("gpu_model") if gpus else None

    return get


def model_threads(rule, default=1):
    def get(wildcards):
        return EXP.resources(wildcards.model, rule).get("threads", default)

    return get


def attempt_number(wildcards, attempt):
    """Snakemake's attempt (1, then 2, ... on --retries), as a resource a script can read.

    A resource, not a param: resources never make Snakemake rerun a finished job.
    """
    return attempt
