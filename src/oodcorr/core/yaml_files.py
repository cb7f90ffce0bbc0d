"""A YAML file a user gives, loaded after its size checks; bad YAML is a ConfigError naming file, line and column."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .limits import TooLarge, scan_yaml

MAX_YAML_BYTES = 16 * 2**20  # a YAML file oodcorr reads


def load_yaml(path: str | os.PathLike, checked: bool = True) -> Any:
    """A YAML file's content, its size checked first (``checked=False`` skips that for our own schema)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a YAML file")
    try:
        with open(path, "rb") as fh:  # bytes: PyYAML reports a bad encoding as a YAMLError, with its offset
            if checked:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_YAML_BYTES:
                    raise TooLarge(
                        f"{path}: is {size / 2**20:.1f} MiB, more than the {MAX_YAML_BYTES // 2**20} MiB that oodcorr "
                        "reads in one YAML file; is it the file you meant?"
                    )
                scan_yaml(fh, path)
                fh.seek(0)
            return yaml.safe_load(fh)
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
    with contextlib.suppress(OSError):
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        if 0 <= mark.line < len(text):
            out += f"\n    {text[mark.line]}\n    {' ' * mark.column}^"
    return out
