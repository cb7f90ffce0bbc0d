rule tokenize_testset:
    """Tokenise a testset once per model's tokenizer; every checkpoint reuses it."""
    input:
        data=P.data.replace("{dataset}", "{testset}"),
        meta=P.data_meta.replace("{dataset}", "{testset}"),
        model=PLAN.model_input,
    output:
        P.tokenized,
    log:
        f"{LOGS}/tokenize/{{model}}/{{testset}}.log",
    conda:
        MODEL_ENV
    threads: PLAN.threads("tokenize_testset")
    resources:
        **PLAN.rule_resources("tokenize_testset"),
    params:
        # model_spec, built_model_dir, prompt, labels, coarse, max_length (oodcorr.planning.plan)
        job=PLAN.tokenize_params,
    script:
        "../scripts/tokenize_testset.py"


# Rule evaluate, in the config's `evaluation.unit`:
#   checkpoint (default): one job per run x checkpoint x testset, writing that checkpoint's
#                         predictions file (its record in the file's metadata);
#   run:                  one job per run x testset, loading the model once and swapping in
#                         each checkpoint's weights (a LoRA adapter: only the adapter), writing
#                         the same predictions files plus a summary of the job's records.
# Both write identical predictions files, so switching units recomputes nothing.
if PLAN.unit == "checkpoint":

    rule evaluate:
        """One checkpoint of one run, scored on one testset."""
        input:
            # the run's finetune manifest, or a series' checkpoint manifests
            manifest=PLAN.checkpoints_input,
            tokenized=P.tokenized,
        output:
            P.predictions,
        log:
            f"{LOGS}/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}/step{{step}}/{{testset}}.log",
        conda:
            MODEL_ENV
        threads: PLAN.threads("evaluate")
        resources:
            **PLAN.rule_resources("evaluate"),
        params:
            # model_spec, built_model_dir, provenance: one callable, its value shared by a run x testset
            job=PLAN.eval_params,
        script:
            "../scripts/evaluate.py"

else:

    rule evaluate:
        """Every checkpoint of one run, scored on one testset in one process."""
        input:
            # the run's finetune manifest, or a series' checkpoint manifests
            manifest=PLAN.checkpoints_input,
            tokenized=P.tokenized,
        output:
            summary=P.eval_summary,
        log:
            f"{LOGS}/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}/{{testset}}.log",
        conda:
            MODEL_ENV
        threads: PLAN.threads("evaluate")
        resources:
            **PLAN.rule_resources("evaluate"),
        params:
            # model_spec, built_model_dir, provenance, steps and their predictions files
            job=PLAN.eval_params,
        script:
            "../scripts/evaluate.py"
