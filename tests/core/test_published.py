"""Publishing results as one set (issue 25): switched by one rename, so a kill at any point leaves
the old set or the new one; staged files checked against their seals before they are published;
what is published checked against its record; one writer per experiment folder, shared by every
checkout that points at it; the config that wrote an experiment remembered.

Unit level (no Snakemake): the end-to-end counterparts, through the real workflow, are in
tests/workflow/test_workflow.py (an edited published table, a staged table cut short, a kill while
publishing, two runs writing one experiment).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from oodcorr.core import published
from oodcorr.core.published import MARKER, PublishRefused, inspect, publish_set, write_marker
from oodcorr.core.seals import seal

RELS = ["scores.parquet", "scores.csv", "accuracy.csv", "analysis/partial_correlations.csv", "analysis/heatmaps/m.png"]
PNG = b"\x89PNG\r\n\x1a\n" + b"x" * 40 + b"IEND\xaeB`\x82"


def _set(tag: str) -> dict[str, bytes]:
    """A whole set of results, each file's bytes marked with ``tag``."""
    import io

    import pandas as pd

    table = pd.DataFrame({"model": ["m", "m"], "step": [0, 8], "accuracy": ["0.3", tag]})
    parquet = io.BytesIO()
    table.to_parquet(parquet, index=False)
    return {
        "scores.parquet": parquet.getvalue(),
        "scores.csv": table.to_csv(index=False).encode(),
        "accuracy.csv": f"step,t\n0,{tag}\n".encode(),
        "analysis/partial_correlations.csv": f"x,y,r\na,b,{tag}\n".encode(),
        "analysis/heatmaps/m.png": PNG.replace(b"x" * len(tag), tag.encode(), 1),
    }


def _stage(root: Path, files: dict[str, bytes], sealed: bool = True) -> Path:
    staging = root / ".staging"
    for rel, data in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    if sealed:
        seal([staging / rel for rel in files])
    return staging


def _publish(root: Path, files: dict[str, bytes], **kw) -> dict:
    """What rule publish_results does: Snakemake deletes its output (the record), then the set is
    published and the record written."""
    (root / MARKER).unlink(missing_ok=True)
    staging = _stage(root, files, **kw)
    record = publish_set(root, {rel: staging / rel for rel in files}, experiment="x")
    write_marker(root, record)
    return record


def _seen(root: Path, rels=RELS) -> dict[str, bytes | None]:
    """What a reader sees at each published path (None: nothing there)."""
    return {rel: (root / rel).read_bytes() if (root / rel).is_file() else None for rel in rels}


def test_a_publish_switches_the_whole_set_by_one_rename(tmp_path):
    root = tmp_path / "results/x"
    first = _publish(root, _set("one"))
    assert _seen(root) == _set("one") and first["version"] == "v1"
    assert os.readlink(root / "scores.csv") == ".published/current/scores.csv"  # relative: a copied folder works
    assert os.readlink(root / "analysis") == ".published/current/analysis"
    assert inspect(root, RELS).whole
    second = _publish(root, _set("two"))
    assert _seen(root) == _set("two") and os.readlink(root / ".published/current") == second["version"] == "v2"
    assert (root / ".published/v1").is_dir()  # the previous set stays until the next publish, for readers
    assert (
        json.loads((root / MARKER).read_text())["files"]["scores.csv"]["sha256"]
        == second["files"]["scores.csv"]["sha256"]
    )
    _publish(root, _set("three"))
    assert sorted(p.name for p in (root / ".published").iterdir() if not p.name.endswith(".lock")) == [
        "current",
        "v2",
        "v3",
    ]
    # a figure the config no longer asks for is not carried over (a model dropped from the config)
    fewer = {k: v for k, v in _set("four").items() if not k.endswith(".png")}
    _publish(root, fewer)
    assert not (root / "analysis/heatmaps/m.png").exists()


