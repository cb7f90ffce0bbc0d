"""Datasets: from a registry entry to normalised records, and few-shot training samples."""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from pathlib import Path

from ..core import table_files
from ..core.digests import sha256_file, sha256_json, stat_key
from ..core.errors import DataError
from ..core.io import format_suffix, read_jsonl, read_text
from ..modeling import synthetic
from ..modeling.hub import check_loaded_dataset, hub_load_kwargs, pinned_dataset

log = logging.getLogger(__name__)

DEFAULT_FIELDS = {"premise": "premise", "hypothesis": "hypothesis", "label": "label"}
FORMATS = ("jsonl", "csv", "tsv", "parquet")
ENCODING_FIX = "set `encoding: {encoding}` on the dataset entry"
FORMAT_FIX = "set `format: {fmt}` on the dataset entry"
DUPLICATE_EXAMPLES = 5  # line numbers recorded per duplicate kind


def _count(dropped: dict, reason: str, key: str | None = None) -> None:
    """One more row dropped for ``reason`` (per ``key``, e.g. the label, where given)."""
    if key is None:
        dropped[reason] = dropped.get(reason, 0) + 1
    else:
        sub = dropped.setdefault(reason, {})
        sub[key] = sub.get(key, 0) + 1


def _load_synthetic(spec: dict, base: Path, dropped: dict) -> tuple[list[dict], dict]:
    """``n`` examples of the generator's stream, then those ``where`` selects (as for a file)."""
    stream = synthetic.generate(spec["shift"], int(spec["n"]), int(spec.get("seed", 0)), spec.get("split", "test"))
    keep = spec.get("where") or {}
    recs = []
    for rec in stream:
        try:
            selected = all(str(_field(rec, k)) == str(v) for k, v in keep.items())
        except KeyError as e:
            raise DataError(
                f"synthetic {spec['shift']!r} stream: `where` names {e.args[0]!r}, which its records do not have "
                "(they have premise, hypothesis, label and meta.shift, meta.kind, meta.split, meta.idx)"
            ) from None
        if selected:
            recs.append(rec)
        else:
            _count(dropped, "where")
    prov = {
        "source": "synthetic",
        "shift": spec["shift"],
        "n": int(spec["n"]),
        "seed": int(spec.get("seed", 0)),
        "split": spec.get("split", "test"),
        "fingerprint": "synthetic:" + sha256_json(recs)[:16],
        "n_rows": len(stream),
    }
    if keep:
        prov["where"] = keep
    return recs, prov


def file_format(path: str | Path, declared: str | None = None) -> str:
    """A local file's format: the entry's ``format``, else its name (past a compression suffix)."""
    fmt = declared or table_files.suffix_format(path, table_files.DATASET_SUFFIXES)
    if fmt not in FORMATS:
        raise DataError(
            f"{path}: unknown format {fmt or format_suffix(path).lstrip('.')!r}; name the file .jsonl, .csv, .tsv or "
            ".parquet (compressed: .jsonl.gz, ...) or set `format:` on the dataset entry"
        )
    return fmt


def _read_table(path: Path, fmt: str, encoding: str | None = None) -> list[dict]:
    """Rows of a local file, each with ``_line``: its line (text formats) or row number (parquet)."""
    if fmt == "parquet":
        return table_files.parquet_rows(path)
    if fmt == "jsonl":
        rows = read_jsonl(path, encoding, ENCODING_FIX)
        if not rows:
            raise DataError(f"{path}: the file has no records (it is empty or holds only blank lines)")
        return rows
    return table_files.delimited_rows(path, read_text(path, encoding, ENCODING_FIX), fmt, FORMAT_FIX)


def _field(row: dict, dotted: str):
    """``row[a][b]`` for ``"a.b"``; KeyError names the whole path."""
    cur = row
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(dotted)
        cur = cur[part]
    return cur


