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
    log:
        f"{LOGS}/finetune/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}.log",
    conda:
        MODEL_ENV
    threads: PLAN.threads("finetune")
    resources:
        **PLAN.rule_resources("finetune"),
    params:
        # model_spec, built_model_dir, finetune, prompt, labels, steps, max_steps (oodcorr.planning.plan)
        run=PLAN.finetune_params,
    script:
        "../scripts/finetune.py"


# A series model's checkpoints exist already (models[].series): each gets a manifest instead
# of a finetune, and its evaluations read that. Light (it hashes a local checkpoint's files
# once), so it runs on the submitting node.
localrules:
    series_checkpoint,


rule series_checkpoint:
    """One given checkpoint: where it is and, for a local directory, its files' sizes and sha256s.

    A local checkpoint's files are the input, so changing one rewrites this manifest and
    reruns that checkpoint's evaluations (and nothing else)."""
    input:
        PLAN.series_files,
    output:
        P.series_manifest,
    log:
        f"{LOGS}/series/{{model}}/step{{step}}.log",
    conda:
        MODEL_ENV
    params:
        # model, x_unit, checkpoint ({path} or {hub, revision}), the entry's safety opt-ins (oodcorr.planning.plan)
        job=PLAN.series_params,
    script:
        "../scripts/series_checkpoint.py"