# A child process publishes ``new`` over ``old`` and SIGKILLs itself right after the N-th call of a
# step that changes the disk (copying a file, renaming, switching a link); N=-1 counts them instead.
KILLER = """
import os, pickle, signal, sys
from pathlib import Path
import oodcorr.core.published as p
from test_published import _publish
root, n = Path(sys.argv[1]), int(sys.argv[3])
new = pickle.loads(Path(sys.argv[2]).read_bytes())
calls = [0]
def counted(f):
    def g(*a, **k):
        out = f(*a, **k)
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return g
p._copy_hashing = counted(p._copy_hashing)
from types import SimpleNamespace
p.os = SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
for name in ("rename", "replace", "symlink"):
    setattr(p.os, name, counted(getattr(os, name)))
_publish(root, new)
print(calls[0])
"""


def _run_killer(root: Path, new: str, n: int) -> subprocess.CompletedProcess:
    import pickle

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    files = root.parent.parent / f"{new}.pickle"  # the set's bytes (made once: the child need not import pandas)
    if not files.exists():
        files.write_bytes(pickle.dumps(_set(new)))
    return subprocess.run(
        [sys.executable, "-c", KILLER, str(root), str(files), str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_kill_at_any_point_of_a_publish_leaves_the_old_set_or_the_new_one(tmp_path):
    """SIGKILL after every single step of a publish, one kill per attempt: a reader always sees the
    old set or the new one, whole, never a mix and never a gap; planning then reports the set as
    incomplete, and the next publish puts the new set in place. (Before: the published files were
    the rule's outputs, which Snakemake deletes before the job, then copied one by one.)"""
    template = tmp_path / "template/results/x"
    _publish(template, _set("old"))
    counted = tmp_path / "count/results/x"
    counted.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(template), str(counted.parent)], check=True)
    res = _run_killer(counted, "new", -1)
    assert res.returncode == 0, res.stderr[-3000:]
    total = int(res.stdout.split()[-1])
    assert total >= 8  # every copy, rename and link counts
    assert _seen(counted) == _set("new")
    for n in range(1, total + 1):
        root = tmp_path / f"kill{n}/results/x"
        root.parent.mkdir(parents=True)
        subprocess.run(["cp", "-a", str(template), str(root.parent)], check=True)
        res = _run_killer(root, "new", n)
        assert res.returncode == -signal.SIGKILL, (n, res.stderr[-2000:])
        assert _seen(root) in (_set("old"), _set("new")), n
        assert not inspect(root, RELS).whole, n  # planning names it: incomplete
        # the next publish (the rerun) puts the new set in place, whole, and clears what the kill left
        _publish(root, _set("new"))
        assert _seen(root) == _set("new"), n
        after = inspect(root, RELS)
        assert after.whole and not after.leftovers, (n, after)


def test_a_staged_file_changed_after_its_job_is_not_published(tmp_path):
    """A staged CSV cut short before publishing: refused, naming it and what to do; the published set,
    its record and the version folders stay as they were. (Before: published beside a whole parquet.)"""
    root = tmp_path / "results/x"
    _publish(root, _set("old"))
    before = sorted(str(p) for p in (root / ".published").rglob("*"))
    staging = _stage(root, _set("new"))
    csv = staging / "scores.csv"
    csv.write_bytes(csv.read_bytes()[:20])
    with pytest.raises(PublishRefused) as e:
        publish_set(root, {rel: staging / rel for rel in RELS}, experiment="x")
    msg = str(e.value)
    assert f"{csv} changed after the job that made it wrote it" in msg
    assert f"Delete {csv} and run again" in msg and "the published set is as it was" in msg
    assert _seen(root) == _set("old") and sorted(str(p) for p in (root / ".published").rglob("*")) == before
    # an edit that keeps the size is refused as well (the sha256 decides)
    _stage(root, _set("new"))
    csv.write_bytes(csv.read_bytes().replace(b"0.3", b"0.9"))
    with pytest.raises(PublishRefused, match="changed after the job that made it"):
        publish_set(root, {rel: staging / rel for rel in RELS}, experiment="x")


