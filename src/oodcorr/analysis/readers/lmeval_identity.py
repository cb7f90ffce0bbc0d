"""Which model, run and step an lm-evaluation-harness results file holds (:mod:`.lmeval`): from its
``model_args`` (:func:`parse_model_args`, :func:`identity`) or from a path pattern the user gives
(:func:`compile_pattern`)."""

from __future__ import annotations

import re

from ...core.errors import DataError

PLACEHOLDERS = ("model", "run", "step")
STEP_REVISION = re.compile(r"^(?:global[_-]?)?step[_-]?(\d+)$|^(\d+)$", re.IGNORECASE)
STEP_PATH = re.compile(r"^(?:checkpoint|(?:global[_-]?)?step)[_-]?(\d+)$", re.IGNORECASE)


# ---- the path pattern ----
def compile_pattern(pattern: str) -> re.Pattern:
    """A path pattern -> a regular expression matched against a file's path below the folder
    (``/``-separated, whole path)."""
    if not pattern or pattern.startswith("/"):
        raise DataError(
            f"--path-pattern {pattern!r}: give a path relative to the folder, e.g. '{{model}}/*_step{{step}}.json'"
        )
    out, seen, i = [], set(), 0
    while i < len(pattern):
        c = pattern[i]
        if c == "{":
            j = pattern.find("}", i)
            name = pattern[i + 1 : j] if j > 0 else pattern[i + 1 :]
            if j < 0 or name not in PLACEHOLDERS:
                raise DataError(
                    f"--path-pattern {pattern!r}: {{{name}}} is not a placeholder; the placeholders are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
            if name in seen:
                raise DataError(f"--path-pattern {pattern!r}: {{{name}}} occurs twice; name each once")
            seen.add(name)
            out.append(f"(?P<{name}>[0-9]+)" if name == "step" else f"(?P<{name}>[^/]+?)")
            i = j + 1
        elif pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif c == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def parse_model_args(v) -> dict[str, str]:
    """``config.model_args`` -> mapping: a ``key=value,key=value`` string or a mapping already."""
    if v is None:
        return {}
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    out = {}
    for part in str(v).split(","):
        if "=" in part:
            k, x = (y.strip() for y in part.split("=", 1))
            if k in out and out[k] != x:
                raise ValueError(f"{k!r} is given twice ({k}={out[k]}, then {k}={x})")
            out[k] = x
    return out


def identity(args: dict[str, str], config: dict) -> tuple[str | None, int | None, str]:
    """(model, step, how the step was found) from ``model_args`` (and ``config.model_revision``)."""
    adapter = args.get("peft") or args.get("delta")
    model = adapter or args.get("pretrained") or args.get("model") or args.get("path") or None
    revision = None if adapter else args.get("revision") or (config or {}).get("model_revision")
    if revision and str(revision) != "main":
        m = STEP_REVISION.match(str(revision).strip())
        return model, (int(m.group(1) or m.group(2)) if m else None), f"revision {revision!r}"
    if model:
        tail = model.rstrip("/").rsplit("/", 1)
        m = STEP_PATH.match(tail[-1])
        if m and len(tail) == 2:
            return tail[0], int(m.group(1)), f"{'peft' if adapter else 'pretrained'} {model!r}"
    return model, None, "no revision" if not revision else f"revision {revision!r}"
