"""The typed model entry (oodcorr.core.model_entry.ModelEntry) against the dict it replaced.

Snakemake's params, the records and their digests hold :meth:`ModelEntry.params`; they must be the
dict ``Experiment.model_spec`` made before the entry was typed (same keys, values and key order),
or a new version would rerun finished jobs. :func:`old_model_spec` is that function as it was
(commit 96f0236), kept here as the reference; each shipped config's entries, and entries of every
kind the shipped configs lack (GGUF, series, local path, opt-ins, overrides), are compared with it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import FrozenInstanceError

import pytest
import yaml

from oodcorr.core.errors import ConfigError
from oodcorr.core.model_entry import ModelEntry
from oodcorr.planning.config import Experiment, canonical
from oodcorr.planning.plan import build_plan, load
from oodcorr.planning.schema import fill_defaults, read_config

from helpers import REPO, micro_config

SHIPPED = ["config.yaml", "micro.yaml", "real-cpu.yaml", "real-lm.yaml", "paper.yaml", "paper-authors.yaml"]


def old_model_spec(exp: Experiment, model: str) -> dict:
    """``Experiment.model_spec`` as it was before the typed entry (the reference, copied verbatim)."""
    spec = {k: v for k, v in exp.models[model].items() if k not in ("resources", "finetune", "distributed", "params_b")}
    if spec.get("series"):
        first = next(iter(exp.series_checkpoints(model).values()))
        spec["series"] = {k: v for k, v in spec["series"].items() if k not in ("checkpoints", "in_domain")}
        spec["series"]["tokenizer"] = first
    return canonical(spec)


def old_source_record(entry: dict, source: str) -> dict:
    """``ModelSpec.source_record`` as it was, on the old dict."""
    src = {k: entry[k] for k in ("hub", "revision", "path", "package") if entry.get(k)}
    if source == "series":
        return canonical({"series": entry["series"].get("hub") or "local directories"})
    return canonical(src or {"tiny": entry["tiny"]["model_type"]})


def same(a, b) -> bool:
    """Equal, and the same key order all the way down (what Snakemake and the digests see)."""
    return a == b and json.dumps(a) == json.dumps(b)


# entries of the kinds the shipped configs lack, each with keys that must stay out of the params
EXTRA_MODELS = [
    {
        "name": "gguf-path",
        "path": "models/lm.Q8_0.GGUF",
        "dtype": "bfloat16",
        "gguf_chat_template": True,
        "params_b": 0.1,
        "resources": {"evaluate": {"gpu": 1}},
    },
    {"name": "gguf-pkg", "package": "some_pkg/weights/lm.gguf"},
    {
        "name": "local",
        "path": "models/local",
        "method": "head",
        "trust_remote_code": True,
        "allow_pickle_weights": True,
        "size_class": "small",
        "finetune": {"learning_rate": 1e-4},
        "distributed": {"strategy": "fsdp", "gpus": 2},
    },
    {
        "name": "hub-pinned",
        "hub": "org/model",
        "revision": "a" * 40,
        "dtype": "auto",
        "prompt": {"verbalisers": {"non-entailment": " No", "entailment": " Yes"}, "truncation": "right"},
    },
    {
        "name": "tiny-full",
        "tiny": {
            "threads": 2,
            "model_type": "olmo2",
            "vocab_size": 500,
            "config": {"num_hidden_layers": 1, "hidden_size": 32},
            "pretrain": {"steps": 3, "batch_size": 2},
        },
    },
    {
        "name": "series-local",
        "series": {
            "in_domain": ["synth"],
            "checkpoints": [{"tokens": 10, "path": "ck/a"}, {"tokens": 20, "path": "ck/b"}],
        },
    },
    {
        "name": "series-hub",
        "series": {
            "hub": "EleutherAI/pythia-70m",
            "checkpoints": [{"step": 1000, "revision": "b" * 40}, {"step": 2000, "revision": "c" * 40}],
        },
    },
]


def _shipped(name: str) -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return cfg


def _extra() -> dict:
    cfg = micro_config()
    cfg["models"] = copy.deepcopy(EXTRA_MODELS)
    fill_defaults(cfg, REPO / "config/schema.yaml")
    return cfg


def _cases():
    for name in SHIPPED:
        yield name, _shipped(name)
    yield "kinds the shipped configs lack", _extra()


@pytest.mark.parametrize(("label", "cfg"), list(_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_params_are_the_dict_the_old_code_passed(label, cfg):
    exp = Experiment(cfg, REPO)
    assert exp.models, label
    for m in exp.models:
        old = old_model_spec(exp, m)
        entry = exp.model_entry(m)
        assert isinstance(entry, ModelEntry)
        assert same(entry.params(), old), (label, m)
        # what a job gets back from its params is the planned entry, and its params the same dict again
        assert ModelEntry.from_params(old) == entry
        assert same(ModelEntry.from_params(old).params(), old), (label, m)
        assert same(entry.source_record, old_source_record(old, entry.source)), (label, m)


def test_the_extra_kinds_are_what_they_say():
    exp = Experiment(_extra(), REPO)
    entries = {m: exp.model_entry(m) for m in exp.models}
    assert {m: e.source for m, e in entries.items()} == {
        "gguf-path": "path",
        "gguf-pkg": "package",
        "local": "path",
        "hub-pinned": "hub",
        "tiny-full": "tiny",
        "series-local": "series",
        "series-hub": "series",
    }
    assert [m for m, e in entries.items() if e.is_gguf] == ["gguf-path", "gguf-pkg"]
    assert [m for m, e in entries.items() if e.is_series] == ["series-local", "series-hub"]
    assert [m for m, e in entries.items() if e.is_tiny] == ["tiny-full"]
    local = entries["local"]
    assert (local.method, local.trust_remote_code, local.allow_pickle_weights, local.dtype) == (
        "head",
        True,
        True,
        "float32",
    )
    assert not {"resources", "finetune", "distributed", "params_b"} & set(entries["gguf-path"].params())
    assert not {"resources", "finetune", "distributed", "params_b"} & set(local.params())
    assert entries["series-local"].series == {"tokenizer": {"path": "ck/a"}}
    assert entries["series-hub"].source_record == {"series": "EleutherAI/pythia-70m"}
    assert entries["series-local"].source_record == {"series": "local directories"}


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_the_plan_passes_the_old_dict_in_every_rules_params(name):
    """What the rules get: the plan's params hold the old dict (the embedded default and the paper grid)."""
    path = REPO / "config" / name
    plan = load(read_config(path), REPO, [path])
    for m, spec in plan.models.items():
        old = old_model_spec(plan.exp, m)
        assert same(spec.model_entry.params(), old)
        run = next(r for r in plan.runs if r.model == m)
        wc = _Wildcards(model=m, indomain=run.in_domain, ntrain=str(run.n_train), seed=str(run.seed))
        assert same(plan.tokenize_params(wc)["model_spec"], old)
        assert same(plan.finetune_params(wc)["model_spec"], old)
        testset = plan.testsets[run.in_domain][0][0]
        assert same(plan.eval_params(_Wildcards(**wc, testset=testset))["model_spec"], old)