def _plain(v):
    """A value as JSON holds it; bytes, dates and other objects (parquet and hub columns) become text."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "backslashreplace").decode("utf-8")  # an unpaired surrogate, escaped
    if hasattr(v, "item") and not isinstance(v, (bytes, bytearray)):  # numpy scalars
        return _plain(v.item())
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "backslashreplace")
    return str(v)


def _is_empty(v) -> bool:
    """No text: null, NaN, or only white space."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def rows_to_records(rows: list[dict], spec: dict, where: str, dropped: dict) -> list[dict]:
    """Source rows -> records through the entry's ``fields`` and ``where`` filter."""
    fields = {**DEFAULT_FIELDS, **(spec.get("fields") or {})}
    keep = spec.get("where") or {}
    recs = []
    for row in rows:
        line = row.pop("_line", None)
        loc = f"{where}:{line}" if line is not None else where
        try:
            if any(str(_field(row, k)) != str(v) for k, v in keep.items()):
                _count(dropped, "where")
                continue
            rec = {k: _field(row, src) for k, src in fields.items()}
        except KeyError as e:
            raise DataError(f"{loc}: missing field {e.args[0]!r} (fields: {fields}, where: {keep})") from None
        if _is_empty(rec["premise"]) or _is_empty(rec["hypothesis"]):
            _count(dropped, "empty_text")
            continue
        for k in ("premise", "hypothesis"):
            if not isinstance(rec[k], str):
                raise DataError(f"{loc}: field {fields[k]!r} ({k}) is not text: {rec[k]!r}")
            try:
                rec[k].encode("utf-8")
            except UnicodeEncodeError as e:  # "\ud83d" in JSON: half of an emoji, cut
                raise DataError(
                    f"{loc}: field {fields[k]!r} ({k}) holds an unpaired UTF-16 surrogate "
                    f"({rec[k][e.start]!r}): the text is damaged; repair or remove the row"
                ) from None
        meta = dict(row["meta"]) if isinstance(row.get("meta"), dict) else {}
        meta |= {k: row[k] for k in spec.get("meta_fields") or [] if k in row}
        rec["meta"] = _plain(dict(meta, line=line))
        recs.append(rec)
    return recs


def _load_local(spec: dict, base: Path, dropped: dict) -> tuple[list[dict], dict]:
    path = base / spec["path"]  # (an absolute path stays as it is)
    fmt = file_format(path, spec.get("format"))
    rows = _read_table(path, fmt, spec.get("encoding"))
    n_rows = len(rows)
    recs = rows_to_records(rows, spec, str(path), dropped)
    stat = stat_key(path)  # before hashing: a write during the hash changes the ctime, so it is hashed again
    prov = {
        "source": "local",
        "path": str(path),
        "format": fmt,
        "fingerprint": "sha256:" + sha256_file(path),
        "source_stat": stat,
        "n_rows": n_rows,
    }
    if spec.get("encoding"):
        prov["encoding"] = spec["encoding"]
    return recs, prov


def _load_hub(spec: dict, base: Path, dropped: dict) -> tuple[list[dict], dict]:
    import datasets  # imported here: planning and local data never need it

    kwargs = hub_load_kwargs(spec)
    where = f"hub {kwargs['path']}@{kwargs['revision']} ({kwargs['name'] or 'default'}/{kwargs['split']})"
    call, commit = pinned_dataset(kwargs)  # under a hub lock (oodcorr prefetch): the locked commit
    try:
        ds = datasets.load_dataset(**call)
    except Exception as e:  # offline, unknown revision, gated...: say which entry and how to go local
        hint = "Without hub access, point the entry at a local file (source: local, path: ...) or run oodcorr prefetch"
        if commit:
            hint = "The lock pins it: run oodcorr prefetch again, with HF_HOME as for the jobs"
        raise DataError(f"{where}: could not load ({type(e).__name__}: {e}). {hint}") from None
    if commit:
        check_loaded_dataset(ds, commit, where)
    rows = [dict(r, _line=i + 1) for i, r in enumerate(ds)]
    recs = rows_to_records(rows, spec, where, dropped)
    prov = {
        "source": "hub",
        "hub": kwargs,
        "n_rows": len(rows),
        "fingerprint": f"hub:{kwargs['path']}@{commit or kwargs['revision']}:{kwargs['name']}/{kwargs['split']}",
    }
    if commit:
        prov["commit"] = commit
    return recs, prov


