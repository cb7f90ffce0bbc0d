"""Scoring a tokenised testset: the batching policy, the forward pass and its dtype."""

from __future__ import annotations

import logging
import time

from ..core.model_entry import ModelEntry
from ..modeling import adaptation
from ..modeling.loading import release_memory

log = logging.getLogger(__name__)


def length_batches(
    lengths: list[int], max_tokens: int, max_batch: int, overhead: float | None = None
) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest batch first."""
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


# a CPU batch holds at most 512 padded tokens per thread (the smallest at full speed); one more batch
# costs about as much as 32 padded tokens per thread (benchmarks/README.md#12-batching-padding-and-scoring-throughput)
CPU_TOKENS_PER_THREAD = 512
CPU_OVERHEAD_PER_THREAD = 32


def device_batching(device: str, threads: int, batch_size: int, max_tokens: int) -> tuple[int, int, float | None]:
    """(rows, padded tokens, overhead per batch) on ``device``: a CPU at most CPU_TOKENS_PER_THREAD tokens a thread."""
    import torch  # torch stack: planning and the CLI never import it

    if torch.device(device).type != "cpu":
        return batch_size, max_tokens, None
    n = max(1, int(threads))
    return batch_size, min(max_tokens, CPU_TOKENS_PER_THREAD * n), float(CPU_OVERHEAD_PER_THREAD * n)


def score(
    model,
    cache: dict,
    batch_size: int,
    max_tokens: int,
    device: str = "cpu",
    stats: dict | None = None,
    overhead: float | None = None,
):
    """One score per label for every example of a tokenised testset, in the cache's order."""
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
        except Exception as err:  # noqa: BLE001 -- only memory failures are retried (MPS: a plain RuntimeError)
            oom = isinstance(err, RuntimeError) and "out of memory" in str(err).lower()
            if not (oom or isinstance(err, (torch.OutOfMemoryError, MemoryError))):
                raise
            failed = (len(batch), repr(err))
        if failed is None:
            break
        # outside the except block, so the failed batch's tensors can be freed
        n_oom += 1
        if failed[0] <= 1:
            raise RuntimeError(f"out of memory on a single example of up to {max(lengths)} tokens ({dev}): {failed[1]}")
        release_memory(dev)
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


def eval_dtype(model_entry: ModelEntry, dtype: str | None = None) -> str:
    """The dtype to evaluate in: ``evaluation.dtype`` unless it is ``model``, else the model entry's."""
    return dtype if dtype and dtype != "model" else model_entry.dtype
