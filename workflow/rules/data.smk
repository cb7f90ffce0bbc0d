# Light jobs run on the submitting (login) node under a cluster executor.
localrules:
    prepare_dataset,
    pretraining_corpus,


rule prepare_dataset:
    """Load a dataset from its registry entry into normalised JSONL (+ provenance)."""
    input:
        lambda wc: EXP.dataset_input(wc.dataset),
    output:
        data="results/data/{dataset}.jsonl",
        meta="results/data/{dataset}.meta.json",
    params:
        spec=lambda wc: EXP.dataset_params(wc.dataset),
        mode=EXP.label_mode,
    log:
        "logs/data/{dataset}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/prepare_dataset.py"


rule pretraining_corpus:
    """Unlabelled synthetic text for the tiny models' tokenizer and LM pretraining."""
    output:
        "results/data/pretraining_corpus.txt",
    params:
        cfg=config["pretraining_corpus"],
        template=lambda wc: config["prompt"]["template"],
        answers=[v.strip() for v in config["prompt"]["verbalisers"].values()],
    log:
        "logs/data/pretraining_corpus.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/pretraining_corpus.py"


rule build_tiny_model:
    """Train a tokenizer, build a small causal LM and pretrain it (nothing is downloaded)."""
    input:
        corpus="results/data/pretraining_corpus.txt",
    output:
        directory("results/models/{model}"),
    params:
        spec=lambda wc: EXP.model_spec(wc.model)["tiny"],
        seed=config["pretraining_corpus"]["seed"],
    threads: model_threads("build_tiny_model")
    resources:
        cpus_per_task=model_threads("build_tiny_model"),
        mem_mb=model_resource("build_tiny_model", "mem_mb", 2000),
        runtime=model_resource("build_tiny_model", "runtime", 30),
    log:
        "logs/models/{model}.log",
    conda:
        "../../envs/oodcorr.yaml"
    script:
        "../scripts/build_tiny_model.py"