def test_a_staged_file_without_a_seal_is_not_published(tmp_path):
    """Every job that stages a file seals it last, so a staged file without a seal was put there by hand
    or by an earlier version: refused, naming it, its seal and what to do; the published set, its
    record and the version folders stay as they were. (Before: published after a check of its
    structure alone, and listed in the record as "unsealed".)"""
    root = tmp_path / "results/x"
    _publish(root, _set("old"))
    before = sorted(str(p) for p in (root / ".published").rglob("*"))
    staging = _stage(root, _set("new"))
    csv = staging / "scores.csv"
    (staging / ".scores.csv.sha256").unlink()
    with pytest.raises(PublishRefused) as e:
        publish_set(root, {rel: staging / rel for rel in RELS}, experiment="x")
    msg = str(e.value)
    assert f"{csv} has no seal ({staging / '.scores.csv.sha256'})" in msg and "the published set is as it was" in msg
    assert f"Delete {csv} and run again" in msg
    assert _seen(root) == _set("old") and sorted(str(p) for p in (root / ".published").rglob("*")) == before
    assert "unsealed" not in json.loads((root / MARKER).read_text())


def test_what_is_published_is_checked_against_its_record(tmp_path):
    """Edited through its link, cut short, replaced by another file, deleted, a file added: each is
    named; the next publish keeps the changed set aside (named) and puts the staged one in place."""
    root = tmp_path / "results/x"
    _publish(root, _set("one"))
    _publish(root, _set("two"))
    assert inspect(root, RELS).whole
    (root / "scores.csv").write_text("model,step,accuracy\nm,0,0.99\n")  # edited by hand, through the link
    state = inspect(root, RELS)
    assert not state.whole and len(state.damaged) == 1
    assert state.damaged[0].startswith(f"{root / 'scores.csv'} differs from what was published")
    (root / "accuracy.csv").unlink()  # deletes the link
    (root / "analysis/heatmaps/m.png").unlink()
    (root / "analysis/mine.csv").write_text("a\n1\n")
    state = inspect(root, RELS)
    assert any(f"{root / 'accuracy.csv'} is missing" in d for d in state.damaged)
    assert any(f"{root / 'analysis/heatmaps/m.png'} is missing" in d for d in state.damaged)
    assert any("analysis/mine.csv was never published" in d for d in state.damaged)
    record = _publish(root, _set("three"))
    assert _seen(root) == _set("three") and inspect(root, RELS).whole
    kept = [n for n in record["notes"] if "kept-" in n]
    assert len(kept) == 1 and "differ from what was published" in kept[0]
    kept_dir = next((root / ".published").glob("kept-*-v2"))
    assert (kept_dir / "analysis/mine.csv").read_text() == "a\n1\n"  # nothing of theirs is lost
    (root / MARKER).unlink()
    assert inspect(root, RELS).incomplete == [
        f"{root / MARKER} is missing: the last publish did not finish (killed?) or the file was deleted"
    ]


def test_a_publish_record_of_another_format_is_refused_and_the_set_published_again(tmp_path):
    """A record this version did not write (another format, or none, as before formats) is not read
    as one: refused naming the file and the command that publishes again; inspect says so, as for a
    damaged set (so the next run publishes it again), and the next publish keeps the old set aside."""
    from oodcorr.core.errors import ResultError
    from oodcorr.core.published import PUBLISH_RECORD, RECORD_FORMAT, REPUBLISH, read_publish_record

    root = tmp_path / "results/x"
    record = _publish(root, _set("one"))
    path = root / ".published" / record["version"] / PUBLISH_RECORD
    assert read_publish_record(path)["format"] == RECORD_FORMAT
    for other in (RECORD_FORMAT + 1, None):
        doc = json.loads(path.read_text())
        doc["format"] = other
        path.write_text(json.dumps(doc))
        with pytest.raises(ResultError) as e:
            read_publish_record(path)
        assert str(e.value).startswith(f"{path}: a publish record of format {other!r}, not {RECORD_FORMAT}")
        assert f"`{REPUBLISH}` publishes the set again" in str(e.value)
        state = inspect(root, RELS)
        assert not state.whole and state.damaged == [str(e.value)]
    record = _publish(root, _set("two"))
    assert _seen(root) == _set("two") and inspect(root, RELS).whole
    assert any("kept-" in n and "a publish record of format None" in n for n in record["notes"])


