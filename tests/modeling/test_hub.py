"""Prefetch and pin (oodcorr.modeling.hub), offline against a fake hub: a folder of repositories whose
revisions resolve to commits, downloaded into a real Hugging Face cache layout."""

import hashlib
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from oodcorr.cli import main
from oodcorr.core.errors import ConfigError
from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.prepare_dataset import prepare
from oodcorr.modeling import hub
from oodcorr.modeling.loading import model_source
from oodcorr.modeling.weights import weight_shapes
from oodcorr.planning.plan import load
from oodcorr.planning.schema import read_config

from helpers import BINARY, REPO, TINY_CONFIGS, micro_config, smk

REPO_ID = "fake-org/tiny-opt"
DATA_ID = "fake-org/nli"


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class FakeHub:
    """Repositories with files at commits, branch/tag/PR refs resolving to them; downloads go into
    ``$HF_HOME/hub`` laid out as huggingface_hub lays out its cache (``models--org--name/snapshots/<sha>``)."""

    def __init__(self):
        self.models, self.datasets, self.downloads, self.loads = {}, {}, [], []

    def add_model(self, repo, refs: dict, files: dict[str, Path | bytes]):
        commits = {c: files for c in refs.values()}
        self.models[repo] = {"refs": refs, "commits": commits}

    def add_dataset(self, repo, refs: dict, rows: list[dict]):
        self.datasets[repo] = {"refs": refs, "rows": rows}

    @staticmethod
    def _resolve(entry, revision):
        rev = revision or "main"
        if rev in entry["refs"]:
            return entry["refs"][rev]
        if rev in entry["refs"].values():
            return rev
        raise FileNotFoundError(f"revision {rev} not found")

    # HfApi
    def model_info(self, repo_id, revision=None, **kw):
        e = self.models[repo_id]
        commit = self._resolve(e, revision)
        return SimpleNamespace(sha=commit, siblings=[SimpleNamespace(rfilename=n) for n in e["commits"][commit]])

    def dataset_info(self, repo_id, revision=None, **kw):
        return SimpleNamespace(sha=self._resolve(self.datasets[repo_id], revision))

    # huggingface_hub.snapshot_download
    def snapshot_download(self, repo_id, revision=None, allow_patterns=None, **kw):
        e = self.models[repo_id]
        commit = self._resolve(e, revision)
        snap = Path(hub.cache_dirs()["hub"]) / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        for name, src in e["commits"][commit].items():
            if allow_patterns is not None and name not in allow_patterns:
                continue
            dest = snap / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, bytes):
                dest.write_bytes(src)
            else:
                shutil.copyfile(src, dest)
            self.downloads.append(name)
        return str(snap)

    # datasets.load_dataset: a list of rows with the Arrow file datasets would have written
    def load_dataset(self, path, name=None, split=None, revision=None, **kw):
        self.loads.append({"path": path, "name": name, "split": split, "revision": revision})
        e = self.datasets[path]
        if revision not in e["refs"].values():
            raise FileNotFoundError(f"{path}@{revision} is not cached")
        folder = (
            Path(hub.cache_dirs()["datasets"]) / path.replace("/", "___") / (name or "default") / "0.0.0" / revision
        )
        folder.mkdir(parents=True, exist_ok=True)
        arrow = folder / f"nli-{split}.arrow"
        if not arrow.exists():
            arrow.write_bytes(b"ARROW" * 100)

        class Rows(list):
            cache_files = [{"filename": str(arrow)}]

        return Rows(e["rows"])


@pytest.fixture(autouse=True)
def _hub_environment_restored():
    """use_lock sets the lock and offline variables in this process: every test here leaves them
    as it found them (monkeypatch.delenv of an unset variable would not undo a later set)."""
    saved = {k: os.environ.get(k) for k in (hub.LOCK_ENV, *hub.OFFLINE_ENV)}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def fake_hub(monkeypatch, tmp_path, tiny_models):
    import datasets
    import huggingface_hub

    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for k in (hub.LOCK_ENV, *hub.OFFLINE_ENV):  # unset for the test; _hub_environment_restored puts them back
        monkeypatch.delenv(k, raising=False)
    fake = FakeHub()
    remote = {p.name: p for p in sorted(tiny_models["opt"].iterdir()) if p.is_file()}
    # what a job must not download: pickle weights, another format, a subfolder, code
    junk = {
        "pytorch_model.bin": b"pickle",
        "model.onnx": b"onnx",
        "onnx/decoder.onnx": b"onnx",
        "modeling_custom.py": b"import os",
    }
    fake.add_model(REPO_ID, {"main": sha("main"), "v1": sha("v1"), "refs/pr/7": sha("pr7")}, {**remote, **junk})
    fake.add_model(
        "fake-org/pickle-only",
        {"main": sha("pickle")},
        {**{n: p for n, p in remote.items() if not n.endswith(".safetensors")}, "pytorch_model.bin": b"pickle"},
    )
    rows = [{"s1": f"premise {i}", "s2": f"hypothesis {i}", "gold": i % 2} for i in range(20)]
    fake.add_dataset(DATA_ID, {"main": sha("data-main"), "refs/convert/parquet": sha("parquet")}, rows)
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: fake)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    hub._job_lock.cache_clear()
    return fake


