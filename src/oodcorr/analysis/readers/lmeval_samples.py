"""The per-example logs of lm-evaluation-harness (``--log_samples``): one
``samples_<task>_<date>.jsonl`` per task beside its ``results_<date>.json``, read into each
document's 0/1 value of a metric for the example-level bootstrap (:func:`read_samples`).
:mod:`.lmeval` finds the files and pairs them with their results; a file is streamed line by
line, each line at most :data:`MAX_SAMPLE_LINE_BYTES`, and refused, naming the file and line,
when it is not one lm-evaluation-harness wrote for the same evaluation."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pandas as pd

from ...core.errors import DataError
from ...core.io import DuplicateKey, loads_json

MAX_SAMPLE_LINE_BYTES = 16 * 2**20  # one line of a samples file


def not_regular(path: Path) -> str:
    """The refusal of a path named like an lm-evaluation-harness file that is not a regular file."""
    return f"{path}: not a regular file (a pipe, socket or device named like a results file); move it out of the folder"


def read_samples(path: Path, key: str, score: float, max_line: int = MAX_SAMPLE_LINE_BYTES) -> pd.DataFrame:
    """(example, correct) of one samples file for the metric key ``key`` (``acc,none``: value
    ``acc`` of the lines whose filter is ``none``), streamed; every value must be 0 or 1 and their
    mean ``score`` (the results file's), else it is refused naming the file and line."""
    name, _, filt = key.partition(",")
    ids, vals = [], []
    seen = set()
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise DataError(not_regular(path))
        fh = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); make it readable or pass --no-samples") from None
    with fh:
        lineno = 0
        while True:
            raw = fh.readline(max_line + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > max_line:
                raise DataError(
                    f"{path}:{lineno}: a line longer than {max_line / 2**20:g} MiB; not a samples file of "
                    "lm-evaluation-harness? pass --no-samples to analyse without it"
                )
            if not raw.strip():
                continue
            try:
                rec = loads_json(raw)
            except DuplicateKey as e:
                raise DataError(f"{path}:{lineno}: {e}; pass --no-samples to analyse without it") from None
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                raise DataError(
                    f"{path}:{lineno}: not a JSON line ({getattr(e, 'msg', type(e).__name__)}; cut short?); rerun "
                    "that evaluation with --log_samples, move the file out, or pass --no-samples"
                ) from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: not a JSON object; pass --no-samples to analyse without it")
            if filt and str(rec.get("filter", "none")) != filt:
                continue
            if "doc_id" not in rec or name not in rec:
                raise DataError(
                    f"{path}:{lineno}: no {'doc_id' if 'doc_id' not in rec else repr(name)} in this sample; "
                    "pass --no-samples to analyse without the samples"
                )
            v = rec[name]
            if v is True or v is False:
                v = int(v)
            if not isinstance(v, (int, float)) or v not in (0, 1):
                raise DataError(
                    f"{path}:{lineno}: {name} is {str(v)[:40]!r}, not 0 or 1: the example-level bootstrap "
                    "resamples correctness; pass --no-samples to analyse this metric without it"
                )
            doc = rec["doc_id"]
            doc = doc if isinstance(doc, (int, str)) else json.dumps(doc)
            if doc in seen:
                raise DataError(f"{path}:{lineno}: document {doc!r} occurs twice; pass --no-samples or rerun it")
            seen.add(doc)
            ids.append(doc)
            vals.append(float(v))
    if not vals:
        raise DataError(f"{path}: holds no sample of {key!r}; pass --no-samples to analyse without it")
    mean = sum(vals) / len(vals)
    if abs(mean - score) > 1e-6:
        raise DataError(
            f"{path}: its {len(vals)} samples average {mean:.6f} on {key!r}, but the results file beside it says "
            f"{score:.6f}: not the same evaluation; move it out or pass --no-samples"
        )
    return pd.DataFrame({"example": ids, "correct": vals})
