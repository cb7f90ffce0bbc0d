"""Where each file of an experiment lives under ``results/<experiment>/``, as Snakemake patterns."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.provenance import PROVENANCE_FILE
from ..core.published import MARKER

_RUN = "{model}/{indomain}/n{ntrain}/seed{seed}"

# name -> the path below results/<experiment>/
_LAYOUT = {
    "data": "data/{dataset}.jsonl",
    "data_meta": "data/{dataset}.meta.json",
    "corpus": "data/pretraining_corpus.txt",
    "tiny_model": "models/{model}",
    "converted_model": "models/gguf/{model}",  # a GGUF file converted into a safetensors folder
    "tokenized": "cache/tokenized/{model}/{testset}.pt",
    "run_dir": f"finetune/{_RUN}",
    "manifest": f"finetune/{_RUN}/manifest.json",
    "series_manifest": "series/{model}/step{step}.json",  # where a series checkpoint is, its files' sha256s
    "eval_dir": f"eval/{_RUN}",
    "predictions": f"eval/{_RUN}/step{{step}}/{{testset}}.predictions.parquet",  # one checkpoint x testset
    "eval_summary": f"eval/{_RUN}/{{testset}}.json",  # `evaluation.unit: run` only: one job's records
    # where the aggregation and the analysis write; publish_results publishes the whole set (Paths.staged)
    "staging": ".staging",
    "published": MARKER,  # publish_results' output: the record of the set it published (oodcorr.core.published)
    "scores": "scores.parquet",
    "scores_csv": "scores.csv",
    "provenance": PROVENANCE_FILE,
    "accuracy_html": "accuracy.html",
    "accuracy_csv": "accuracy.csv",
    "analysis": "analysis",
    "logs": "logs",
}


@dataclass(frozen=True)
class Paths:
    """Every path of :data:`_LAYOUT` as an attribute, under ``root``."""

    root: str

    def __getattr__(self, name: str) -> str:
        if name not in _LAYOUT:
            raise AttributeError(name)
        return f"{self.root}/{_LAYOUT[name]}"

    def staged(self, path: str) -> str:
        """The staging copy of a published result (the scores, a table, a figure)."""
        return f"{self.staging}/{path[len(self.root) + 1 :]}"
