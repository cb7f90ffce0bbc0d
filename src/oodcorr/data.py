"""Datasets: from a registry entry to normalised records, and few-shot training samples.

A record is ``{"premise": str, "hypothesis": str, "label": str, "meta": dict}``:
the same format for synthetic data, local files and Hugging Face hub datasets.
"""
from __future__ import annotations

import csv
import random
from collections import Counter
from pathlib import Path
from typing import Callable

from . import synthetic
from .io import DataError, read_jsonl, sha256_file, sha256_json

DEFAULT_FIELDS = {"premise": "premise", "hypothesis": "hypothesis", "label": "label"}


def _load_synthetic(spec: dict, base: Path) -> tuple[list[dict], dict]:
    recs = synthetic.generate(spec["shift"], int(spec["n"]), int(spec.get("seed", 0)), spec.get("split", "test"))
    prov = {"source": "synthetic", "shift": spec["shift"], "n": int(spec["n"]),
            "seed": int(spec.get("seed", 0)), "split": spec.get("split", "test"),
            "fingerprint": "synthetic:" + sha256_json(recs)[:16]}
    return recs, prov


def _read_table(path: Path, fmt: str) -> list[dict]:
    if fmt == "jsonl":
        return read_jsonl(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if fmt in ("csv", "tsv"):
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="," if fmt == "csv" else "\t")
            rows = []
            start = 2  # the header is line 1
            for row in reader:
                rows.append(dict(row, _line=start))  # the line the record starts on
                start = reader.line_num + 1
            return rows
    if fmt == "parquet":
        import pandas as pd

        df = pd.read_parquet(path)
        return [dict(r, _line=i + 1) for i, r in enumerate(df.to_dict("records"))]
    raise DataError(f"{path}: unknown format {fmt!r} (jsonl, csv, tsv, parquet)")


def _field(row: dict, dotted: str):
    """``row[a][b]`` for ``"a.b"``; KeyError names the whole path."""
    cur = row
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(dotted)
        cur = cur[part]
    return cur


def rows_to_records(rows: list[dict], spec: dict, where: str) -> list[dict]:
    """Source rows -> records through the entry's ``fields`` and ``where`` filter.

    ``fields`` maps premise/hypothesis/label to the source's column names (dotted
    paths reach into nested columns); ``where`` keeps rows whose field equals the
    given value (e.g. ``{"meta.round": "R3"}``). Every error names ``where`` and
    the row's line.
    """
    fields = {**DEFAULT_FIELDS, **(spec.get("fields") or {})}
    keep = spec.get("where") or {}
    recs = []
    for row in rows:
        line = row.pop("_line", None)
        loc = f"{where}:{line}" if line is not None else where
        try:
            if any(str(_field(row, k)) != str(v) for k, v in keep.items()):
                continue
            rec = {k: _field(row, src) for k, src in fields.items()}
        except KeyError as e:
            raise DataError(f"{loc}: missing field {e.args[0]!r} (fields: {fields}, where: {keep})") from None
        for k in ("premise", "hypothesis"):
            if not isinstance(rec[k], str) or not rec[k].strip():
                raise DataError(f"{loc}: field {fields[k]!r} ({k}) is empty or not text: {rec[k]!r}")
        if rec["label"] is None:
            raise DataError(f"{loc}: field {fields['label']!r} (label) is empty")
        meta = dict(row["meta"]) if isinstance(row.get("meta"), dict) else {}
        for k in spec.get("meta_fields") or []:
            if k in row:
                meta[k] = row[k]
        rec["meta"] = dict(meta, line=line)
        recs.append(rec)
    return recs


def _load_local(spec: dict, base: Path) -> tuple[list[dict], dict]:
    path = Path(spec["path"])
    if not path.is_absolute():
        path = base / path
    fmt = spec.get("format") or path.suffix.lstrip(".").lower()
    recs = rows_to_records(_read_table(path, fmt), spec, str(path))
    prov = {"source": "local", "path": str(path), "format": fmt, "fingerprint": "sha256:" + sha256_file(path)}
    return recs, prov


def hub_load_kwargs(spec: dict) -> dict:
    """The exact ``datasets.load_dataset`` keyword arguments for a hub entry."""
    hub = spec.get("hub") or {}
    missing = [k for k in ("id", "split", "revision") if not hub.get(k)]
    if missing:
        raise DataError(f"hub dataset entry needs hub.{', hub.'.join(missing)} (got {hub})")
    return {"path": hub["id"], "name": hub.get("config"), "split": hub["split"], "revision": hub["revision"]}


def _load_hub(spec: dict, base: Path) -> tuple[list[dict], dict]:
    import datasets  # imported here: planning and local data never need it

    kwargs = hub_load_kwargs(spec)
    where = f"hub {kwargs['path']}@{kwargs['revision']} ({kwargs['name'] or 'default'}/{kwargs['split']})"
    try:
        ds = datasets.load_dataset(**kwargs)
    except Exception as e:  # offline, unknown revision, gated...: say which entry and how to go local
        raise DataError(f"{where}: could not load ({type(e).__name__}: {e}). Without hub access, point the "
                        "entry at a local file (source: local, path: ...)") from None
    rows = [dict(r, _line=i + 1) for i, r in enumerate(ds)]
    recs = rows_to_records(rows, spec, where)
    prov = {"source": "hub", "hub": kwargs,
            "fingerprint": f"hub:{kwargs['path']}@{kwargs['revision']}:{kwargs['name']}/{kwargs['split']}"}
    return recs, prov


