"""The results folder's layout: where each file of an experiment lives, under ``results/<experiment>/``.

:class:`Paths` spells every path as a Snakemake pattern (``{model}``, ``{step}``...); the plan
(:class:`oodcorr.planning.plan.Plan`) fills them in for its jobs, the rules read them from the
plan, and the aggregation reads the fields back from a path (:mod:`oodcorr.jobs.aggregate_scores`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.provenance import PROVENANCE_FILE
from ..core.published import MARKER


@dataclass(frozen=True)
class Paths:
    """Every path of an experiment, as Snakemake patterns, under ``results/<experiment>``."""

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
        """A GGUF model file converted into a safetensors folder (rule convert_gguf)."""
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
        """A series checkpoint's manifest: where it is and, for a local directory, its files' sha256s."""
        return f"{self.root}/series/{{model}}/step{{step}}.json"

    @property
    def eval_dir(self) -> str:
        return f"{self.root}/eval/{{model}}/{{indomain}}/n{{ntrain}}/seed{{seed}}"

    @property
    def predictions(self) -> str:
        """One checkpoint x testset: per-example predictions, its record in the metadata."""
        return f"{self.eval_dir}/step{{step}}/{{testset}}.predictions.parquet"

    @property
    def eval_summary(self) -> str:
        """``evaluation.unit: run`` only: one job's records (a run x a testset)."""
        return f"{self.eval_dir}/{{testset}}.json"

    @property
    def staging(self) -> str:
        """Where the aggregation and the analysis write; ``publish_results`` copies the whole
        set into place (:meth:`staged`), so a failed step leaves the previous set whole."""
        return f"{self.root}/.staging"

    def staged(self, path: str) -> str:
        """The staging copy of a published result (the scores, a table, a figure)."""
        if not path.startswith(self.root + "/"):
            raise ValueError(f"{path} is not under {self.root}")
        return f"{self.staging}/{path[len(self.root) + 1 :]}"

    @property
    def published(self) -> str:
        """Rule ``publish_results``' declared output: the record of the set it published. The files
        people read are links into ``.published/current/`` (:mod:`oodcorr.core.published`)."""
        return f"{self.root}/{MARKER}"

    @property
    def scores(self) -> str:
        return f"{self.root}/scores.parquet"

    @property
    def scores_csv(self) -> str:
        return f"{self.root}/scores.csv"

    @property
    def provenance(self) -> str:
        """What made the scores: the libraries their finetunes and evaluations recorded, the code that
        aggregated them (:func:`oodcorr.core.provenance.scores_provenance`)."""
        return f"{self.root}/{PROVENANCE_FILE}"

    @property
    def accuracy_html(self) -> str:
        """The accuracy table (a run x checkpoint per row, a testset per column) for the report."""
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
