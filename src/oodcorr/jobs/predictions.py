"""Writing a checkpoint x testset's predictions file: per-example parquet, its record in the metadata."""

from __future__ import annotations

import json

from ..core.atomic_write import atomic_path
from ..core.digests import json_default
from ..core.records import META_KEY


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
    arr = logits.numpy()
    for j, name in enumerate(label_names):
        cols[f"logit_{name}"] = _arrow_column(arr[:, j], "float32")
    meta = json.dumps(record, sort_keys=True, default=json_default).encode()
    table = pa.table(cols).replace_schema_metadata({META_KEY: meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