def hub_config(path: Path, revision="v1", data_revision="refs/convert/parquet", with_dataset=True) -> Path:
    """config/micro.yaml with its model from the fake hub (and a hub testset); written to ``path``."""
    cfg = micro_config()
    cfg["experiment"] = "hubrun"
    cfg["models"] = [{"name": "hubby", "hub": REPO_ID, "revision": revision}]
    if with_dataset:
        cfg["datasets"]["hub-nli"] = {
            "source": "hub",
            "fields": {"premise": "s1", "hypothesis": "s2", "label": "gold"},
            "label_map": {"1": "entailment", "0": "non-entailment"},
            "hub": {"id": DATA_ID, "config": None, "split": "test", "revision": data_revision},
        }
        cfg["ood_testsets"] = ["synth-overlap", "hub-nli"]
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def cfg(fake_hub, tmp_path):
    """The hub config, prefetched."""
    cfg = hub_config(tmp_path / "exp.yaml")
    assert main(["prefetch", "--configfile", str(cfg)]) == 0
    return cfg


def plan_of(cfg_path):
    config = read_config(cfg_path)
    return config, load(config, REPO, [cfg_path])


def test_prefetch_writes_a_lock_with_commits_and_only_safe_files(fake_hub, tmp_path, cfg):
    lock = yaml.safe_load((tmp_path / "exp.lock.yaml").read_text())  # beside the config, named after it
    m = lock["models"]["hubby"]
    assert m["hub"] == REPO_ID and m["revision"] == "v1" and m["commit"] == sha("v1")
    assert re.fullmatch(r"[0-9a-f]{40}", m["commit"])
    snap = Path(lock["cache"]["hub"]) / "models--fake-org--tiny-opt" / "snapshots" / sha("v1")
    # config, tokenizer and safetensors weights; no pickle, other formats, subfolders or code
    assert set(m["files"]) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert sorted(fake_hub.downloads) == sorted(m["files"])
    assert {f: (snap / f).stat().st_size for f in m["files"]} == m["files"]
    assert m["bytes"] == sum(m["files"].values())
    # the parameter count read from the safetensors header equals the model's own count
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(snap)
    assert m["parameters"] == sum(p.numel() for p in model.parameters())
    h = TINY_CONFIGS["opt"]["hidden_size"]
    assert m["linear"]["q_proj"] == [[h, h, TINY_CONFIGS["opt"]["num_hidden_layers"]]]
    # the dataset: the branch resolved to its commit, loaded at that commit, its Arrow file recorded
    d = lock["datasets"]["hub-nli"]
    assert d["hub"]["revision"] == "refs/convert/parquet" and d["commit"] == sha("parquet")
    assert fake_hub.loads == [{"path": DATA_ID, "name": None, "split": "test", "revision": sha("parquet")}]
    ((arrow, size),) = d["files"].items()
    assert arrow.endswith(f"{sha('parquet')}/nli-test.arrow") and size == 500 and d["rows"] == 20


def test_pickle_weights_only_with_the_opt_in_and_counted_without_unpickling(fake_hub, tmp_path):
    cfg = hub_config(tmp_path / "p.yaml", revision="main")
    text = cfg.read_text().replace(REPO_ID, "fake-org/pickle-only")
    cfg.write_text(text)
    _, plan = plan_of(cfg)
    with pytest.raises(
        ConfigError,
        match=r"models\[hubby\]: fake-org/pickle-only has no safetensors.*"
        r"allow_pickle_weights: true",
    ):
        hub.prefetch(plan, cfg, tmp_path / "p.lock.yaml", say=lambda s: None)
    assert not (tmp_path / "p.lock.yaml").exists()  # nothing half-written
    cfg.write_text(text.replace("name: hubby", "name: hubby\n  allow_pickle_weights: true"))
    _, plan = plan_of(cfg)
    lock = hub.prefetch(plan, cfg, tmp_path / "p.lock.yaml", say=lambda s: None)
    m = lock["models"]["hubby"]
    assert "pytorch_model.bin" in m["files"] and not any(f.endswith(".safetensors") for f in m["files"])
    # counted on the meta device from config.json alone: the same count as the safetensors header gives
    params, _ = weight_shapes(fake_hub.models[REPO_ID]["commits"][sha("v1")]["model.safetensors"].parent)
    assert m["parameters"] == params


