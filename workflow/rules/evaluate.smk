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


# One evaluation job scores every checkpoint of one run on one testset and writes one
# predictions file per checkpoint x testset, plus the job's summary JSON. A job per
# checkpoint x testset would pay a fresh Python process (imports, first model load:
# ~95 % of such a job) each time, and 10^5 of them take Snakemake minutes to plan.
# A rule's outputs are a fixed list, so each checkpoint schedule gets its own rule
# (`evaluate`, then `evaluate_2`, ...; one in most configs): EXP.eval_rules().
for _ev in EXP.eval_rules():

    rule:
        name:
            _ev["name"]
        input:
            manifest=f"{RUN_DIR}/manifest.json",
            tokenized="results/cache/tokenized/{model}/{testset}.pt",
            model=tiny_model_dir,
        output:
            summary=f"{RUN_EVAL_DIR}/{{testset}}.json",
            checkpoints=[f"{RUN_EVAL_DIR}/step{s}/{{testset}}.predictions.parquet" for s in _ev["steps"]],
        wildcard_constraints:
            **({"model": "|".join(re.escape(m) for m in _ev["models"]),
                "ntrain": "|".join(str(n) for n in _ev["ntrain"])} if _ev["models"] else {}),
        params:
            steps=_ev["steps"],
            # model_spec, tiny_dir, provenance: one callable, see eval_params in common.smk
            job=eval_params,
        threads: model_threads("evaluate")
        resources:
            gpu=model_resource("evaluate", "gpu", 0),
            gpu_model=gpu_model("evaluate"),
            cpus_per_task=model_threads("evaluate"),
            mem_mb=model_resource("evaluate", "mem_mb", 2000),
            runtime=eval_runtime(len(_ev["steps"])),
            attempt=attempt_number,  # the script halves its batch size on each retry
        log:
            f"logs/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}/{{testset}}.log",
        conda:
            "../../envs/oodcorr.yaml"
        script:
            "../scripts/evaluate.py"