def map_labels(recs: list[dict], label_map: dict | None, mode: dict, where: str, dropped: dict) -> list[dict]:
    """Raw label -> dataset label (``label_map``) -> experiment label (the label mode's ``map``)."""
    label_map = {str(k): v for k, v in (label_map or {}).items()}
    mode_map = mode.get("map") or {}
    allowed = list(mode["labels"]) + list(mode.get("coarse") or {})
    out = []
    for r in recs:
        raw = "" if _is_empty(r["label"]) else str(r["label"]).strip()
        if raw in label_map and label_map[raw] is None:
            _count(dropped, "label_map", raw)  # the entry says: no usable gold label
            continue
        lab = label_map.get(raw, raw)
        if mode_map.get(lab, lab) is None:
            _count(dropped, "label_mode", lab)  # the label mode leaves this class out
            continue
        lab = mode_map.get(lab, lab)
        if lab not in allowed:
            line = r.get("meta", {}).get("line")
            loc = f"{where}:{line}" if line else where
            if raw == "":
                raise DataError(
                    f"{loc}: the label is empty; to skip rows without a label, add `'': null` to the "
                    "dataset's `label_map`"
                )
            raise DataError(
                f"{loc}: unknown label {raw!r}; label mode {mode.get('name', '?')!r} expects one of "
                f"{allowed} (add a `label_map` entry for {raw!r} to the dataset's registry entry)"
            )
        out.append(dict(r, label=lab))
    return out


def duplicates(recs: list[dict]) -> dict:
    """Exact duplicates (same premise, hypothesis and label) and conflicting ones (same text, other label)."""
    seen: dict[tuple, list] = {}
    for r in recs:
        seen.setdefault((r["premise"], r["hypothesis"]), []).append((r["label"], r.get("meta", {}).get("line")))
    exact, exact_lines, conflicts = 0, [], []
    for rows in seen.values():
        lines_of: dict = {}  # label -> its lines
        for lab, line in rows:
            lines_of.setdefault(lab, []).append(line)
        exact += len(rows) - len(lines_of)
        exact_lines += [lines for lines in lines_of.values() if len(lines) > 1]
        if len(lines_of) > 1:
            conflicts.append([line for _, line in rows])
    return {
        "exact": exact,
        "exact_lines": exact_lines[:DUPLICATE_EXAMPLES],
        "conflicting": len(conflicts),
        "conflicting_rows": sum(map(len, conflicts)),
        "conflicting_lines": conflicts[:DUPLICATE_EXAMPLES],
    }


def stratified_sample(recs: list[dict], n: int, seed: int) -> list[dict]:
    """At most ``n`` records keeping label proportions (largest remainder), seeded."""
    if n >= len(recs):
        return list(recs)
    rng = random.Random(seed)
    by_label: dict[str, list[int]] = {}
    for i, r in enumerate(recs):
        by_label.setdefault(r["label"], []).append(i)
    quotas = {lab: n * len(ix) / len(recs) for lab, ix in by_label.items()}
    take = {lab: int(q) for lab, q in quotas.items()}
    for lab in sorted(quotas, key=lambda k: (-(quotas[k] - take[k]), k))[: n - sum(take.values())]:
        take[lab] += 1
    keep = []
    for lab in sorted(by_label):
        keep += rng.sample(by_label[lab], take[lab])
    return [recs[i] for i in sorted(keep)]