def test_a_link_replaced_by_a_file_is_named_and_the_file_kept(tmp_path):
    root = tmp_path / "results/x"
    _publish(root, _set("one"))
    (root / "scores.csv").unlink()
    (root / "scores.csv").write_text("someone's own table\n")  # `mv mine.csv results/x/scores.csv`
    assert inspect(root, RELS).damaged == [
        f"{root / 'scores.csv'} was replaced (it is a link into {root}/.published/current)"
    ]
    record = _publish(root, _set("two"))
    assert _seen(root) == _set("two")
    kept = [n for n in record["notes"] if "is kept as" in n]
    assert len(kept) == 1 and Path(kept[0].rsplit(" ", 1)[1]).read_text() == "someone's own table\n"


def test_files_where_the_links_go_are_kept_aside_and_named_not_adopted(tmp_path):
    """An experiment folder with real files where the published set's links go and no .published/ (put
    there by hand, or by a version before publish records): nothing is published there yet, and the
    first publish moves each aside into .published/kept-*, names it, and publishes the staged set.
    (Before: taken over as a version v0 of the published set.)"""
    root = tmp_path / "results/x"
    for rel, data in _set("mine").items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "analysis/notes.txt").write_text("my own notes")
    assert inspect(root, RELS).layout == "none"
    record = _publish(root, _set("new"))
    assert _seen(root) == _set("new") and inspect(root, RELS).whole
    assert not (root / ".published/v0").exists() and record["version"] == "v1"
    kept = {n.split(" was not the link", 1)[0]: Path(n.rsplit(" ", 1)[1]) for n in record["notes"] if "is kept as" in n}
    assert sorted(kept) == sorted(str(root / n) for n in ("scores.parquet", "scores.csv", "accuracy.csv", "analysis"))
    assert (kept[str(root / "analysis")] / "notes.txt").read_text() == "my own notes"
    assert kept[str(root / "scores.csv")].read_bytes() == _set("mine")["scores.csv"]


# ---- the experiment's writer: its lock, its config, the published set at the start of a run ----------
def _plan(root: Path, experiment: str = "x") -> SimpleNamespace:
    """What oodcorr.launch.experiment reads of a plan."""
    return SimpleNamespace(
        experiment=experiment,
        paths=SimpleNamespace(root=str(root), staging=str(root / ".staging"), provenance=str(root / "provenance.json")),
        published_rels=lambda: list(RELS),
        runs=(),
    )


CLAIMER = """
import sys, time
from pathlib import Path
from types import SimpleNamespace
from oodcorr.launch.experiment import lock_and_record
root = Path(sys.argv[1])
plan = SimpleNamespace(
    experiment="x", paths=SimpleNamespace(root=str(root), provenance=str(root / "provenance.json")), runs=()
)
assert lock_and_record(plan, [sys.argv[2]], {"experiment": "x"}) is None
print("held", flush=True)
time.sleep(120)
"""