def _activate(cfg):
    config, plan = plan_of(cfg)
    return hub.use_lock(config, cfg, plan)


def test_planning_refuses_a_revision_that_differs_from_the_lock(fake_hub, tmp_path, cfg):
    lock, warnings = _activate(cfg)
    assert lock.models["hubby"]["commit"] == sha("v1")
    assert os.environ[hub.LOCK_ENV] == str((tmp_path / "exp.lock.yaml").resolve())
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
    assert not any("hub revision 'v1' is not a commit" in w for w in warnings)  # the lock pins it
    hub_config(tmp_path / "exp.yaml", revision="refs/pr/7")
    with pytest.raises(hub.LockMismatch) as e:
        _activate(cfg)
    msg = str(e.value)
    assert "models[hubby]: revision 'refs/pr/7' in the config, 'v1' in the lock file" in msg
    assert sha("v1") in msg and f"oodcorr prefetch --configfile {cfg}" in msg
    hub_config(tmp_path / "exp.yaml", data_revision="main")
    with pytest.raises(
        hub.LockMismatch,
        match=r"datasets\.hub-nli: revision 'main' in the config, "
        r"'refs/convert/parquet' in the lock file",
    ):
        _activate(cfg)


def test_planning_stops_when_this_machines_cache_lacks_the_locked_files(fake_hub, tmp_path, monkeypatch, cfg):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "another-node"))
    with pytest.raises(ConfigError) as e:
        _activate(cfg)
    msg = str(e.value)
    assert "models[hubby]: 5 file(s) of fake-org/tiny-opt@" in msg and "datasets.hub-nli: 1 Arrow file(s)" in msg
    assert str(tmp_path / "hf" / "hub") in msg and str(tmp_path / "another-node" / "hub") in msg
    assert "Set HF_HOME" in msg


def test_planning_stops_when_a_prefetched_shard_was_cut_short(fake_hub, tmp_path, cfg):
    """A prefetched model whose weights file lost its end (an interrupted copy, a full disk): its
    size is not the one prefetch recorded, so planning names it before any job loads it."""
    weights = next((tmp_path / "hf" / "hub").rglob("snapshots/*/model.safetensors"))
    raw = weights.read_bytes()
    target = weights.resolve()  # the hub cache links snapshots to blobs
    target.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ConfigError) as e:
        _activate(cfg)
    msg = str(e.value)
    assert "models[hubby]" in msg and "model.safetensors" in msg and "another size than prefetch recorded" in msg


def test_jobs_load_the_locked_commit_and_refuse_another(fake_hub, tmp_path, monkeypatch, cfg):
    spec = ModelEntry(name="hubby", hub=REPO_ID, revision="v1")
    assert model_source(spec) == (REPO_ID, {"revision": "v1"})  # no lock: the entry's revision
    monkeypatch.setenv(hub.LOCK_ENV, str(tmp_path / "exp.lock.yaml"))
    assert model_source(spec) == (REPO_ID, {"revision": sha("v1")})
    with pytest.raises(hub.LockMismatch) as e:
        model_source(replace(spec, revision="main"))
    assert "models[hubby]: revision 'main' in the config, 'v1' in the lock file" in str(e.value)
    assert "refusing to load another revision" in str(e.value) and "oodcorr prefetch --configfile" in str(e.value)
    with pytest.raises(hub.LockMismatch, match=r"models\[other\]: not in the lock file"):
        model_source(replace(spec, name="other"))

    _, plan = plan_of(cfg)
    entry = plan.exp.dataset_params("hub-nli")
    fake_hub.loads.clear()
    recs, prov = prepare("hub-nli", entry, BINARY)
    assert fake_hub.loads[-1]["revision"] == sha("parquet") and len(recs) == 20
    assert prov["commit"] == sha("parquet") and prov["fingerprint"].startswith(f"hub:{DATA_ID}@{sha('parquet')}")
    other = dict(entry, hub=dict(entry["hub"], revision="main"))
    with pytest.raises(hub.LockMismatch, match="refusing to load another revision"):
        prepare("hub-nli", other, BINARY)
    # offline, datasets reads the newest cached copy whatever the revision: a copy of another commit is refused
    rows = SimpleNamespace(cache_files=[{"filename": f"/c/fake-org___nli/default/0.0.0/{sha('data-main')}/x.arrow"}])
    with pytest.raises(hub.LockMismatch, match="is not the locked commit"):
        hub.check_loaded_dataset(rows, sha("parquet"), "hub fake-org/nli")


