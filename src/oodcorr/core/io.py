"""Reading the files people give: compression known by its first bytes, a byte-order mark decides
the encoding (else the one declared, else UTF-8), JSON with a key named twice refused.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import io
import json
import lzma
import os
import zlib
from pathlib import Path
from typing import Any

from .errors import DataError, ResultError

_FIX = "set `encoding: {encoding}` on the dataset entry"  # how a user declares an encoding


class DuplicateKey(ValueError):
    """A JSON object that names one key twice: which value is meant cannot be told."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"key {key[:80]!r} appears twice in one object, so which value is meant cannot be told")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, but a key named twice in one object is a :class:`DuplicateKey`."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def json_or_none(path: str | os.PathLike) -> Any:
    """A JSON file's content; None where it is missing or not JSON (a record read where one may be absent)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_jsonl(path: str | os.PathLike, encoding: str | None = None, fix: str = _FIX) -> list[dict]:
    """A JSONL file's records, each with ``_line``; a bad line is a DataError naming it."""
    path = Path(path)
    text = read_text(path, encoding, fix)
    out = []
    # universal newlines: LF, CRLF or CR (a JSON string cannot hold a raw CR or LF)
    for lineno, line in enumerate(io.StringIO(text, newline=None), start=1):
        if not line.strip():
            continue
        try:
            rec = loads_json(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: malformed JSON at column {e.colno} ({e.msg})") from None
        except DuplicateKey as e:
            raise DataError(f"{path}:{lineno}: {e}; keep one of them") from None
        except (ValueError, RecursionError) as e:  # a 5000-digit integer, arrays nested 10^5 deep
            raise DataError(f"{path}:{lineno}: unreadable JSON ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        rec["_line"] = lineno
        out.append(rec)
    return out


def read_json(path: str | os.PathLike, what: str, fix: str) -> Any:
    """A JSON file the workflow wrote; missing or damaged is a :class:`ResultError` naming it, ``what``, ``fix``."""
    path = Path(path)
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultError(f"{path}: {what} is missing; {fix}") from None
    except json.JSONDecodeError as e:
        raise ResultError(
            f"{path}: {what} is unreadable (truncated or damaged: {e.msg} at line {e.lineno}, column {e.colno}); {fix}"
        ) from None
    except (OSError, ValueError, RecursionError) as e:
        raise ResultError(f"{path}: {what} is unreadable ({type(e).__name__}: {str(e)[:120]}); {fix}") from None


# ---- reading what people have: compression and encodings ----------------------------------

COMPRESSION_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))
COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bzip2", ".xz": "xz"}
_DECOMPRESS = {"gzip": gzip.decompress, "bzip2": bz2.decompress, "xz": lzma.decompress}
# longest first: a UTF-32 LE mark starts with the UTF-16 LE one
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def format_suffix(path: str | os.PathLike) -> str:
    """The suffix that names a file's format, past a compression suffix: ``a.csv.gz`` -> ``.csv``."""
    p = Path(path)
    if p.suffix.lower() in COMPRESSION_SUFFIXES:
        p = p.with_suffix("")
    return p.suffix.lower()


def read_bytes(path: str | os.PathLike) -> bytes:
    """A file's bytes, decompressed when its first bytes say gzip, bzip2 or xz (whatever its name)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e})") from None
    kind = next((k for magic, k in COMPRESSION_MAGIC if raw.startswith(magic)), None)
    if kind is None:
        return raw
    try:
        return _DECOMPRESS[kind](raw)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
        raise DataError(
            f"{path}: a damaged or truncated {kind} file ({e}); compress it again, or give the file uncompressed"
        ) from None


def _refuse_utf16_without_bom(raw: bytes, path: Path, fix: str) -> None:
    """A :class:`DataError` when NUL bytes fill one byte of most pairs (``utf-16-le``/``-be``)."""
    head = raw[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if max(even, odd) >= len(head) // 4:
        raise DataError(
            f"{path}: looks like UTF-16 without a byte-order mark (NUL bytes in every other position); "
            + fix.format(encoding="utf-16-be" if even > odd else "utf-16-le")
        ) from None


def read_text(path: str | os.PathLike, encoding: str | None = None, fix: str = _FIX) -> str:
    """:func:`read_bytes` decoded: the declared ``encoding``, else the byte-order mark's, else strict UTF-8;
    text not valid in it is refused naming line and byte. ``fix``: how a user declares one (``{encoding}``)."""
    raw, path = read_bytes(path), Path(path)
    bom = next(((m, c) for m, c in BOMS if raw.startswith(m)), None)
    if encoding:
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            raise DataError(f"{path}: unknown encoding {encoding!r} (e.g. utf-8, latin-1, cp1252, utf-16)") from None
        family = bom[1].removesuffix("-sig") if bom else None
        if family and not codec.startswith(family):
            raise DataError(
                f"{path}: starts with a {family.upper()} byte-order mark, but the encoding "
                f"{encoding!r} is declared; remove the declared encoding"
            )
    else:
        codec = bom[1] if bom else "utf-8"
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as e:
        line, byte = raw[: e.start].decode(codec, errors="replace").count("\n") + 1, raw[e.start]
        if encoding or bom:
            raise DataError(
                f"{path}:{line}: not valid {encoding or codec} at byte {e.start} (0x{byte:02x}); "
                "the file is damaged or in another encoding"
            ) from None
        _refuse_utf16_without_bom(raw, path, fix)
        guess = "latin-1"
        if any(0x80 <= b <= 0x9F for b in raw):
            with contextlib.suppress(UnicodeDecodeError):
                raw.decode("cp1252")
                guess = "cp1252"
        raise DataError(
            f"{path}:{line}: not UTF-8 (byte 0x{byte:02x} at offset {e.start}); if the file is in "
            f"another encoding, {fix.format(encoding=guess)}"
        ) from None
    if codec.startswith("utf"):  # a mark the codec kept (utf-8, utf-16-le, ... declared)
        text = text.removeprefix("\ufeff")
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        _refuse_utf16_without_bom(raw, path, fix)
        raise DataError(f"{path}:{line}: contains a NUL character, which text never holds; is it a text file?")
    return text


def delimiter_mismatch(path: str | os.PathLike, text: str, sep: str, fix: str | None = None) -> str | None:
    """A sentence when a ``.csv``'s header holds tabs and no comma (or a ``.tsv``'s commas and no
    tab); else None. ``fix``: another way out than renaming (``{fmt}``: the format it looks like)."""
    first = next(iter(text.splitlines()), "")
    other, name, want = ("\t", "tab", ".tsv") if sep == "," else (",", "comma", ".csv")
    if sep not in first and other in first and len(first.split(other)) > 1:
        return (
            f"{path}:1: the header holds {name}s and no {'comma' if sep == ',' else 'tab'}, so the file looks "
            f"{name}-separated, but its name says otherwise; name it {want} (compressed: {want}.gz)"
            + (f", or {fix.format(fmt=want[1:])}" if fix else "")
        )
    return None
