"""What the comparisons with lm-evaluation-harness share: the model, the testset, the lm-eval task.

Used by ``evaluator_vs_lmeval.py`` (one model, scoring calls in one process) and
``lora_series_vs_lmeval.py`` (a LoRA run's checkpoints, whole processes). Nothing here
imports torch or transformers at module level, so a script can import it cheaply.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

SHARED_NLI = REPO.parent / "shared/data/nli"
DEFAULT_TESTSET = SHARED_NLI / "rte/validation.jsonl"
DEFAULT_TEMPLATE = "{premise} Question: {hypothesis} Yes or No?"
DEFAULT_VERBALISERS = (" Yes", " No")
LABELS = ["entailment", "non-entailment"]

# architecture presets: OPT configs (hidden, layers, heads, ffn)
ARCHS = {
    "small": {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "ffn_dim": 2048},
    # the shape of facebook/opt-125m
    "125m": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072},
    # the shape of facebook/opt-1.3b
    "1b": {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "ffn_dim": 8192},
}

# the text a tokenizer is trained on, besides the synthetic corpus:
#   "rte-train": RTE's training set (about 29,000 BPE tokens at most)
#   "nli": every JSONL under ../shared/data/nli except the testset (enough for a 50,272-token BPE)
CORPORA = ("rte-train", "nli")


def corpus_files(corpus: str, exclude: Path | None = None) -> list[Path]:
    if corpus == "rte-train":
        files = [SHARED_NLI / "rte/train.jsonl"]
    elif corpus == "nli":
        files = sorted(SHARED_NLI.glob("*/*.jsonl"))
    else:
        raise ValueError(f"corpus {corpus!r}: one of {CORPORA}")
    skip = exclude.resolve() if exclude else None
    return [f for f in files if f.exists() and f.resolve() != skip]


def build_model(
    workdir: Path,
    *,
    arch: str,
    tokenizer_vocab: int,
    model_vocab: int,
    max_length: int,
    corpus: str = "rte-train",
    exclude: Path | None = None,
) -> Path:
    """A randomly initialised OPT built with oodcorr.modeling.tiny (seed 0), a byte-level BPE tokenizer trained
    here on the synthetic corpus and ``corpus``; the embedding / LM head resized to ``model_vocab``
    rows if the tokenizer has fewer. Cached in ``workdir`` under a name that says all of that."""
    from oodcorr.core.io import read_jsonl
    from oodcorr.modeling import synthetic
    from oodcorr.modeling.tiny import build_model as tiny_build
    from oodcorr.modeling.tiny import train_tokenizer

    files = corpus_files(corpus, exclude)
    name = f"opt-{arch}-v{tokenizer_vocab}-m{model_vocab}-p{max_length}"
    if corpus != "rte-train":  # the first name, kept for the models already built
        tag = hashlib.sha256(json.dumps([str(f.relative_to(SHARED_NLI)) for f in files]).encode()).hexdigest()
        name += f"-{corpus}{tag[:8]}"
    d = Path(workdir) / name
    if (d / "model.safetensors").exists() or (d / "model.safetensors.index.json").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    corpus_lines = synthetic.pretraining_corpus(20000, 0)
    for f in files:  # real English for the BPE merges
        corpus_lines += [f"{r['premise']} {r['hypothesis']}" for r in read_jsonl(f)]
    tok = train_tokenizer(corpus_lines, tokenizer_vocab, d)
    cfg = dict(
        ARCHS[arch],
        word_embed_proj_dim=ARCHS[arch]["hidden_size"],
        max_position_embeddings=max_length + 8,
        dropout=0.0,
        attention_dropout=0.0,
    )
    model = tiny_build({"model_type": "opt", "config": cfg}, tok, seed=0)
    if model_vocab > len(tok):
        model.resize_token_embeddings(model_vocab, mean_resizing=False)
    model.save_pretrained(d)
    return d


def load_records(
    data: str | Path, limit: int | None = None, synthetic_shift: str | None = None, n_synthetic: int = 600
) -> tuple[str, list[dict]]:
    """(testset name, records in the oodcorr format) via oodcorr.jobs.prepare_dataset.prepare, binary label mode."""
    from oodcorr.jobs import prepare_dataset as oodcorr_data
    from oodcorr.modeling import synthetic

    if synthetic_shift:
        name, recs = f"synthetic-{synthetic_shift}", synthetic.generate(synthetic_shift, n_synthetic, 0)
    else:
        path = Path(data)
        name = f"{path.parent.name}/{path.stem}"
        import yaml

        mode = dict(yaml.safe_load((REPO / "resources/label_modes.yaml").read_text())["binary"], name="binary")
        recs, _ = oodcorr_data.prepare(name, {"source": "local", "path": str(path), "format": "jsonl"}, mode)
    return name, recs[:limit] if limit else recs


def write_lmeval_task(workdir: Path, prompts: list[str], gold: list[int], verbalisers: list[str]) -> Path:
    """A local lm-eval task: YAML over a JSONL of already formatted prompts (doc_to_text = our prompt)."""
    import yaml

    tdir = Path(workdir) / "lmeval_task"
    tdir.mkdir(parents=True, exist_ok=True)
    docs = tdir / "docs.jsonl"
    with open(docs, "w", encoding="utf-8") as fh:
        for i, (p, g) in enumerate(zip(prompts, gold)):
            fh.write(json.dumps({"idx": i, "prompt": p, "label": g}) + "\n")
    task = {
        "task": "oodcorr_bench",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(docs)}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{prompt}}",
        # the verbalisers carry their own leading space, so no delimiter is added
        "target_delimiter": "",
        "doc_to_choice": list(verbalisers),
        "doc_to_target": "label",
        "metric_list": [{"metric": "acc"}],
        "num_fewshot": 0,
    }
    (tdir / "oodcorr_bench.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return tdir


def lmeval_choice_scores(sample: dict) -> list[float]:
    """The log-likelihood of each choice in one lm-eval sample (its ``filtered_resps``)."""
    return [float(r[0]) for r in sample["filtered_resps"]]


def median_spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}
