rule finetune:
    """One run: model x in-domain set x n_train x data seed, saving every scheduled checkpoint.

    Only manifest.json is declared: the checkpoints beside it survive a failed or
    killed job, and the rerun resumes from the last complete one.
    """
    input:
        train=PLAN.finetune_train_input,
        model=PLAN.model_input,
    output:
        manifest=P.manifest,
    params:
        # model_spec, tiny_dir, finetune, prompt, labels, steps, max_steps (oodcorr.plan)
        run=PLAN.finetune_params,
    threads: PLAN.threads("finetune")
    resources:
        **PLAN.rule_resources("finetune"),
    log:
        f"{LOGS}/finetune/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/finetune.py"
