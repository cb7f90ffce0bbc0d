rule finetune:
    """One run: model x in-domain set x n_train x data seed, saving every scheduled checkpoint.

    Only manifest.json is declared: the checkpoints beside it survive a failed or
    killed job, and the rerun resumes from the last complete one.
    """
    input:
        train=lambda wc: f"results/data/{EXP.in_domain[wc.indomain]['train']}.jsonl",
        model=tiny_model_dir,
    output:
        manifest=f"{RUN_DIR}/manifest.json",
    params:
        run_dir=lambda wc, output: os.path.dirname(output.manifest),
        tiny_dir=tiny_dir_param,
        model_spec=lambda wc: EXP.model_spec(wc.model),
        finetune=lambda wc: EXP.finetune_params(wc.model),
        prompt=lambda wc: EXP.prompt_for(wc.model),
        labels=EXP.labels,
        steps=lambda wc: EXP.checkpoint_steps(EXP.run_from_wildcards(wc)),
        max_steps=lambda wc: EXP.max_steps(EXP.run_from_wildcards(wc)),
    threads: model_threads("finetune")
    resources:
        gpu=finetune_gpus,
        gpu_model=gpu_model("finetune"),
        cpus_per_task=model_threads("finetune"),
        mem_mb=model_resource("finetune", "mem_mb", 4000),
        runtime=model_resource("finetune", "runtime", 60),
    log:
        f"logs/finetune/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/finetune.py"
