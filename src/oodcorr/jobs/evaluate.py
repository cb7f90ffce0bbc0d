"""Evaluating a run's checkpoints on a testset: which checkpoints, checked, scored, written."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.atomic_write import atomic_path, write_json_atomic
from ..core.digests import json_default, sha256_json
from ..core.model_entry import ModelEntry
from ..core.provenance import library_versions
from ..core.records import META_KEY, read_result
from ..modeling.adaptation import correct_mask
from ..modeling.loading import CheckpointLoader, tokenizer_fingerprint
from .checkpoints import read_ckpt_manifest, verify_checkpoint, weights_digest
from .scoring import device_batching, eval_dtype, score
from .series_checkpoint import read_manifest, verify
from .tokenize_testset import read_tokenized

log = logging.getLogger(__name__)


class EvaluationRefused(RuntimeError):
    """An evaluation that must not give a score; the message names the file and what to do."""


def _process_age() -> float | None:
    """Seconds since this process started, from /proc to the clock tick (psutil rounds to seconds); else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            return float(fh.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")  # uptime - start
    except (OSError, ValueError, IndexError):
        return None


def checkpoints_to_score(manifests: list[str], steps: list[int], outputs: list[str]) -> list[dict]:
    """``{"step", "checkpoint", "predictions"}`` per step, from a finetune's manifest (plus ``weights``,
    ``run_manifest``) or a series' checkpoint manifests (``series``; the step its file name gives)."""
    given, root, run_manifest = {}, None, None
    for m in manifests:
        doc = read_manifest(m)  # a damaged manifest: a ResultError naming it, with the way out
        if doc is None:
            root, run_manifest = Path(m).parent / "checkpoints", m
        else:
            place = Path(m).stem.removeprefix("step")
            given[int(place) if place.isdigit() else int(doc["step"])] = dict(doc, manifest=str(m))
    # each checkpoint's weights digest and libraries as the run's manifest records them (refused without)
    again = (
        "delete it and run again: the run's finetune writes it again (without training, when its checkpoints are whole)"
    )
    try:
        doc = json.loads(Path(run_manifest).read_text(encoding="utf-8")) if run_manifest else {}
        entries = [(int(e["step"]), e.get("weights"), e.get("libraries")) for e in doc.get("checkpoints") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise EvaluationRefused(f"{run_manifest}: unreadable run manifest ({type(e).__name__}); {again}") from None
    bare = [step for step, weights, _ in entries if not isinstance(weights, str)]
    if bare:
        raise EvaluationRefused(
            f"{run_manifest}: the run manifest records no weights digest for checkpoint(s) {bare} (made by hand, or "
            f"by an earlier version of oodcorr), so they cannot be checked before they are scored; {again}"
        )
    recorded = {step: {"weights": weights, "libraries": libraries} for step, weights, libraries in entries}
    out = []
    for step, pred in zip(steps, outputs, strict=True):
        if step in given:
            src = given[step]["source"]
            where = src.get("path") or f"{src['hub']}@{src['revision']}"
            out.append({"step": step, "checkpoint": where, "predictions": pred, "series": given[step]})
        elif root is not None:
            out.append(
                {
                    "step": step,
                    "checkpoint": str(root / f"checkpoint-{step}"),
                    "predictions": pred,
                    "weights": recorded.get(step, {}).get("weights"),
                    "run_manifest": run_manifest,
                    "finetune_libraries": recorded.get(step, {}).get("libraries"),
                }
            )
        else:
            raise EvaluationRefused(f"step {step}: no checkpoint in {manifests}; delete them and run again")
    return out


def check_checkpoint_place(ck: dict, provenance: dict | None = None) -> None:
    """Refuse a checkpoint that is not the one its place says, before it is scored."""
    step = int(ck["step"])
    series = ck.get("series")
    if series:
        model = (provenance or {}).get("model")
        manifest = series.get("manifest", "its manifest")
        if int(series.get("step", -1)) != step or (model and series.get("model") != model):
            raise EvaluationRefused(
                f"checkpoint not usable: {manifest} is the manifest of model {series.get('model')!r}, "
                f"{series.get('x_unit', 'step')} {series.get('step')}, but sits where that of model {model!r}, "
                f"{series.get('x_unit', 'step')} {step} belongs. Delete {manifest} and run "
                "again: it is written from the config"
            )
        return
    ckpt = Path(ck["checkpoint"])
    run_manifest = ck.get("run_manifest") or str(ckpt.parent.parent / "manifest.json")
    own = (read_ckpt_manifest(ckpt) or {}).get("step")
    if own is not None and own != step:
        raise EvaluationRefused(
            f"checkpoint not usable: {ckpt} holds the checkpoint of step {own} (its {ckpt.name}/oodcorr_manifest.json "
            f"says so), not that of step {step}; delete {run_manifest} and run again: the run's finetune moves that "
            "folder aside and trains it again"
        )
    want = ck.get("weights")
    if want and own is not None and weights_digest(ckpt) != want:
        raise EvaluationRefused(
            f"checkpoint not usable: the weights in {ckpt} are not those the run's finetune saved for step {step} "
            f"(their digest differs from {run_manifest}'s); delete {ckpt} and {run_manifest} and run again: the "
            "run's finetune trains that checkpoint again"
        )


# what a predictions file and its evaluation key take from the tokenised testset
_TESTSET_FIELDS = ("fingerprint", "records_sha256", "method", "template", "verbalisers")


def eval_key(weights: str, cache: dict, provenance: dict, dtype: str, device: str) -> str:
    """What determines a checkpoint x testset's predictions: a predictions file with the same key is reused."""
    import torch  # torch stack: planning and the CLI never import it

    key = {
        "weights": weights,
        **{k: cache[k] for k in _TESTSET_FIELDS},
        "n": len(cache["labels"]),
        "provenance": provenance,
        "dtype": dtype,
        "device": torch.device(device).type,
    }
    # only where set, so that the keys of earlier evaluations stay valid
    key |= {k: cache[k] for k in ("reading", "tokenizer") if cache.get(k)}
    return sha256_json(key)


@dataclass(frozen=True)
class EvalParams:
    """What an evaluation job scores (:meth:`oodcorr.planning.plan.Plan.eval_params`); ``dtype`` None: the model's."""

    model_spec: Mapping
    built_model_dir: str | None
    provenance: dict
    dtype: str | None = None

    @classmethod
    def from_mapping(cls, job: Mapping) -> EvalParams:
        """From the rule's ``params.job`` (whose steps and predictions files, in unit ``run``, are not its)."""
        return cls(job["model_spec"], job["built_model_dir"], job["provenance"], job.get("dtype"))


def evaluate_run(
    job: EvalParams,
    *,
    checkpoints: list[dict],
    tokenized: str,
    batch_size: int,
    max_tokens: int,
    out_summary: str | None = None,
    device: str = "cpu",
    threads: int = 1,
    testset: str | None = None,
) -> dict:
    """Score checkpoints of one run on one testset, in one process."""
    t0 = time.time()
    age = _process_age()
    model_entry = ModelEntry.from_params(job.model_spec)
    import torch  # torch stack: planning and the CLI never import it

    t_imp = time.time()
    torch.set_num_threads(threads)
    cache = read_tokenized(
        tokenized, tokenizer_fingerprint(model_entry, job.built_model_dir), testset=testset, model=model_entry.name
    )
    t_cache = time.time()
    job = replace(job, dtype=eval_dtype(model_entry, job.dtype))
    loader = CheckpointLoader(
        replace(model_entry, dtype=job.dtype), job.built_model_dir, device, cache["label_names"], cache["pad_id"]
    )
    job_timing = {
        "startup": round(age, 3) if age is not None else None,
        "imports": round(t_imp - t0, 3),
        "cache": round(t_cache - t_imp, 3),
    }
    records = []
    for ck in checkpoints:
        check_checkpoint_place(ck, job.provenance)  # before its old predictions are reused or it is scored
        weights = ck["series"]["digest"] if ck.get("series") else weights_digest(Path(ck["checkpoint"]))
        key = eval_key(weights, cache, job.provenance, job.dtype, device)
        try:
            old = read_result(ck["predictions"])
        except Exception:  # noqa: BLE001 -- missing or unreadable: compute it again
            old = {}
        # an existing predictions file of exactly this evaluation, step and path is kept
        here = os.path.normpath(str(old.get("predictions"))) == os.path.normpath(ck["predictions"])
        if old.get("eval_key") == key and old.get("step") == int(ck["step"]) and here:
            log.info("step %d: %s already holds this evaluation; kept", old["step"], ck["predictions"])
            records.append(old)
            continue
        rec = _evaluate_checkpoint(
            loader,
            ck,
            cache=cache,
            job=job,
            batching=device_batching(device, threads, batch_size, max_tokens),
            key=key,
            job_timing=job_timing,
            process_start=t0 - age if age is not None else None,
        )
        batch_size, max_tokens = rec["batching"]["batch_size"], rec["batching"]["max_tokens"]
        log.info(
            "step %d: accuracy %.4f on %d examples (%s; %s)",
            rec["step"],
            rec["accuracy"],
            rec["n"],
            rec["load"],
            ", ".join(f"{k} {v}s" for k, v in rec["timing_s"].items()),
        )
        records.append(rec)
    loader.close(release=False)
    job_timing["checkpoints"] = round(time.time() - t_cache, 3)
    result = {
        "testset": cache["testset"],
        "fingerprint": cache["fingerprint"],
        **job.provenance,
        "steps": [r["step"] for r in records],
        "checkpoints": records,
        "timing_s": job_timing,
    }
    if out_summary:
        write_json_atomic(out_summary, result)
    return result


def check_finite(logits, model, *, checkpoint: str, testset: str, dtype: str) -> None:
    """Refuse label scores that are not all finite: argmax over NaN still names a class."""
    import torch  # torch stack: planning and the CLI never import it

    bad = ~torch.isfinite(logits).all(dim=-1)
    if not bool(bad.any()):
        return
    n_bad, n = int(bad.sum()), int(bad.numel())
    first = int(bad.nonzero()[0, 0])
    if any(not bool(torch.isfinite(p).all()) for p in model.parameters()):
        cause = "the checkpoint's weights hold NaN or inf (training diverged): lower finetune.learning_rate, run again"
    elif dtype != "float32":
        cause = f"finite weights, so the forward pass in {dtype} overflowed: set `dtype: float32` on the model entry"
    else:
        cause = "its weights are finite, yet the model computes NaN or inf (its own code or configuration broken?)"
    raise EvaluationRefused(
        f"{checkpoint} on testset {testset!r}: {n_bad} of {n} examples get label scores that are not finite "
        f"(the first: example {first}); {cause}"
    )


def _evaluate_checkpoint(
    loader: CheckpointLoader,
    ck: dict,
    *,
    cache: dict,
    job: EvalParams,
    batching: tuple[int, int, float | None],
    key: str,
    job_timing: dict,
    process_start: float | None,
) -> dict:
    """Score one checkpoint (``ck``, as :func:`checkpoints_to_score` lists it) and write its predictions file."""
    import torch  # torch stack: planning and the CLI never import it

    from . import metrics  # numpy/pandas: kept out of planning

    checkpoint, series, out_predictions = ck["checkpoint"], ck.get("series"), ck["predictions"]
    device, dtype = loader.device, job.dtype
    t0 = time.time()
    if series is None:
        ok, why = verify_checkpoint(Path(checkpoint), full=True)
        fix = (
            f". Its files changed after it was saved: delete {Path(checkpoint).parent.parent / 'manifest.json'} and "
            "run again, and that run's finetune trains it again"
        )
    else:
        ok, why = verify(series)
        fix = (
            f"; {series.get('manifest', 'its manifest')} no longer matches the checkpoint: delete that manifest "
            "and rerun to accept the new files"
        )
    if not ok:
        raise EvaluationRefused(f"checkpoint not usable: {why}{fix}")
    model = loader.load(checkpoint, (series or {}).get("source"))
    t_model = time.time()
    stats: dict = {}
    rows, tokens, overhead = batching
    logits = score(model, cache, rows, tokens, device, stats=stats, overhead=overhead)
    t_fwd = time.time()
    started, first = stats.pop("started_at"), stats.pop("first_batch_at")
    if process_start is not None and "ready" not in job_timing and first is not None:
        # the job's fixed cost: from its process's start to its first scoring, and to its first batch scored
        job_timing["ready"] = round(started - process_start, 3)
        job_timing["first_batch"] = round(first - process_start, 3)
    check_finite(logits, model, checkpoint=str(checkpoint), testset=cache["testset"], dtype=dtype)
    pred_t = logits.argmax(-1)
    gold_t = torch.tensor(cache["labels"], dtype=torch.long)
    correct = correct_mask(pred_t, gold_t, cache["gold_names"], cache["coarse"]).tolist()
    pred, gold = pred_t.tolist(), gold_t.tolist()
    names = cache["gold_names"]
    n = len(gold)
    n_correct = sum(correct)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    result = {
        "accuracy": n_correct / n if n else float("nan"),
        "n": n,
        "n_correct": n_correct,
        **metrics.compute(gold, pred, correct, logits.numpy(), names, cache["label_names"], cache["coarse"]),
        "coarse": cache["coarse"],
        "gold_counts": {names[k]: v for k, v in sorted(Counter(gold).items())},
        "pred_counts": {names[k]: v for k, v in sorted(Counter(pred).items())},
        "step": int(ck["step"]),
        **{k: cache[k] for k in ("testset", "n_truncated", *_TESTSET_FIELDS)},
        "reading": cache.get("reading") or {},
        "checkpoint": str(checkpoint),
        "predictions": str(out_predictions),
        "device": str(device),
        "dtype": dtype,
        "eval_key": key,
        "load": loader.last_load,
        **loader.how(),
        "attn_implementation": getattr(base.config, "_attn_implementation", None),
        "batching": stats,
        "job_timing_s": job_timing,
        # not part of the evaluation's key: a new library version reruns nothing
        "libraries": library_versions(),
        **({} if series else {"finetune_libraries": ck.get("finetune_libraries")}),
        **job.provenance,
    }
    t_write = time.time()
    result["timing_s"] = {"model": round(t_model - t0, 3), "forward": round(t_fwd - t_model, 3)}
    write_predictions(out_predictions, gold, pred, correct, logits, names, cache["label_names"], result)
    result["timing_s"]["write"] = round(time.time() - t_write, 3)
    return result


def _arrow_column(values, kind: str):
    """A pyarrow array (``kind``: int64, float32, bool, string) built from its buffers: ``pyarrow.array``
    imports pandas on first use, a start-up cost every evaluation would pay for nothing."""
    import numpy as np
    import pyarrow as pa

    if kind == "string":
        data = [str(v).encode("utf-8") for v in values]
        offsets = np.zeros(len(data) + 1, dtype=np.int32)
        offsets[1:] = np.cumsum([len(d) for d in data])
        return pa.Array.from_buffers(
            pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
        )
    if kind == "bool":
        bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    arr = np.ascontiguousarray(values, dtype={"int64": np.int64, "float32": np.float32}[kind])
    return pa.Array.from_buffers(getattr(pa, kind)(), len(arr), [None, pa.py_buffer(arr)])


def write_predictions(
    path: str,
    gold: list[int],
    pred: list[int],
    correct: list[bool],
    logits,
    gold_names: list[str],
    label_names: list[str],
    record: dict,
) -> None:
    """Per-example gold, prediction, correctness and label scores as parquet (pyarrow, no pandas import)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {
        "index": _arrow_column(range(len(gold)), "int64"),
        "label": _arrow_column([gold_names[g] for g in gold], "string"),
        "pred": _arrow_column([gold_names[p] for p in pred], "string"),
        "correct": _arrow_column(correct, "bool"),
    }
    for j, name in enumerate(label_names):
        cols[f"logit_{name}"] = _arrow_column(logits.numpy()[:, j], "float32")
    meta = json.dumps(record, sort_keys=True, default=json_default).encode()
    table = pa.table(cols).replace_schema_metadata({META_KEY: meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