def test_two_checkouts_whose_results_is_one_folder_share_the_experiments_lock(tmp_path, monkeypatch):
    """Each checkout has its own .snakemake/ (Snakemake's lock), but results/ is one shared folder:
    the second writer is refused at once, naming the first (PID, host, config); once the first is
    gone (SIGKILL: the kernel drops the lock) the second may write, and the record names its config.
    Under another config, the second checkout is refused until it reruns everything: its .snakemake/
    holds no record of the settings of what the first wrote (issue 41)."""
    import socket

    from oodcorr.launch.experiment import config_warning, lock_and_record

    shared = tmp_path / "shared-results"
    shared.mkdir()
    one, two = tmp_path / "checkout-one", tmp_path / "checkout-two"
    for wd in (one, two):
        wd.mkdir()
        (wd / "results").symlink_to(shared)
        (wd / "my.yaml").write_text("experiment: x\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, "results/x", str(one / "my.yaml")], stdout=subprocess.PIPE, text=True, cwd=one
    )
    monkeypatch.chdir(two)
    monkeypatch.setattr(sys, "argv", ["snakemake", "--cores", "2"])
    root = Path("results/x")
    try:
        assert holder.stdout.readline().strip() == "held"
        refusal = lock_and_record(_plan(root), [two / "my.yaml"], {"experiment": "x", "other": 1})
        assert refusal is not None
        assert refusal.startswith(f"experiment folder {root} is in use by another run of the workflow")
        assert f"PID {holder.pid} on host {socket.gethostname()}" in refusal
        assert f"config {(one / 'my.yaml').resolve()}" in refusal and f"kill {holder.pid}" in refusal
        # and its config is remembered: the other checkout's config gets a sentence naming it
        warning = config_warning(_plan(root), [two / "my.yaml"], {"experiment": "x", "other": 1})
        assert f"was last written by config {(one / 'my.yaml').resolve()}" in warning
        assert "Snakemake keeps no record here of the settings its results were made with" in warning
        assert f"run from {one.resolve()}" in warning and "`--forceall`" in warning
        assert "give this config its own `experiment:` name" in warning
    finally:
        holder.kill()
        holder.wait()
    assert (
        lock_and_record(_plan(root), [two / "my.yaml"], {"experiment": "x", "other": 1}) == warning
    )  # not until forced
    monkeypatch.setattr(sys, "argv", ["snakemake", "--cores", "2", "--forceall"])
    assert config_warning(_plan(root), [two / "my.yaml"], {"experiment": "x", "other": 1}) is not None
    assert lock_and_record(_plan(root), [two / "my.yaml"], {"experiment": "x", "other": 1}) is None
    record = json.loads((shared / "x/experiment.json").read_text())
    assert record["configs"] == [str((two / "my.yaml").resolve())] and record["records"] == "complete"
    _release(shared / "x")


def _release(root: Path) -> None:
    """Let go of the experiment lock :func:`lock_and_record` keeps for the rest of the process (a run's whole life)."""
    from oodcorr.core import locks

    locks.release(locks._HELD[str((root / locks.EXPERIMENT.file).resolve())])


def test_the_config_warning_is_for_another_config_only(tmp_path, monkeypatch):
    from oodcorr.launch.experiment import config_warning, lock_and_record, warnings_given

    monkeypatch.chdir(tmp_path)

    root = tmp_path / "results/x"
    a, b, copy = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "copy-of-a.yaml"
    plan = _plan(root)
    assert config_warning(plan, [a], {"n": 1}) is None  # nothing wrote the folder yet
    assert lock_and_record(plan, [a], {"n": 1}) is None
    assert config_warning(plan, [a], {"n": 2}) is None  # the same file, edited: that experiment carried on
    assert config_warning(plan, [copy], {"n": 1}) is None  # a copy of the same config elsewhere
    assert "was last written by config" in config_warning(plan, [b], {"n": 3})
    assert (
        warnings_given(plan) and "was last written by config" in warnings_given(plan)[0]
    )  # repeated at the end of the run
    _release(root)


