# Light jobs run on the submitting (login) node under a cluster executor.
localrules:
    prepare_dataset,
    pretraining_corpus,


rule prepare_dataset:
    """Load a dataset from its registry entry into normalised JSONL (+ provenance)."""
    input:
        PLAN.dataset_input,
    output:
        data=P.data,
        meta=P.data_meta,
    log:
        f"{LOGS}/data/{{dataset}}.log",
    conda:
        MODEL_ENV
    params:
        spec=PLAN.dataset_params,
        mode=PLAN.label_mode,
    script:
        "../scripts/prepare_dataset.py"


rule pretraining_corpus:
    """Unlabelled synthetic text for the tiny models' tokenizer and LM pretraining."""
    output:
        P.corpus,
    log:
        f"{LOGS}/data/pretraining_corpus.log",
    conda:
        MODEL_ENV
    params:
        cfg=PLAN.pretraining["corpus"],
        # a function: a plain string's {premise} would be read as a wildcard
        template=lambda wc: PLAN.pretraining["template"],
        answers=PLAN.pretraining["answers"],
    script:
        "../scripts/pretraining_corpus.py"


rule convert_gguf:
    """A model entry's GGUF file converted once into a safetensors folder, its SHA-256 recorded."""
    input:
        PLAN.gguf_input,
    output:
        directory(P.converted_model),
    log:
        f"{LOGS}/models/gguf/{{model}}.log",
    conda:
        MODEL_ENV
    threads: PLAN.threads("convert_gguf")
    resources:
        **PLAN.rule_resources("convert_gguf"),
    params:
        spec=PLAN.gguf_params,
    script:
        "../scripts/convert_gguf.py"


rule build_tiny_model:
    """Train a tokenizer, build a small causal LM and pretrain it (nothing is downloaded)."""
    input:
        corpus=P.corpus,
    output:
        directory(P.tiny_model),
    log:
        f"{LOGS}/models/{{model}}.log",
    conda:
        MODEL_ENV
    threads: PLAN.threads("build_tiny_model")
    resources:
        **PLAN.rule_resources("build_tiny_model"),
    params:
        spec=lambda wc: PLAN.models[wc.model].model_entry.tiny,
        seed=PLAN.pretraining["corpus"]["seed"],
    script:
        "../scripts/build_tiny_model.py"
