"""File helpers: atomic writes, reading what people give (compression, encodings, JSON), hashes.

Every result file is written through :func:`atomic_path` (a temporary file beside it, then a
rename), so a killed job never leaves a truncated file behind. Every text file a user gives goes
through :func:`read_bytes` and :func:`_decode_text`: compression is known by its first bytes, a
byte-order mark decides the encoding, any other encoding must be declared, and a file that is none
of these is refused naming its line and byte and the setting that fixes it.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import hashlib
import io
import json
import lzma
import os
import stat
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, DataError, ResultError, WriteFailed
from .filesystems import DISK_FULL_ERRNOS, check_room, write_errno, write_failed
from .limits import load_yaml_checked


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, size: int | None = None, what: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success, remove it on any
    exception. A write the file system stops (:func:`~oodcorr.core.filesystems.write_errno`) becomes a
    :class:`~oodcorr.core.errors.WriteFailed` naming the file and what to do; with ``size`` the room is
    checked first. ``what`` names the file for the message.
    """
    path = Path(path)
    what = what or str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if write_errno(e) is None:
            raise
        raise write_failed(path.parent, what, needed=size, cause=e) from e
    if size is not None:
        check_room(path.parent, size, what)
    fd, tmp = _mkstemp_or_failed(path, what, size)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file private (0600); results get the usual umask-based mode
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp_path, 0o666 & ~current_umask())
        os.replace(tmp_path, path)
    except BaseException as e:
        written = None
        with contextlib.suppress(OSError):
            written = tmp_path.stat().st_size
        failed = isinstance(e, Exception) and not isinstance(e, WriteFailed) and _stopped_this_write(e, tmp_path)
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        if failed:
            raise write_failed(path.parent, what, needed=size, written=written, cause=e) from e
        raise


def _stopped_this_write(e: Exception, tmp: Path) -> bool:
    """Whether ``e`` is the file system stopping this write (not, say, an input that cannot be read)."""
    code = write_errno(e, tmp.parent)
    if code is None:
        return False
    if code in DISK_FULL_ERRNOS:
        return True
    named = [getattr(x, "filename", None) for x in (e, e.__cause__, e.__context__) if isinstance(x, OSError)]
    return not any(n and Path(n).parent not in (tmp.parent, tmp.parent.resolve()) for n in named)


def _mkstemp_or_failed(path: Path, what: str, size: int | None):
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if write_errno(e) is None:  # no room for an inode (ENOSPC), read-only, another user's folder
            raise
        raise write_failed(path.parent, what, needed=size, cause=e) from e