LOADERS: dict[str, Callable[[dict, Path], tuple[list[dict], dict]]] = {
    "synthetic": _load_synthetic,
    "local": _load_local,
    "hub": _load_hub,
}


def map_labels(recs: list[dict], label_map: dict | None, mode: dict, where: str) -> list[dict]:
    """Raw label -> dataset label (``label_map``) -> experiment label (the label mode's ``map``).

    A value of null at either stage drops the example on purpose (e.g. SNLI's
    ``-1``, or ``neutral`` in ``binary`` mode). A label neither stage knows is an
    error naming the file and line. The result's labels are the mode's
    ``labels`` or one of its ``coarse`` labels (a 2-way gold label under a 3-way
    mode, scored by the mode's collapse rule).
    """
    label_map = {str(k): v for k, v in (label_map or {}).items()}
    mode_map = mode.get("map") or {}
    allowed = list(mode["labels"]) + list(mode.get("coarse") or {})
    out = []
    for r in recs:
        raw = str(r["label"])
        lab = label_map.get(raw, raw)
        if lab is not None:
            lab = mode_map.get(lab, lab)
        if lab is None:  # mapped to null: dropped on purpose
            continue
        if lab not in allowed:
            line = r.get("meta", {}).get("line")
            loc = f"{where}:{line}" if line else where
            raise DataError(f"{loc}: unknown label {raw!r}; label mode {mode.get('name', '?')!r} expects one of "
                            f"{allowed} (add a `label_map` entry for {raw!r} to the dataset's registry entry)")
        out.append(dict(r, label=lab))
    return out


def stratified_sample(recs: list[dict], n: int, seed: int) -> list[dict]:
    """At most ``n`` records keeping label proportions (largest remainder), seeded.

    The original order of the kept records is preserved.
    """
    if n >= len(recs):
        return list(recs)
    rng = random.Random(seed)
    by_label: dict[str, list[int]] = {}
    for i, r in enumerate(recs):
        by_label.setdefault(r["label"], []).append(i)
    total = len(recs)
    quotas = {lab: n * len(ix) / total for lab, ix in by_label.items()}
    take = {lab: int(q) for lab, q in quotas.items()}
    rest = n - sum(take.values())
    for lab in sorted(quotas, key=lambda k: (-(quotas[k] - take[k]), k))[:rest]:
        take[lab] += 1
    keep = []
    for lab in sorted(by_label):
        keep += rng.sample(by_label[lab], take[lab])
    return [recs[i] for i in sorted(keep)]


def balanced_sample(recs: list[dict], n: int, labels: list[str], seed: int) -> list[dict]:
    """``n`` training examples, ``n / len(labels)`` per label, drawn with ``seed``, shuffled."""
    stray = sorted({r["label"] for r in recs} - set(labels))
    if stray:
        raise DataError(f"the training set has label(s) {stray} that the model does not predict ({labels}); "
                        "train on a set whose labels the label mode maps onto these")
    per = n // len(labels)
    if per * len(labels) != n:
        raise DataError(f"n_train={n} is not divisible by the {len(labels)} labels")
    rng = random.Random(seed)
    out = []
    for lab in labels:
        pool = [r for r in recs if r["label"] == lab]
        if len(pool) < per:
            raise DataError(f"n_train={n} needs {per} examples of label {lab!r}, the training set has {len(pool)}")
        out += rng.sample(pool, per)
    rng.shuffle(out)
    return out


def prepare(name: str, spec: dict, mode: dict, base: Path | str = ".") -> tuple[list[dict], dict]:
    """Load dataset ``name`` from its registry ``spec`` under label ``mode``; return (records, provenance)."""
    source = spec.get("source")
    if source not in LOADERS:
        raise DataError(f"dataset {name!r}: unknown source {source!r}; known: {', '.join(LOADERS)}")
    recs, prov = LOADERS[source](spec, Path(base))
    where = prov.get("path", f"dataset {name!r}")
    recs = map_labels(recs, spec.get("label_map"), mode, where)
    if not recs:
        raise DataError(f"dataset {name!r}: no examples left after label mapping ({where})")
    n_before = len(recs)
    if spec.get("max_examples"):
        recs = stratified_sample(recs, int(spec["max_examples"]), int(spec.get("sample_seed", 0)))
    counts = Counter(r["label"] for r in recs)
    prov.update({"name": name, "n": len(recs), "n_before_cap": n_before, "label_mode": mode.get("name"),
                 "label_counts": dict(sorted(counts.items())), "records_sha256": sha256_json(recs)})
    if len(counts) < 2:
        prov["warning"] = (f"dataset {name!r} has a single class ({next(iter(counts))}); "
                           "accuracy is still defined but says little")
    for i, r in enumerate(recs):
        r["meta"] = dict(r.get("meta") or {}, dataset=name, index=i)
    return recs, prov
