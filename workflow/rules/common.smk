# Input functions shared by the rules (no rules here, so --lint stays quiet).

RUN_DIR = "results/finetune/{model}/{indomain}/n{ntrain}/seed{seed}"
EVAL_DIR = "results/eval/{model}/{indomain}/n{ntrain}/seed{seed}/step{step}"
# one group per checkpoint; profiles/slurm names this exact string in --group-components
EVAL_GROUP = "eval-{model}-{indomain}-n{ntrain}-seed{seed}-step{step}"


def tiny_model_dir(wildcards):
    """The built tiny model a job needs, or nothing for hub/local models."""
    if EXP.models[wildcards.model].get("tiny"):
        return f"results/models/{wildcards.model}"
    return []


def tiny_dir_param(wildcards, input):
    return input.model if EXP.models[wildcards.model].get("tiny") else None


# Planning cost at 10^5 evaluation jobs: Snakemake expands every job's params while it
# plans (its conda-env and script look-ups read them), and each callable costs it
# signature inspections and containers besides the call. So rule evaluate has one
# params callable, and its value is computed once per run x testset and shared by
# that run's checkpoints (benchmarks/README.md has the numbers).
_EVAL_PARAMS = {}


def eval_params(wildcards):
    """model_spec, tiny_dir and provenance of an evaluation job (the same for every checkpoint)."""
    key = (wildcards.model, wildcards.indomain, wildcards.ntrain, wildcards.seed, wildcards.testset)
    got = _EVAL_PARAMS.get(key)
    if got is None:
        got = _EVAL_PARAMS[key] = {
            "model_spec": EXP.model_spec(wildcards.model),
            "tiny_dir": f"results/models/{wildcards.model}" if EXP.models[wildcards.model].get("tiny") else None,
            "provenance": EXP.eval_provenance(wildcards),
        }
    return got


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