def balanced_sample(recs: list[dict], n: int, labels: list[str], seed: int) -> list[dict]:
    """``n`` training examples, ``n / len(labels)`` per label, drawn with ``seed``, shuffled."""
    stray = sorted({r["label"] for r in recs} - set(labels))
    if stray:
        raise DataError(
            f"the training set has label(s) {stray} that the model does not predict ({labels}); "
            "train on a set whose labels the label mode maps onto these"
        )
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
    dropped: dict = {}
    # the source's loader (planning checks the source)
    load = {"synthetic": _load_synthetic, "local": _load_local, "hub": _load_hub}[spec["source"]]
    recs, prov = load(spec, Path(base), dropped)
    where = prov.get("path", f"dataset {name!r}")
    recs = map_labels(recs, spec.get("label_map"), mode, where, dropped)
    parts = []
    if dropped.get("empty_text"):
        parts.append(f"{dropped['empty_text']} with an empty premise or hypothesis")
    for lab, k in sorted((dropped.get("label_map") or {}).items()):
        parts.append(f"{k} with raw label {lab!r} (mapped to null by the entry's label_map)")
    for lab, k in sorted((dropped.get("label_mode") or {}).items()):
        parts.append(f"{k} labelled {lab!r} (label mode {mode.get('name')!r} leaves it out)")
    described = ", ".join(parts)
    if not recs:
        detail = f": {described}" if described else ""
        if dropped.get("where"):
            detail += f"{'; ' if detail else ': '}{dropped['where']} not selected by `where`"
        raise DataError(f"dataset {name!r}: no examples left after label mapping ({where}){detail}")
    if dropped.get("where"):
        log.info(
            "dataset %r: %d of %d rows are not selected by `where` %s",
            name,
            dropped["where"],
            prov.get("n_rows"),
            spec.get("where"),
        )
    if described:
        n_dropped = sum(v if isinstance(v, int) else sum(v.values()) for k, v in dropped.items() if k != "where")
        log.warning("dataset %r: dropped %d row(s) of %d: %s", name, n_dropped, prov.get("n_rows"), described)
    dups = duplicates(recs)
    warnings = []
    if dropped.get("empty_text"):  # said at the end of the run too: an export that lost a column looks like this
        warnings.append(
            f"dataset {name!r}: {dropped['empty_text']} of {prov.get('n_rows')} row(s) skipped because their premise "
            f"or hypothesis is empty ({where}); the rest is evaluated, and the dataset's meta file counts every drop"
        )
    if dups["exact"]:
        log.warning(
            "dataset %r: %d row(s) repeat an earlier row exactly (same premise, hypothesis and label), "
            "e.g. lines %s; kept, so they weigh more in the accuracy",
            name,
            dups["exact"],
            dups["exact_lines"][:3],
        )
    if dups["conflicting"]:
        msg = (
            f"dataset {name!r} has {dups['conflicting']} premise/hypothesis pair(s) that occur with different "
            f"labels ({dups['conflicting_rows']} rows, e.g. lines {dups['conflicting_lines'][0]}); they are "
            "kept, so no model can get all of them right"
        )
        log.warning("%s", msg)
        warnings.append(msg)
    n_before = len(recs)
    if spec.get("max_examples"):
        recs = stratified_sample(recs, int(spec["max_examples"]), int(spec.get("sample_seed", 0)))
    counts = Counter(r["label"] for r in recs)
    prov.update(
        {
            "name": name,
            "n": len(recs),
            "n_before_cap": n_before,
            "label_mode": mode.get("name"),
            "label_counts": dict(sorted(counts.items())),
            "records_sha256": sha256_json(recs),
            "dropped": dropped,
            "duplicates": dups,
        }
    )
    if len(counts) < 2 and "label" not in (spec.get("where") or {}):  # (a `where` on the label asked for one)
        warnings.insert(
            0, f"dataset {name!r} has a single class ({next(iter(counts))}); accuracy is still defined but says little"
        )
    if warnings:
        prov["warning"] = "; ".join(warnings)
    for i, r in enumerate(recs):
        r["meta"] = dict(r.get("meta") or {}, dataset=name, index=i)
    return recs, prov
