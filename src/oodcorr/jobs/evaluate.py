"""Scoring a checkpoint on a testset: one forward pass per example, length-bucketed batches.

An evaluation job scores every checkpoint of one run on one testset (:func:`evaluate_run`)
and writes one predictions parquet per checkpoint plus a summary JSON. Where its time
goes is recorded (``timing_s``): in the summary, ``startup`` (interpreter start and the
job script's preamble), ``imports`` (torch), ``cache`` (the tokenised testset) and
``checkpoints`` (all of them); per checkpoint, ``model`` (loading it, including the
first load's transformers imports), ``forward`` (scoring) and ``write``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from pathlib import Path

from ..core.errors import ResultError
from ..core.io import atomic_path, json_default, read_json, read_jsonl, sha256_json, write_json_atomic
from ..core.records import META_KEY, cache_info_path, read_result
from ..modeling import adaptation
from ..modeling.adaptation import correct_mask
from ..modeling.loading import lean_enabled, load_checkpoint, load_folded, load_tokenizer, loaded_by
from .checkpoints import checkpoint_step, verify_checkpoint, weights_digest
from .series import read_manifest, verify

CACHE_FORMAT = 2
log = logging.getLogger(__name__)


class EvaluationRefused(RuntimeError):
    """An evaluation that must not give a score; the message names the file and what to do.

    Raised for a checkpoint whose files do not match its manifest (sizes, sha256) and for
    label scores that are not finite (NaN or inf), whose argmax would still pick a class
    and so make up an accuracy. The job script prints the message as its last line, with
    no traceback; nothing is written for that checkpoint.
    """


def tokenize_testset(
    *,
    model_spec: dict,
    tiny_dir: str | None,
    testset: str,
    data_path: str,
    data_meta: str,
    labels: list[str],
    prompt: dict | None,
    max_length: int,
    out_path: str,
    coarse: dict | None = None,
) -> dict:
    """Tokenise a prepared testset once per tokenizer; every checkpoint's evaluation reuses it.

    ``labels`` are what the model predicts; ``coarse`` (from the label mode) names
    gold labels it cannot predict and the predictions that count as right for them.
    """
    import torch  # torch stack: planning and the CLI never import it

    from ..planning.config import changed_reading  # planning's config: an evaluation job does not need it

    method = adaptation.get(model_spec.get("method"))
    tok = load_tokenizer(model_spec, tiny_dir)
    recs = read_jsonl(data_path)
    ids, n_trunc, extra = method.encode(
        tok, recs, labels=labels, prompt=prompt, max_length=max_length, model_name=model_spec["name"]
    )
    gold_names = list(labels) + [c for c in (coarse or {}) if c not in labels]
    lab = {name: i for i, name in enumerate(gold_names)}
    meta = read_json(
        data_meta, "the prepared dataset's description", "delete it and run again: the dataset is prepared again"
    )
    cache = {
        "format": CACHE_FORMAT,
        "testset": testset,
        "method": method.name,
        "input_ids": ids,
        "labels": [lab[r["label"]] for r in recs],
        "label_names": list(labels),
        "gold_names": gold_names,
        "coarse": dict(coarse or {}),
        "extra": extra,
        "pad_id": int(tok.pad_token_id),
        "n_truncated": n_trunc,
        "fingerprint": meta["fingerprint"],
        "records_sha256": meta.get("records_sha256"),
        "template": prompt["template"] if prompt else None,
        "verbalisers": [prompt["verbalisers"][name] for name in labels] if prompt else None,
        # the prompt switches that differ from the defaults (empty for the defaults and for head models)
        "reading": changed_reading(prompt),
    }
    info = {
        "testset": testset,
        "model": model_spec["name"],
        "n": len(ids),
        "n_truncated": n_trunc,
        "max_length": max_length,
        "fingerprint": meta["fingerprint"],
    }
    # beside the cache, readable without torch (planning warns about truncation from it); written first,
    # so a cache never lacks its sidecar
    write_json_atomic(cache_info_path(out_path), info)
    with atomic_path(out_path) as tmp:
        torch.save(cache, tmp)
    return {"n": len(ids), "n_truncated": n_trunc}


def length_batches(
    lengths: list[int], max_tokens: int, max_batch: int, overhead: float | None = None
) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest batch first.

    Examples are sorted by length (longest first) and cut into runs whose padded size (rows x
    longest row) stays within ``max_tokens`` and whose row count stays within ``max_batch``; an
    example longer than ``max_tokens`` gets a batch of its own. Longest first: a batch that does
    not fit in memory fails at once, before any work is spent on the others.

    Where the runs are cut: with ``overhead`` None, each batch takes as many examples as the
    bounds allow. With ``overhead`` (what one more batch costs, in padded tokens: see
    :func:`device_batching`), the cuts minimise the modelled time of the whole set, the padded
    tokens plus ``overhead`` per batch (an exact dynamic programme over the sorted lengths): a
    batch stops where the next examples are so much shorter that their padding would cost more
    than a batch of their own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if overhead is None:
        batches, cur, width = [], [], 0
        for i in order:
            # sorted longest first, so the first row of a batch sets its width
            if cur and ((len(cur) + 1) * width > max_tokens or len(cur) >= max_batch):
                batches.append(cur)
                cur = []
            if not cur:
                width = lengths[i]
            cur.append(i)
        if cur:
            batches.append(cur)
        return batches
    sizes = [lengths[i] for i in order]
    n = len(sizes)
    best = [0.0] + [float("inf")] * n  # best[j]: the least cost of the first j sorted examples
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, max(-1, j - 1 - max_batch), -1):
            rows, width = j - i, sizes[i]  # the batch order[i:j], its first row the longest
            if rows > 1 and rows * width > max_tokens:
                break  # rows x width only grows as the batch reaches further back
            cost = best[i] + rows * width + overhead
            if cost < best[j]:
                best[j], start[j] = cost, i
    batches, j = [], n
    while j > 0:
        batches.append(order[start[j] : j])
        j = start[j]
    return batches[::-1]


# How a CPU job batches, measured on the OPT-125m shape
# (benchmarks/README.md#12-batching-padding-and-scoring-throughput). Per useful token, scoring is
# about as fast with 512 to 4,096 padded tokens per thread in a batch and slower below 512 (at one
# thread, 256 tokens: 14 % slower), so a batch holds at most 512 per thread: the smallest at full
# speed, which keeps the first batch short and the padding low. One more batch costs about as
# much as 32 padded tokens per thread.
CPU_TOKENS_PER_THREAD = 512
CPU_OVERHEAD_PER_THREAD = 32


def device_batching(device: str, threads: int, batch_size: int, max_tokens: int) -> tuple[int, int, float | None]:
    """(rows, padded tokens, overhead per batch) a job scores with on ``device``: on a CPU at most
    ``CPU_TOKENS_PER_THREAD`` padded tokens per thread in a batch (and ``max_tokens``, ``batch_size``),
    cut where padding would cost more than another batch (:func:`length_batches`); elsewhere
    ``batch_size`` and ``max_tokens`` as given, batches as full as they allow (not measured on a
    GPU this round)."""
    import torch  # torch stack: planning and the CLI never import it

    if torch.device(device).type != "cpu":
        return batch_size, max_tokens, None
    n = max(1, int(threads))
    return batch_size, min(max_tokens, CPU_TOKENS_PER_THREAD * n), float(CPU_OVERHEAD_PER_THREAD * n)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an accelerator (or host) allocation failure worth retrying smaller."""
    import torch  # torch stack: planning and the CLI never import it

    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    # MPS and some backends raise a plain RuntimeError
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def _release_memory(device) -> None:
    import gc

    import torch  # torch stack: planning and the CLI never import it

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def score(
    model,
    cache: dict,
    batch_size: int,
    max_tokens: int,
    device: str = "cpu",
    stats: dict | None = None,
    overhead: float | None = None,
):
    """One score per label for every example of a tokenised testset, in the cache's order.

    Each example is read in exactly one forward pass. ``batch_size`` and
    ``max_tokens`` (padded tokens per batch) are where it starts: when a batch
    runs out of memory, both are halved and the examples not yet scored are
    batched again, down to one example per batch (whose failure is raised).
    ``overhead``: where batches are cut (:func:`length_batches`; None: as full as the bounds allow).
    ``stats``, if given, receives the batch size that worked, the number of
    batches and of memory failures, the real and padded token counts and the share of padding,
    and when scoring began and its first batch was done (``time.time()``).
    """
    import torch  # torch stack: planning and the CLI never import it

    from ..modeling.prompting import pad_batch  # prompting imports torch: kept out of planning

    method = adaptation.get(cache["method"])
    dev = torch.device(device)
    ids = cache["input_ids"]
    lengths = [len(x) for x in ids]
    out = torch.empty((len(ids), len(cache["label_names"])), dtype=torch.float32)
    todo = list(range(len(ids)))
    n_batches = n_oom = padded = 0
    started, first_done = time.time(), None
    while todo:
        failed = None
        done: list[int] = []
        try:
            with torch.inference_mode():
                for local in length_batches([lengths[i] for i in todo], max_tokens, batch_size, overhead):
                    batch = [todo[j] for j in local]
                    inp, mask = pad_batch([ids[i] for i in batch], cache["pad_id"], side="right")
                    logits = method.label_logits(
                        model, inp.to(dev, non_blocking=True), mask.to(dev, non_blocking=True), cache["extra"]
                    )
                    out[batch] = logits.cpu()
                    done += batch
                    n_batches += 1
                    padded += inp.numel()
                    first_done = first_done or time.time()
        except Exception as err:  # noqa: BLE001 -- only memory failures are retried
            if not is_out_of_memory(err):
                raise
            failed = (len(batch), repr(err))
        if failed is None:
            break
        # outside the except block, so the failed batch's tensors can be freed
        n_oom += 1
        if failed[0] <= 1:
            raise RuntimeError(
                f"out of memory on a single example of {max(lengths)} tokens at most (device {dev}): {failed[1]}"
            )
        _release_memory(dev)
        batch_size = max(1, min(batch_size, failed[0]) // 2)
        max_tokens = max(1, max_tokens // 2)
        gone = set(done)
        todo = [i for i in todo if i not in gone]
        log.warning(
            "out of memory in a batch of %d; retrying the %d examples left with batch_size %d, max_tokens %d",
            failed[0],
            len(todo),
            batch_size,
            max_tokens,
        )
    if stats is not None:
        stats.update(
            batch_size=batch_size,
            max_tokens=max_tokens,
            n_batches=n_batches,
            n_oom=n_oom,
            tokens=sum(lengths),
            padded_tokens=padded,
            padding=round(1 - sum(lengths) / padded, 4) if padded else 0.0,
            overhead=overhead,
            started_at=started,
            first_batch_at=first_done,
        )
    return out


def eval_dtype(model_spec: dict, device: str, dtype: str | None = None) -> str:
    """The dtype to evaluate in: ``dtype`` (``evaluation.dtype`` when it is not ``model``), else
    the model entry's ``dtype`` (the schema fills in float32, so a workflow job always has one),
    else, for an entry built without the schema, bf16 on a CUDA device that supports it (half
    the memory, tensor cores) and float32 elsewhere."""
    if dtype and dtype != "model":
        return dtype
    if model_spec.get("dtype"):
        return model_spec["dtype"]
    import torch  # torch stack: planning and the CLI never import it

    if torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


def _arrow_column(values, kind: str):
    """A pyarrow array built from its buffers. (``pyarrow.array`` imports pandas on first use,
    a start-up cost every evaluation process would pay for nothing.) ``kind``: int64, float32,
    bool, string."""
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


def _write_predictions(
    path: str,
    gold: list[int],
    pred: list[int],
    correct: list[bool],
    logits,
    gold_names: list[str],
    label_names: list[str],
    record: dict,
) -> None:
    """Per-example gold, prediction, correctness and label scores as parquet (pyarrow, no pandas import).

    The checkpoint's result record (accuracy, counts, provenance) rides in the file's
    metadata, so the one file per checkpoint x testset describes itself (:func:`read_result`).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {
        "index": _arrow_column(range(len(gold)), "int64"),
        "label": _arrow_column([gold_names[g] for g in gold], "string"),
        "pred": _arrow_column([gold_names[p] for p in pred], "string"),
        "correct": _arrow_column(correct, "bool"),
    }
    arr = logits.numpy()
    for j, name in enumerate(label_names):
        cols[f"logit_{name}"] = _arrow_column(arr[:, j], "float32")
    meta = json.dumps(record, sort_keys=True, default=json_default).encode()
    table = pa.table(cols).replace_schema_metadata({META_KEY: meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _process_age() -> float | None:
    """Seconds since this process started (interpreter start-up and the job script's preamble),
    from /proc to the clock tick; None where /proc is not there. (psutil's create_time rounds the
    boot time to whole seconds, which made a fixed 0.5 s error.)"""
    import os

    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def weights_of(ck: dict) -> str:
    """What identifies a checkpoint's weights: the sha256s in its finetune manifest, or a series
    checkpoint's digest (its files' sha256s, or the hub repository and revision)."""
    if ck.get("series"):
        return ck["series"]["digest"]

    return weights_digest(Path(ck["checkpoint"]))


def checkpoints_to_score(manifests: list[str], steps: list[int], outputs: list[str]) -> list[dict]:
    """``{"step", "checkpoint", "predictions"}`` per step, from what the evaluation job reads: a
    finetune's manifest (the run's ``checkpoints/checkpoint-<step>`` beside it; ``"weights"``: the
    checkpoint's digest that manifest recorded, ``"run_manifest"``: the manifest) or the manifests
    of a series' checkpoints (``"series"``: the manifest, for verifying and loading it). A series
    manifest is taken for the step its file name gives (``step<k>.json``), and must say so itself
    (:func:`check_checkpoint_place`)."""
    given, root, run_manifest = {}, None, None
    for m in manifests:
        try:
            doc = read_manifest(m)
        except ResultError:
            raise  # a damaged manifest: named, with the way out, by read_manifest
        except (OSError, ValueError) as e:
            raise EvaluationRefused(
                f"{m}: unreadable ({e}); delete it and run again: the job that writes it runs again"
            ) from None
        if doc is None:
            root, run_manifest = Path(m).parent / "checkpoints", m
        else:
            place = Path(m).stem.removeprefix("step")
            given[int(place) if place.isdigit() else int(doc["step"])] = dict(doc, manifest=str(m))
    recorded = _recorded_weights(run_manifest) if run_manifest else {}
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
                    "weights": recorded.get(step),
                    "run_manifest": run_manifest,
                }
            )
        else:
            raise EvaluationRefused(
                f"step {step}: none of {manifests} lists this checkpoint; delete them and run again: the jobs "
                "that write them run again"
            )
    return out


def _recorded_weights(run_manifest: str) -> dict[int, str]:
    """Each checkpoint's weights digest as the run's finetune recorded it (manifests written before
    the digests were recorded have none: their checkpoints are checked by their own step only)."""
    try:
        doc = json.loads(Path(run_manifest).read_text(encoding="utf-8"))
        return {int(e["step"]): e["weights"] for e in doc.get("checkpoints") or [] if e.get("weights")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise EvaluationRefused(
            f"{run_manifest}: unreadable run manifest ({type(e).__name__}); delete it and run again: the run's "
            "finetune writes it again (without training, when its checkpoints are whole)"
        ) from None


def check_checkpoint_place(ck: dict, provenance: dict | None = None) -> None:
    """Refuse a checkpoint that is not the one its place says, before it is scored or its old
    predictions reused: a finetuned checkpoint whose own manifest names another step (its folder
    replaced by another step's), or whose weights are not those the run's manifest recorded for
    that step; a series manifest that names another step or model than its file does. Reads the
    manifests only: the files' sha256 are checked (once, cached) by :func:`_evaluate_checkpoint`."""
    step = int(ck["step"])
    series = ck.get("series")
    if series:
        model = (provenance or {}).get("model")
        manifest = series.get("manifest", "its manifest")
        if int(series.get("step", -1)) != step or (model and series.get("model") != model):
            raise EvaluationRefused(
                f"checkpoint not usable: {manifest} is the manifest of model {series.get('model')!r}, "
                f"{series.get('x_unit', 'step')} {series.get('step')}, but sits where that of model {model!r}, "
                f"{series.get('x_unit', 'step')} {step} belongs (copied over it?). Delete {manifest} and run "
                "again: it is written again from the config, and that checkpoint's evaluations rerun"
            )
        return
    ckpt = Path(ck["checkpoint"])
    run_manifest = ck.get("run_manifest") or str(ckpt.parent.parent / "manifest.json")
    own = checkpoint_step(ckpt)
    if own is not None and own != step:
        raise EvaluationRefused(
            f"checkpoint not usable: {ckpt} holds the checkpoint of step {own} (its {ckpt.name}/oodcorr_manifest.json "
            f"says so), not that of step {step}: the folder was replaced by another checkpoint's (copied over "
            f"it?), so it is not evaluated as step {step}. To recover, delete {run_manifest} and run again: the "
            "run's finetune moves that folder aside, trains the run again (to the same weights) and its "
            "evaluations rerun"
        )
    want = ck.get("weights")
    if want and own is not None and weights_digest(ckpt) != want:
        raise EvaluationRefused(
            f"checkpoint not usable: the weights in {ckpt} are not those the run's finetune saved for step {step} "
            f"(their digest differs from the one {run_manifest} recorded): the folder was replaced after the run "
            f"finished, so it is not evaluated. To recover, delete {ckpt} and {run_manifest} and run again: the "
            "run's finetune trains that checkpoint again (to the same weights) and its evaluations rerun"
        )


def eval_key(weights: str, cache: dict, provenance: dict, dtype: str, device: str) -> str:
    """What determines a checkpoint x testset's predictions: the checkpoint's weights (:func:`weights_of`),
    the tokenised testset, the provenance, dtype and device type. A predictions file with the same
    key is not computed again (a resumed or re-planned job reuses it)."""
    import torch  # torch stack: planning and the CLI never import it

    key = {
        "weights": weights,
        "fingerprint": cache["fingerprint"],
        "records_sha256": cache["records_sha256"],
        "method": cache["method"],
        "template": cache["template"],
        "verbalisers": cache["verbalisers"],
        "n": len(cache["labels"]),
        "provenance": provenance,
        "dtype": dtype,
        "device": torch.device(device).type,
    }
    if cache.get("reading"):  # only when a prompt switch is off its default, so earlier keys stay valid
        key["reading"] = cache["reading"]
    return sha256_json(key)


def _adapter_config(ckpt: Path):
    """A peft checkpoint's adapter configuration as peft reads it (a dataclass whose set-valued
    fields, such as ``target_modules``, compare without regard to the order written)."""
    from peft import PeftConfig  # torch stack: planning and the CLI never import it

    return PeftConfig.from_pretrained(str(ckpt))


class CheckpointLoader:
    """Loads a run's checkpoints one after another, reusing what does not change.

    Every model is loaded for scoring (:func:`oodcorr.modeling.loading.load_checkpoint` with
    ``for_scoring``): the lean model where it applies, and a LoRA adapter folded into the base
    model's weights (:mod:`oodcorr.modeling.lora`). After the first checkpoint, a LoRA
    checkpoint is scored on the same base model: the weights the last fold changed are copied
    back and the new adapter is folded in (the base model is read once per job). An adapter a
    fold does not know is scored with peft's adapter layers, as before: one whose configuration
    equals the loaded one's (as peft reads it: peft writes sets such as ``target_modules`` in an
    order that changes from process to process, e.g. after a resumed finetuning job) only swaps
    its weights in. A checkpoint of full weights is copied into the loaded model in place (no
    new model is built). Anything else, or a swap that does not fit exactly, loads afresh.
    Either way the model computes exactly what a fresh load of that checkpoint computes (tests
    compare them bit for bit).
    """

    def __init__(self, model_spec: dict, tiny_dir: str | None, device: str, labels: list[str], pad_id: int):
        self.spec, self.tiny_dir, self.device = model_spec, tiny_dir, device
        self.labels, self.pad_id = labels, pad_id
        self.model = None
        self.kind = None  # "folded", "adapter" (peft's layers), "full" or "hub": what the loaded model holds
        self.adapter_config = None
        self.folded = None  # what the last fold changed (oodcorr.modeling.lora.Folded)
        self.last_load = ""  # how the last checkpoint was loaded: fresh, adapter swap, in place

    def how(self) -> dict:
        """How the last checkpoint is scored: ``loader`` (lean or transformers) and ``lora``
        (folded, peft, or None for full weights)."""
        lora = {"folded": "folded", "adapter": "peft"}.get(self.kind)
        return {"loader": loaded_by(self.model), "lora": lora}

    def load(self, checkpoint: str | Path, source: dict | None = None):
        """The model at ``checkpoint`` (a local directory); ``source`` ``{"hub", "revision"}`` names a
        series checkpoint on the hub instead, always loaded afresh."""
        if source and source.get("hub"):
            # looked up at call time: tests replace oodcorr.modeling.loading.load_model
            from ..modeling.loading import load_model

            self.close()
            own = dict(self.spec, series=None, hub=source["hub"], revision=source["revision"])
            self.model = load_model(own, None, self.device, self.labels, self.pad_id, lean=True).eval()
            self.kind, self.adapter_config, self.last_load = "hub", None, "fresh"
            return self.model
        ckpt = Path(checkpoint)
        adapter_cfg = ckpt / "adapter_config.json"
        if adapter_cfg.exists():
            model = self._fold(ckpt)
            if model is not None:
                return model
        if self.model is not None:
            if adapter_cfg.exists() and self.kind == "adapter" and _adapter_config(ckpt) == self.adapter_config:
                if self._swap_adapter(ckpt):
                    self.last_load = "adapter swap"
                    return self.model
            elif not adapter_cfg.exists() and self.kind == "full":
                if self._load_in_place(ckpt):
                    self.last_load = "in place"
                    return self.model
        self.close()

        if adapter_cfg.exists():
            # an adapter a fold does not know (_fold said why): peft's layers on transformers' model
            from peft import PeftModel  # torch stack: planning and the CLI never import it

            from ..modeling.loading import load_model  # looked up at call time: tests replace it

            base = load_model(self.spec, self.tiny_dir, self.device, self.labels, self.pad_id)
            self.model = PeftModel.from_pretrained(base, str(ckpt)).eval()
            self.kind, self.adapter_config = "adapter", _adapter_config(ckpt)
        else:
            self.model = load_checkpoint(
                self.spec, ckpt, self.tiny_dir, self.device, self.labels, self.pad_id, for_scoring=True
            )
            self.kind, self.adapter_config = "full", None
        self.last_load = "fresh"
        return self.model

    def _fold(self, ckpt: Path):
        """The base model with ``ckpt``'s adapter folded in (onto the loaded base when there is one),
        or None when the adapter is not one a fold knows."""
        from ..modeling.lora import fold, read_adapter  # torch stack: planning and the CLI never import it

        if not lean_enabled(self.device):
            return None
        adapter, why = read_adapter(ckpt, self.device)
        if adapter is None:
            log.info("%s: adapter not folded (%s); scoring with peft's adapter layers", ckpt, why)
            return None
        if self.model is not None and self.kind == "folded":
            self.folded.restore(self.model)  # the base model's own weights again, bit for bit
            done, why = fold(self.model, adapter)
            if done is not None:
                self.folded, self.last_load = done, "adapter swap"
                return self.model
        self.close()
        model, done, why = load_folded(self.spec, ckpt, self.tiny_dir, self.device, self.labels, self.pad_id)
        if model is None:
            log.info("%s: adapter not folded (%s); scoring with peft's adapter layers", ckpt, why)
            return None
        self.model, self.folded, self.kind, self.adapter_config = model, done, "folded", None
        self.last_load = "fresh"
        return model

    def _swap_adapter(self, ckpt: Path) -> bool:
        # torch stack: planning and the CLI never import it
        from peft.utils import load_peft_weights, set_peft_model_state_dict

        weights = load_peft_weights(str(ckpt), device=str(self.device))
        result = set_peft_model_state_dict(self.model, weights)
        unset = [k for k in result.missing_keys if "lora_" in k or ".modules_to_save." in k]
        if result.unexpected_keys or unset:
            log.warning(
                "%s: adapter swap did not fit (unexpected %s, unset %s); loading afresh",
                ckpt,
                result.unexpected_keys[:3],
                unset[:3],
            )
            return False
        self.model.eval()
        return True

    def _load_in_place(self, ckpt: Path) -> bool:
        import torch  # torch stack: planning and the CLI never import it
        from safetensors.torch import load_file

        files = sorted(ckpt.glob("*.safetensors"))
        if not files:
            return False
        state = {}
        for f in files:
            state.update(load_file(str(f), device=str(self.device)))
        own = dict(self.model.state_dict())
        unexpected = [k for k in state if k not in own]
        wrong = [k for k in state if k in own and own[k].shape != state[k].shape]
        ptrs = {own[k].data_ptr() for k in state if k in own}
        # a key the file lacks must be tied to one it has (e.g. an LM head tied to the embeddings)
        untied = [k for k in own if k not in state and own[k].data_ptr() not in ptrs]
        if unexpected or wrong or untied:
            log.info(
                "%s: in-place load does not fit (unexpected %s, shape %s, not in file %s); loading afresh",
                ckpt,
                unexpected[:3],
                wrong[:3],
                untied[:3],
            )
            return False
        with torch.no_grad():
            self.model.load_state_dict(state, strict=False)
        self.model.eval()
        return True

    def close(self, release: bool = True) -> None:
        """Drop the loaded model; ``release``: also collect garbage and empty the device's cache,
        before another model is loaded (a full collection costs a tenth of a second or more; at
        the end of a job, whose process then exits, it is skipped)."""
        if self.model is not None:
            self.model, self.folded = None, None
            if release:
                _release_memory(__import__("torch").device(self.device))


def evaluate_run(
    *,
    model_spec: dict,
    tiny_dir: str | None,
    checkpoints: list[dict],
    tokenized: str,
    batch_size: int,
    max_tokens: int,
    provenance: dict,
    out_summary: str | None = None,
    device: str = "cpu",
    threads: int = 1,
    dtype: str | None = None,
) -> dict:
    """Score checkpoints of one run on one testset, in one process.

    ``checkpoints`` lists ``{"step", "checkpoint", "predictions"}``: each checkpoint is
    loaded in turn (:class:`CheckpointLoader` reads a LoRA run's base model once), scored,
    and written to its own predictions parquet, whose metadata holds the result record. A
    predictions file that already holds this exact evaluation (same :func:`eval_key`) is
    kept, not recomputed. ``out_summary`` (``evaluation.unit: run``), written last, lists
    every checkpoint's record. A batch size that had to be halved for memory stays halved
    for the checkpoints after it. Returns ``{"testset", "checkpoints": [record...], "timing_s"}``.
    """
    t0 = time.time()
    age = _process_age()
    import torch  # torch stack: planning and the CLI never import it

    t_imp = time.time()
    torch.set_num_threads(threads)
    cache = torch.load(tokenized, weights_only=True)
    t_cache = time.time()
    dtype = eval_dtype(model_spec, device, dtype)
    loader = CheckpointLoader(dict(model_spec, dtype=dtype), tiny_dir, device, cache["label_names"], cache["pad_id"])
    job_timing = {
        "startup": round(age, 3) if age is not None else None,
        "imports": round(t_imp - t0, 3),
        "cache": round(t_cache - t_imp, 3),
    }
    records = []
    for ck in checkpoints:
        check_checkpoint_place(ck, provenance)  # before its old predictions are reused or it is scored
        key = eval_key(weights_of(ck), cache, provenance, dtype, device)
        old = _reusable(ck["predictions"], key, int(ck["step"]))
        if old is not None:
            log.info("step %d: %s already holds this evaluation; kept", old["step"], ck["predictions"])
            records.append(old)
            continue
        rec = _evaluate_checkpoint(
            loader=loader,
            checkpoint=ck["checkpoint"],
            series=ck.get("series"),
            step=int(ck["step"]),
            cache=cache,
            batch_size=batch_size,
            max_tokens=max_tokens,
            out_predictions=ck["predictions"],
            provenance=provenance,
            device=device,
            dtype=dtype,
            key=key,
            job_timing=job_timing,
            threads=threads,
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
        **provenance,
        "steps": [r["step"] for r in records],
        "checkpoints": records,
        "timing_s": job_timing,
    }
    if out_summary:
        write_json_atomic(out_summary, result)
    return result


def _reusable(path: str, key: str, step: int) -> dict | None:
    """The record of an existing predictions file made by exactly this evaluation, for this place
    (its step, and the path it was written to: a copy of another experiment's file with the same
    key is computed again), else None."""
    if not Path(path).exists():
        return None
    try:
        rec = read_result(path)
    except Exception:  # noqa: BLE001 -- unreadable: compute it again
        return None
    here = rec.get("step") == step and os.path.normpath(str(rec.get("predictions"))) == os.path.normpath(path)
    return rec if rec.get("eval_key") == key and here else None


def _damaged_checkpoint(ckpt: Path, why: str) -> str:
    run_dir = ckpt.parent.parent
    return (
        f"checkpoint not usable: {why}. Its files changed after it was saved, so it is not evaluated. "
        f"To recover, delete {run_dir / 'manifest.json'} and run again: that run's finetune moves the "
        "damaged checkpoint aside, trains it again (to the same weights) and its evaluations rerun"
    )


def check_finite(logits, model, *, checkpoint: str, testset: str, dtype: str) -> None:
    """Refuse label scores that are not all finite: argmax over NaN still names a class
    (accuracy 0.5 on a balanced set), so such a checkpoint gets no score at all."""
    import torch  # torch stack: planning and the CLI never import it

    bad = ~torch.isfinite(logits).all(dim=-1)
    if not bool(bad.any()):
        return
    n_bad, n = int(bad.sum()), int(bad.numel())
    first = int(bad.nonzero()[0, 0])
    params = model.parameters() if hasattr(model, "parameters") else []
    weights_bad = any(not bool(torch.isfinite(p).all()) for p in params)
    if weights_bad:
        cause = (
            "the checkpoint's weights hold NaN or inf (training diverged): see the loss in its finetune log, "
            "lower finetune.learning_rate and run again"
        )
    else:
        cause = (
            f"its weights are finite, so the forward pass in {dtype} overflowed: evaluate in float32 "
            "(`dtype: float32` on the model entry)"
            if dtype != "float32"
            else "its weights are finite, yet the model computes NaN or inf (a model whose own code or "
            "configuration is broken?)"
        )
    raise EvaluationRefused(
        f"{checkpoint} on testset {testset!r}: {n_bad} of {n} examples get label scores "
        f"that are not finite (NaN or inf; the first is example {first}), so no accuracy "
        f"is computed; {cause}"
    )


def _evaluate_checkpoint(
    *,
    loader: CheckpointLoader,
    checkpoint: str,
    series: dict | None,
    step: int,
    cache: dict,
    batch_size: int,
    max_tokens: int,
    out_predictions: str,
    provenance: dict,
    device: str,
    dtype: str,
    key: str,
    job_timing: dict,
    threads: int = 1,
    process_start: float | None = None,
) -> dict:
    import torch  # torch stack: planning and the CLI never import it

    from . import metrics  # numpy/pandas: kept out of planning

    t0 = time.time()
    if series is None:
        # sizes always, sha256 once per file (cached in the checkpoint's .oodcorr_verified.json)
        ok, why = verify_checkpoint(Path(checkpoint), full=True)
        if not ok:
            raise EvaluationRefused(_damaged_checkpoint(Path(checkpoint), why))
    else:
        ok, why = verify(series)
        if not ok:
            raise EvaluationRefused(
                f"checkpoint not usable: {why}; {series.get('manifest', 'its manifest')} no longer matches the "
                "checkpoint: delete that manifest and rerun to accept the new files"
            )
    model = loader.load(checkpoint, (series or {}).get("source"))
    t_model = time.time()
    stats: dict = {}
    rows, tokens, overhead = device_batching(device, threads, batch_size, max_tokens)
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
        "step": step,
        "testset": cache["testset"],
        "fingerprint": cache["fingerprint"],
        "records_sha256": cache["records_sha256"],
        "method": cache["method"],
        "n_truncated": cache["n_truncated"],
        "template": cache["template"],
        "verbalisers": cache["verbalisers"],
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
        **provenance,
    }
    t_write = time.time()
    result["timing_s"] = {"model": round(t_model - t0, 3), "forward": round(t_fwd - t_model, 3)}
    _write_predictions(out_predictions, gold, pred, correct, logits, names, cache["label_names"], result)
    result["timing_s"]["write"] = round(time.time() - t_write, 3)
    return result
