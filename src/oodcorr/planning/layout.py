"""Where each file of an experiment lives under ``results/<experiment>/``, as Snakemake patterns."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.provenance import PROVENANCE_FILE
from ..core.published import MARKER


@dataclass(frozen=True)
class Paths:
    root: str

    @property
    def data(self) -> str:
        return f"{self.root}/data/{{dataset}}.jsonl"

    @property
    def data_meta(self) -> str:
        return f"{self.root}/data/{{dataset}}.meta.json"

    @property
    def corpus(self) -> str:
        return f"{self.root}/data/pretraining_corpus.txt"

    @property
    def tiny_model(self) -> str:
        return f"{self.root}/models/{{model}}"

    @property
    def converted_model(self) -> str:
        return f"{self.root}/models/gguf/{{model}}"

    @property
    def tokenized(self) -> str:
        return f"{self.root}/cache/tokenized/{{model}}/{{testset}}.pt"

    @property
    def run_dir(self) -> str:
        return f"{self.root}/finetune/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}"

    @property
    def manifest(self) -> str:
        return f"{self.run_dir}/manifest.json"

    @property
    def series_manifest(self) -> str:
        return f"{self.root}/series/{{model}}/step{{step}}.json"

    @property
    def eval_dir(self) -> str:
        return f"{self.root}/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}"

    @property
    def predictions(self) -> str:
        return f"{self.eval_dir}/step{{step}}/{{testset}}.predictions.parquet"

    @property
    def eval_summary(self) -> str:
        """``evaluation.unit: run`` only: one job's records (a run x a testset)."""
        return f"{self.eval_dir}/{{testset}}.json"

    @property
    def staging(self) -> str:
        """Where the aggregation and the analysis write; ``publish_results`` publishes the whole set."""
        return f"{self.root}/.staging"

    def staged(self, path: str) -> str:
        if not path.startswith(self.root + "/"):
            raise ValueError(f"{path} is not under {self.root}")
        return f"{self.staging}/{path[len(self.root) + 1 :]}"

    @property
    def published(self) -> str:
        """Rule ``publish_results``' output: the record of the set it published (:mod:`oodcorr.core.published`)."""
        return f"{self.root}/{MARKER}"

    @property
    def scores(self) -> str:
        return f"{self.root}/scores.parquet"

    @property
    def scores_csv(self) -> str:
        return f"{self.root}/scores.csv"

    @property
    def provenance(self) -> str:
        return f"{self.root}/{PROVENANCE_FILE}"

    @property
    def accuracy_html(self) -> str:
        return f"{self.root}/accuracy.html"

    @property
    def accuracy_csv(self) -> str:
        return f"{self.root}/accuracy.csv"

    @property
    def analysis(self) -> str:
        return f"{self.root}/analysis"

    @property
    def logs(self) -> str:
        return f"{self.root}/logs"