def test_no_lock_changes_nothing_but_says_what_to_run(fake_hub, tmp_path):
    cfg = hub_config(tmp_path / "exp.yaml")
    lock, warnings = _activate(cfg)
    assert lock is None and hub.LOCK_ENV not in os.environ and "HF_HUB_OFFLINE" not in os.environ
    assert any(f"no hub lock file ({tmp_path / 'exp.lock.yaml'})" in w and "oodcorr prefetch" in w for w in warnings)


def test_cache_under_tmp_is_named(monkeypatch):
    monkeypatch.setenv("HF_HOME", "/tmp/somewhere/hf")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    w = hub.cache_warnings()
    assert len(w) == 2 and all("node-local temporary folder" in x and "HF_HOME" in x for x in w)
    monkeypatch.setenv("HF_HOME", "/shared/fs/hf")
    assert hub.cache_warnings() == []
    monkeypatch.delenv("HF_HOME")
    assert "HF_HOME is not set" in hub.cache_warnings()[0]


@pytest.mark.slow
def test_workflow_runs_offline_on_the_locked_commit_and_refuses_a_mismatch(fake_hub, tmp_path):
    """A hub model through the real workflow: prefetched, then every job offline at the locked
    commit; after a revision edit, planning stops before any job runs."""
    wd = tmp_path / "wd"
    wd.mkdir()
    cfg = hub_config(wd / "exp.yaml", with_dataset=False)
    c = yaml.safe_load(cfg.read_text())
    c["ood_testsets"] = ["synth-overlap", "synth-negation"]  # two: the fewest the analysis pairs
    c["finetune"].update(max_steps=8, checkpoints={"every": 2})  # 5 checkpoints: enough to analyse
    c["evaluation"]["unit"] = "run"  # 3 evaluation processes, not 15: the hub is what is tested here
    cfg.write_text(yaml.safe_dump(c))
    assert main(["prefetch", "--configfile", str(cfg)]) == 0
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
    # the scores only (staged: the published scores.csv is a link that publishing makes after the analysis)
    res = smk(wd, cfg, "results/hubrun/.staging/scores.csv", env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    ident = yaml.safe_load((wd / "results/hubrun/finetune/hubby/synth/n64/seed0/run_identity.json").read_text())
    assert ident["identity"]["base_weights"] == f"hub:{REPO_ID}@{sha('v1')}"  # the locked commit, not 'v1'
    log = (wd / "results/hubrun/logs/finetune/hubby/synth/n64/seed0.log").read_text()
    assert "Traceback" not in log
    import pandas as pd

    scores = pd.read_csv(wd / "results/hubrun/.staging/scores.csv")
    assert len(scores) == 5 * 3 and set(scores["testset"]) == {"synth-test", "synth-overlap", "synth-negation"}

    c["models"][0]["revision"] = "main"
    cfg.write_text(yaml.safe_dump(c))
    dry = smk(wd, cfg, "-n", env=env)
    assert dry.returncode != 0
    out = dry.stdout + dry.stderr
    assert "models[hubby]: revision 'main' in the config, 'v1' in the lock file" in out
    assert f"oodcorr prefetch --configfile {cfg}" in out and "rule finetune" not in out


def test_budget_takes_sizes_and_downloads_from_the_lock(fake_hub, tmp_path, capsys, cfg):
    lock = yaml.safe_load((tmp_path / "exp.lock.yaml").read_text())
    params = lock["models"]["hubby"]["parameters"]
    assert main(["budget", "--configfile", str(cfg), "--out", str(tmp_path / "b")]) == 0
    b = json.loads((tmp_path / "b.json").read_text())
    # one run, checkpoints at steps 0, 4, 8, 12, 16: five full float32 copies of the weights
    assert b["checkpoint_bytes"] == 5 * params * 4
    assert b["optimizer_state_bytes"] == 2 * params * 4
    assert b["download_bytes"] == lock["models"]["hubby"]["bytes"] + 500  # the weights and the Arrow file
    # with LoRA on q_proj and v_proj (r=4; one layer, 32 x 32 each): 4 x (32 + 32) x 2 = 512 fp32 parameters
    c = yaml.safe_load(cfg.read_text())
    c["finetune"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    cfg.write_text(yaml.safe_dump(c))
    assert main(["budget", "--configfile", str(cfg), "--out", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["checkpoint_bytes"] == 5 * 512 * 4
    assert "hubby: 5 checkpoints x 2.0 KiB (LoRA adapter: 512 parameters x 4 bytes)" in capsys.readouterr().out
