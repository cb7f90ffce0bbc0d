"""A predictions file under the faults of a cluster: a full disk (a real ENOSPC on a small tmpfs)
and a scoring job preempted while it writes (a real SIGTERM, then SIGKILL after the grace time).
No partial predictions file is ever left where the aggregation would read it; the requeued job
writes it whole."""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import asdict

import pytest

from oodcorr.core.errors import DiskFull
from oodcorr.core.records import read_result
from oodcorr.jobs.checkpoints import write_ckpt_manifest
from oodcorr.jobs.evaluate import EvalParams, evaluate_run
from oodcorr.modeling import synthetic

from faults import fill, preempt, small_filesystem, start_stopped, wait_for
from helpers import tokenised_testset

SPEC = {"name": "tiny", "tiny": {"model_type": "opt"}}


@pytest.fixture
def scoring(tmp_path, tiny_models):
    """(evaluate_run's arguments but the checkpoints, the checkpoint) for a tiny model on 40 examples."""
    tiny = str(tiny_models["opt"])
    records = synthetic.generate("negation", 40, 3)
    _, _, cache = tokenised_testset(tmp_path, tiny, SPEC, records, {"fingerprint": "f", "records_sha256": "r"})
    ck = tmp_path / "run" / "checkpoints" / "checkpoint-0"
    shutil.copytree(tiny, ck)
    write_ckpt_manifest(ck, 0, resumable=False)
    common = dict(
        job=EvalParams(SPEC, tiny, {"run_id": "r"}),
        tokenized=str(cache),
        batch_size=8,
        max_tokens=10**6,
    )
    return common, {"step": 0, "checkpoint": str(ck)}


def test_a_predictions_file_that_hits_a_full_disk_is_not_left_half_written(tmp_path, scoring):
    common, ck = scoring
    with small_filesystem(tmp_path / "scratch", "256k") as fs:
        out = fs / "eval" / "step0" / "neg.parquet"
        out.parent.mkdir(parents=True)
        fill(fs, leave=0)
        with pytest.raises(DiskFull) as e:
            evaluate_run(checkpoints=[dict(ck, predictions=str(out))], **common)
        assert str(out.parent) in str(e.value) and "delete" in str(e.value)
        assert not out.exists() and not list(out.parent.glob(".*.tmp"))


# A scoring job stopped while its predictions file is being written: pyarrow has written the
# temporary file, the rename onto its place has not happened. There it writes the file named and
# blocks until the signals come.
STOPPED = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import pyarrow.parquet as pq
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run
    common, ck, reached = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
    common["job"] = EvalParams(**common["job"])
    write = pq.write_table
    def write_then_stop(table, where, *a, **k):
        write(table, where, *a, **k)
        reached.write_text(str(where))
        while True:
            time.sleep(1)
    pq.write_table = write_then_stop
    evaluate_run(checkpoints=[ck], **common)
    """
)


@pytest.mark.slow
def test_a_preempted_scoring_job_leaves_no_predictions_file_and_the_requeued_one_writes_it_whole(tmp_path, scoring):
    common, ck = scoring
    out = tmp_path / "eval" / "neg.parquet"
    ck = dict(ck, predictions=str(out))
    reached = tmp_path / "reached"
    proc = start_stopped(STOPPED, json.dumps(dict(common, job=asdict(common["job"]))), json.dumps(ck), str(reached))
    wait_for(reached, proc, timeout=300)
    assert preempt(proc, grace=2.0) != 0
    assert not out.exists()  # only a temporary file beside it, which nothing reads
    assert reached.read_text() != str(out)
    result = evaluate_run(checkpoints=[ck], **common)  # the requeued job
    rec = read_result(out)
    assert rec["n"] == 40 and rec["accuracy"] == result["checkpoints"][0]["accuracy"]