def current_umask() -> int:
    """The process's umask (read by setting it and back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(folder: str | os.PathLike) -> None:
    """Give every regular file under ``folder`` the mode the umask gives a new file: safetensors leaves
    ``model.safetensors`` at 0600, which a colleague on a shared cluster could not read. Call it before
    hashing (a chmod changes the ctime :func:`stat_key` records).
    """
    want = 0o666 & ~current_umask()
    for f in sorted(Path(folder).rglob("*")):
        st = f.lstat()
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != want:
            os.chmod(f, want)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    data = text.encode("utf-8")
    with atomic_path(path, size=len(data)) as tmp:
        tmp.write_bytes(data)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=json_default) + "\n")


def json_default(o: Any) -> Any:
    # numpy scalars and paths appear in provenance dicts
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> int:
    n = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
                n += 1
    return n


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


def read_jsonl(
    path: str | os.PathLike, encoding: str | None = None, fix: str = "set `encoding: {encoding}` on the dataset entry"
) -> list[dict]:
    """A JSONL file's records (compressed or not: :func:`read_text`), each with ``_line``; a bad line is
    a DataError naming file and line.
    """
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
    """A JSON file the workflow wrote; missing or damaged is a :class:`ResultError` naming it, ``what``
    it is and ``fix``.
    """
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


def _line_of(raw: bytes, pos: int, codec: str) -> int:
    return raw[:pos].decode(codec, errors="replace").count("\n") + 1


def _suggest_encoding(raw: bytes) -> str:
    """A likely 8-bit encoding for bytes that are not UTF-8: cp1252 when bytes 0x80-0x9f occur."""
    if any(0x80 <= b <= 0x9F for b in raw):
        try:
            raw.decode("cp1252")
            return "cp1252"
        except UnicodeDecodeError:
            pass
    return "latin-1"


def _utf16_without_bom(raw: bytes) -> str | None:
    """``utf-16-le``/``-be`` when NUL bytes fill one byte of most pairs."""
    head = raw[:4096]
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if max(even, odd) < len(head) // 4:
        return None
    return "utf-16-be" if even > odd else "utf-16-le"


def _utf16_sentence(path: Path, utf16: str, fix: str) -> str:
    return (
        f"{path}: looks like UTF-16 without a byte-order mark (NUL bytes in every other "
        f"position); {fix.format(encoding=utf16)}"
    )


def _decode_text(
    raw: bytes,
    path: str | os.PathLike,
    encoding: str | None = None,
    fix: str = "set `encoding: {encoding}` on the dataset entry",
) -> str:
    """Bytes -> text: the declared ``encoding``, else the byte-order mark's, else strict UTF-8; text
    not valid in it is refused naming line and byte. ``fix``: how a user declares one (``{encoding}``).
    """
    path = Path(path)
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
        line, byte = _line_of(raw, e.start, codec), raw[e.start]
        if encoding or bom:
            raise DataError(
                f"{path}:{line}: not valid {encoding or codec} at byte {e.start} (0x{byte:02x}); "
                "the file is damaged or in another encoding"
            ) from None
        utf16 = _utf16_without_bom(raw)
        if utf16:
            raise DataError(_utf16_sentence(path, utf16, fix)) from None
        raise DataError(
            f"{path}:{line}: not UTF-8 (byte 0x{byte:02x} at offset {e.start}); if the file is in "
            f"another encoding, {fix.format(encoding=_suggest_encoding(raw))}"
        ) from None
    if codec.startswith("utf"):  # a mark the codec kept (utf-8, utf-16-le, ... declared)
        text = text.removeprefix("\ufeff")
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        utf16 = _utf16_without_bom(raw)
        if utf16:
            raise DataError(_utf16_sentence(path, utf16, fix))
        raise DataError(f"{path}:{line}: contains a NUL character, which text never holds; is it a text file?")
    return text


def read_text(
    path: str | os.PathLike, encoding: str | None = None, fix: str = "set `encoding: {encoding}` on the dataset entry"
) -> str:
    """:func:`read_bytes` then :func:`_decode_text`."""
    return _decode_text(read_bytes(path), path, encoding, fix)


def delimiter_mismatch(path: str | os.PathLike, text: str, sep: str, fix: str | None = None) -> str | None:
    """A sentence when a ``.csv``'s header holds tabs and no comma (or a ``.tsv``'s commas and no
    tab); else None. ``fix``: another way out than renaming (``{fmt}``: the format it looks like).
    """
    first = next(iter(text.splitlines()), "")
    other, name, want = ("\t", "tab", ".tsv") if sep == "," else (",", "comma", ".csv")
    if sep not in first and other in first and len(first.split(other)) > 1:
        return (
            f"{path}:1: the header holds {name}s and no {'comma' if sep == ',' else 'tab'}, so the file looks "
            f"{name}-separated, but its name says otherwise; name it {want} (compressed: {want}.gz)"
            + (f", or {fix.format(fmt=want[1:])}" if fix else "")
        )
    return None


def load_yaml(path: str | os.PathLike, checked: bool = True) -> Any:
    """A YAML file's content; missing or bad YAML is a ConfigError naming file, line and column. Its
    size is checked first (:mod:`oodcorr.core.limits`); ``checked=False`` skips that for our own schema.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a YAML file")
    try:
        if not checked:
            with open(path, "rb") as fh:  # bytes: PyYAML reports a bad encoding as a YAMLError, with its offset
                return yaml.safe_load(fh)
        return load_yaml_checked(path)
    except yaml.YAMLError as e:
        raise ConfigError(_describe_yaml_error(path, e)) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None


def _describe_yaml_error(path: str | os.PathLike, e: Exception) -> str:
    """A YAML parse error as ``file:line:column: not valid YAML: what``, with the line and a caret."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None:
        if hasattr(e, "position") and hasattr(e, "reason"):  # yaml.reader.ReaderError: not UTF-8/16
            char = getattr(e, "character", None)
            what = f"byte 0x{char:02x}" if isinstance(char, int) else repr(char)
            return (
                f"{path}: not valid YAML: {e.reason} ({what} at offset {e.position}); YAML files must be "
                "UTF-8 (or UTF-16 with a byte-order mark)"
            )
        return f"{path}: not valid YAML: {e}"
    line, col = mark.line + 1, mark.column + 1
    out = f"{path}:{line}:{col}: not valid YAML: {problem}"
    ctx, ctx_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if ctx:
        out += f" ({ctx}" + (f" that starts at line {ctx_mark.line + 1}" if ctx_mark is not None else "") + ")"
    if "'\\t'" in str(problem):
        out += "; indent with spaces, never tabs"
    elif "<block end>" in str(problem) or "mapping values are not allowed" in str(problem):
        out += "; check this line's indentation, and quote a value that holds ': '"
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        if 0 <= mark.line < len(text):
            out += f"\n    {text[mark.line]}\n    {' ' * mark.column}^"
    except OSError:
        pass
    return out


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, hex."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_files(named: Iterable[tuple[str, str | os.PathLike]]) -> str:
    """The sha256 over several files in order: each one's name, a NUL, then its bytes."""
    h = hashlib.sha256()
    for name, path in named:
        h.update(name.encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def short_tag(text: str, n: int) -> str:
    """The first ``n`` hex digits of the sha256 of ``text``, for a file or folder name."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def stat_key(path: str | os.PathLike) -> list[int]:
    """Size, mtime, ctime and inode: any write changes the ctime, so an edit that restores the mtime
    still changes the key.
    """
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=json_default).encode()).hexdigest()


def canonical(obj: Any) -> Any:
    """A copy with every mapping's keys sorted, so reordering YAML keys changes no params."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(x) for x in obj]
    return obj