def test_a_damaged_set_loses_its_record_at_the_start_of_a_run_so_the_run_publishes_it(tmp_path):
    from oodcorr.core.locks import EXPERIMENT, hold
    from oodcorr.launch.published_check import check_published

    root = tmp_path / "results/x"
    _publish(root, _set("one"))
    assert check_published(_plan(root), change=True) == []
    (root / "analysis/partial_correlations.csv").write_text("x,y,r\na,b,0.99\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oodcorr.core.locks import EXPERIMENT, hold\n"
            "with hold(sys.argv[1], EXPERIMENT):\n    print('held', flush=True)\n    time.sleep(120)\n",
            str(root),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        said = check_published(_plan(root), change=True)
        assert (root / MARKER).exists()  # another process writes the experiment: nothing changed
        assert "nothing is changed while another process writes the experiment" in said[-1]
    finally:
        holder.kill()
        holder.wait()
    # a run that only looks (a dry run) is told, takes no lock and deletes nothing: the publish is shown instead
    lock_file = root / EXPERIMENT.file
    seen = (lock_file.exists() and lock_file.stat().st_mtime_ns, (root / MARKER).read_bytes())
    said = check_published(_plan(root), change=False)
    assert "are not what was published" in said[0] and said[1].startswith("this command only looks")
    assert (lock_file.exists() and lock_file.stat().st_mtime_ns, (root / MARKER).read_bytes()) == seen
    said = check_published(_plan(root), change=True)
    assert not (root / MARKER).exists()  # Snakemake now runs publish_results again
    assert len(said) == 1 and "the published results of experiment 'x' are not what was published" in said[0]
    assert f"{root / 'analysis/partial_correlations.csv'} differs from what was published" in said[0]
    assert f"This run publishes the set again from {root / '.staging'}" in said[0]
    with hold(root, EXPERIMENT):  # (the short hold above was released)
        pass
    _publish(root, _set("one"))
    assert check_published(_plan(root), change=True) == [] and _seen(root) == _set("one")


def test_publishing_holds_its_own_lock(tmp_path):
    from oodcorr.core.locks import PUBLISH, FolderInUse, hold

    root = tmp_path / "results/x"
    _publish(root, _set("one"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oodcorr.core.locks import PUBLISH, hold\n"
            "with hold(sys.argv[1], PUBLISH):\n    print('held', flush=True)\n    time.sleep(120)\n",
            str(root / published.PUBLISHED),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=rf"published folder .* is in use by another publish.*PID {holder.pid}"):
            _publish(root, _set("two"))
    finally:
        holder.kill()
        holder.wait()
    assert _seen(root) == _set("one")
    with hold(root / published.PUBLISHED, PUBLISH):
        pass


def test_the_report_refuses_staged_results_that_are_not_what_was_published(tmp_path):
    """`snakemake --report` shows the staged files: after a run that staged new tables but did not
    publish them (a failed analysis, a kill), or with a published file edited, it would disagree with
    the published tables. Refused, saying what differs and what to run. (Before: it showed them.)"""
    from oodcorr.core.errors import ConfigError
    from oodcorr.launch.published_check import check_report_inputs

    root = tmp_path / "results/x"
    plan = _plan(root)
    plan.targets = lambda: [str(root / rel) for rel in RELS]
    plan.paths.staged = lambda path: str(root / ".staging" / Path(path).relative_to(root))
    _publish(root, _set("one"))
    check_report_inputs(plan, "my.yaml", ["snakemake", "--report", "r.html"])  # staged == published: fine
    _stage(root, _set("two"))  # staged by a run whose publish never came
    with pytest.raises(ConfigError) as e:
        check_report_inputs(plan, "my.yaml", ["snakemake", "--report", "r.html"])
    msg = str(e.value)
    assert msg.startswith("--report: the report shows the staged results, and ") and "differs from the published" in msg
    assert "Run `snakemake --configfile my.yaml` first" in msg
    _stage(root, _set("one"))
    (root / "accuracy.csv").write_text("edited\n")
    with pytest.raises(ConfigError, match=r"--report: the published results of experiment 'x' are not whole"):
        check_report_inputs(plan, "my.yaml", ["snakemake", "--report", "r.html"])