def test_the_plan_of_a_gguf_and_a_series_entry_passes_the_old_dict(tmp_path):
    cfg = micro_config()
    cfg["models"] = [
        {"name": "lm", "path": str(tmp_path / "m.gguf"), "dtype": "bfloat16"},
        {
            "name": "pythia",
            "series": {
                "hub": "EleutherAI/pythia-70m",
                "checkpoints": [{"step": s, "revision": c * 40} for s, c in ((1, "a"), (2, "b"), (3, "c"), (4, "d"))],
            },
        },
    ]
    fill_defaults(cfg, REPO / "config/schema.yaml")
    plan = build_plan(cfg, REPO)
    gguf = old_model_spec(plan.exp, "lm")
    assert same(plan.gguf_params(_Wildcards(model="lm")), gguf)
    series = old_model_spec(plan.exp, "pythia")
    assert same(plan.models["pythia"].model_entry.params(), series)
    old_opt_ins = {k: series[k] for k in ("trust_remote_code", "allow_pickle_weights") if k in series}
    assert same(plan.series_params(_Wildcards(model="pythia", step="1"))["entry"], old_opt_ins)


def test_an_unknown_key_names_it_and_what_to_do():
    with pytest.raises(ConfigError, match=r"models\[m\]: unknown key\(s\) 'quantise' .*plan again with this code"):
        ModelEntry.from_params({"name": "m", "hub": "org/m", "quantise": "int8"})
    with pytest.raises(ConfigError, match="needs a `name`"):
        ModelEntry.from_params({"hub": "org/m"})
    with pytest.raises(ConfigError, match="must be a mapping"):
        ModelEntry.from_params(["name", "m"])


def test_an_entry_is_read_only_and_its_params_share_nothing_with_it():
    entry = ModelEntry.from_params({"name": "m", "tiny": {"model_type": "opt", "config": {"hidden_size": 32}}})
    with pytest.raises(FrozenInstanceError):
        entry.dtype = "bfloat16"
    p = entry.params()
    p["tiny"]["config"]["hidden_size"] = 64
    assert entry.tiny["config"]["hidden_size"] == 32
    # the schema's defaults, as the plan's entries carry them
    assert p == {
        "allow_pickle_weights": False,
        "dtype": "float32",
        "gguf_chat_template": False,
        "method": "pattern",
        "name": "m",
        "tiny": {"config": {"hidden_size": 64}, "model_type": "opt"},
        "trust_remote_code": False,
    }


def test_an_entry_without_a_source_is_named():
    with pytest.raises(ConfigError, match=r"models\[m\]: give one of `tiny`"):
        _ = ModelEntry(name="m").source


class _Wildcards(dict):
    """Snakemake's wildcards: attributes and keys."""

    __getattr__ = dict.__getitem__
