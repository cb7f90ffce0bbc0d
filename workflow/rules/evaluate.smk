rule tokenize_testset:
    """Tokenise a testset once per model's tokenizer; every checkpoint reuses it."""
    input:
        data="results/data/{testset}.jsonl",
        meta="results/data/{testset}.meta.json",
        model=tiny_model_dir,
    output:
        "results/cache/tokenized/{model}/{testset}.pt",
    params:
        tiny_dir=tiny_dir_param,
        model_spec=lambda wc: EXP.model_spec(wc.model),
        prompt=lambda wc: EXP.prompt_for(wc.model),
        labels=EXP.labels,
        coarse=EXP.label_mode.get("coarse", {}),
        max_length=config["evaluation"]["max_length"],
    log:
        "logs/tokenize/{model}/{testset}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/tokenize_testset.py"


rule evaluate:
    """Score one checkpoint on one testset: accuracy JSON + per-example predictions."""
    input:
        manifest=f"{RUN_DIR}/manifest.json",
        tokenized="results/cache/tokenized/{model}/{testset}.pt",
        model=tiny_model_dir,
    output:
        json=f"{EVAL_DIR}/{{testset}}.json",
        predictions=f"{EVAL_DIR}/{{testset}}.predictions.parquet",
    params:
        checkpoint=f"{RUN_DIR}/checkpoints/checkpoint-{{step}}",
        # model_spec, tiny_dir, provenance: one callable, see eval_params in common.smk
        job=eval_params,
    threads: model_threads("evaluate")
    resources:
        gpu=model_resource("evaluate", "gpu", 0),
        # the same count under a name only evaluations use: profiles/slurm caps it per
        # group job (how many of a checkpoint's evaluations share the job's GPUs at once)
        # without capping a multi-GPU finetune's `gpu`
        eval_gpus=model_resource("evaluate", "gpu", 0),
        gpu_model=gpu_model("evaluate"),
        cpus_per_task=model_threads("evaluate"),
        mem_mb=model_resource("evaluate", "mem_mb", 2000),
        runtime=model_resource("evaluate", "runtime", 30),
        attempt=attempt_number,  # the script halves its batch size on each retry
    # On a cluster a checkpoint's evaluations go out as one job; profiles/slurm sets
    # --group-components for this name. Ignored when running locally.
    group:
        EVAL_GROUP
    log:
        f"logs/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}/step{{step}}/{{testset}}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/evaluate.py"
