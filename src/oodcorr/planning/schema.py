"""The config's schema (``config/schema.yaml``) applied: every violation as one line ``file:line: key: what is
wrong`` (Snakemake's own validator buries the key under the dumped schema), then the defaults filled in."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from ..core.defaults import ANALYSIS, filled
from ..core.errors import ConfigError
from ..core.limits import key_path
from ..core.yaml_files import load_yaml

_YAML_TYPES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def key_line(files: Iterable[Path], parts: list) -> str | None:
    """``file:line`` of the key (or list item) at ``parts``, or as far down it as there is, in the last of
    ``files`` that holds it; None if none does."""
    for path in reversed(list(files)):
        try:
            node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except (OSError, yaml.YAMLError):
            continue
        line = None
        for p in parts:
            if isinstance(node, yaml.MappingNode):
                hit = next(((k, v) for k, v in node.value if k.value == p), None)
                if hit is None:
                    break
                line, node = hit[0].start_mark.line + 1, hit[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(p, int) and p < len(node.value):
                node = node.value[p]
                line = node.start_mark.line + 1
            else:
                break
        if line is not None:
            return f"{path}:{line}"
    return None


def _type_name(value: Any) -> str:
    for name, t in (
        ("true/false", bool),
        ("an integer", int),
        ("a number", float),
        ("a string", str),
        ("a list", list),
        ("a mapping", dict),
    ):
        if isinstance(value, t):
            return name
    return "null" if value is None else type(value).__name__


# exponent notation YAML 1.1 reads as a string (its floats need a dot and a signed exponent: 1.0e-3)
_SCIENTIFIC = re.compile(r"^\s*([-+]?)(\d+(?:\.\d*)?|\.\d+)[eE]([-+]?)(\d+)\s*$")


def _yaml11_number_hint(value: Any, integer: bool = False) -> str:
    """``1e-3`` read as a string: how to write it so YAML reads a number (``1e3`` -> ``1000`` for an integer)."""
    m = _SCIENTIFIC.match(value) if isinstance(value, str) else None
    if not m:
        return ""
    sign, mantissa, esign, digits = m.groups()
    if integer:
        number = float(value)
        if not number.is_integer() or abs(number) > 1e18:
            return ""
        fixed = str(int(number))
    else:
        if "." not in mantissa:
            mantissa += ".0"
        elif mantissa.endswith("."):
            mantissa += "0"
        fixed = f"{sign}{mantissa}e{esign or '+'}{digits}"
    return (
        f"; YAML reads {value.strip()} as text (its numbers in exponent notation need a dot and a signed "
        f"exponent): write {fixed}"
    )


def _misspelt(err) -> dict[str, str | None]:
    """Each unknown key of an ``additionalProperties`` error -> the allowed key it likely misspells, or None."""
    allowed = sorted(err.schema.get("properties", {}))
    unknown = sorted(set(err.instance) - set(allowed))
    return {k: next(iter(difflib.get_close_matches(k, allowed, n=1)), None) for k in unknown}


def _describe(err, config, suggested: frozenset = frozenset()) -> list[tuple[list, str]]:
    """(path parts, message) per key of one jsonschema error; a required key that an unknown key's
    message already suggests (``suggested``) is not said again as missing."""
    parts = list(err.absolute_path)
    where = key_path(parts, config)
    kind, inst, val = err.validator, err.instance, err.validator_value
    if kind == "additionalProperties" and isinstance(inst, dict):
        allowed = ", ".join(sorted(err.schema.get("properties", {})))
        return [
            (
                parts + [k],
                f"{key_path(parts + [k], config)}: unknown key; {f'did you mean {n!r}? ' if n else ''}"
                f"allowed here: {allowed}",
            )
            for k, n in _misspelt(err).items()
        ]
    if kind == "required":
        missing = [k for k in val if k not in inst and (tuple(parts), k) not in suggested]
        said = "required key is missing (it has no default)"
        return [(parts, f"{key_path(parts + [k], config)}: {said}") for k in missing]
    if kind == "type":
        types = [val] if isinstance(val, str) else list(val)
        want = " or ".join(_YAML_TYPES.get(t, t) for t in types)
        hint = _yaml11_number_hint(inst, integer="number" not in types) if {"number", "integer"} & set(types) else ""
        return [(parts, f"{where}: must be {want}, got {_type_name(inst)} {inst!r}{hint}")]
    if kind == "minItems":
        what = "must not be empty" if val == 1 else f"needs at least {val} entries"
        return [(parts, f"{where}: {what} (got {len(inst)})")]
    if kind == "enum":
        return [(parts, f"{where}: {inst!r} is not one of {', '.join(map(repr, val))}")]
    if kind == "pattern":
        why = (
            "it becomes a path component"
            if val.startswith("^[A-Za-z0-9][")
            else err.schema.get("description") or "the characters allowed here"
        )
        return [(parts, f"{where}: {inst!r} must match {val} ({why})")]
    if kind == "uniqueItems" and isinstance(inst, list):
        twice = next(v for i, v in enumerate(inst) if v in inst[:i])
        return [(parts, f"{where}: {twice!r} is listed more than once ({inst}); each value counts once: list it once")]
    if kind == "not":
        return [(parts, f"{where}: {inst!r} is not allowed ({err.schema.get('description') or err.message})")]
    if kind in ("oneOf", "anyOf"):
        forms = " or ".join("{" + ", ".join(alt.get("required", [])) + ": ...}" for alt in val)
        inner = [m for e in (err.context or []) for _, m in _describe(e, config)]
        detail = f" ({inner[0]})" if inner else ""
        return [(parts, f"{where}: must take one of the forms {forms}{detail}")]
    return [(parts, f"{where}: {err.message}")]


def check_config(config: dict, schema_path: str | Path, sources: Iterable[str | Path] = ()) -> None:
    """Raise ConfigError listing every violation, each as ``file:line: key: problem`` (the last of
    ``sources`` that holds the key gives its line)."""
    import jsonschema  # only where a config is checked: job processes import this module, never call it

    validator = jsonschema.Draft202012Validator(load_yaml(schema_path, checked=False))  # the workflow's own
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    # (object path, allowed key) for each unknown key that is a likely misspelling of it
    suggested = frozenset(
        (tuple(e.absolute_path), n)
        for e in errors
        if e.validator == "additionalProperties" and isinstance(e.instance, dict)
        for n in _misspelt(e).values()
        if n
    )
    problems = [d for e in errors for d in _describe(e, config, suggested)]
    if not problems:
        return
    files = [Path(s) for s in sources]
    lines = []
    for parts, msg in problems:
        loc = key_line(files, parts)
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")
    head = f"the config does not match {Path(schema_path).name} ({len(lines)} problem{'s' * (len(lines) > 1)}):"
    raise ConfigError("\n".join([head, *dict.fromkeys(lines)]))


def read_config(configfile: str | Path) -> dict:
    """A config file's mapping as written: nothing checked, nothing filled in."""
    configfile = Path(configfile)
    config = load_yaml(configfile)
    if not isinstance(config, dict):
        raise ConfigError(f"{configfile}: a config must be a mapping of keys to values")
    return config


def fill_defaults(config: dict, schema_path: str | Path) -> None:
    """The schema's defaults (by Snakemake's validator), then the analysis section's, written into ``config``."""
    from snakemake.utils import validate  # snakemake: only where a config is loaded, not for the job modules

    validate(config, str(schema_path), set_default=True)
    config["analysis"] = filled(config.get("analysis"), ANALYSIS)


_SCHEMAS: dict[str, dict] = {}


def check_entry(entry: Any, definition: str, where: str, basedir: str | Path) -> None:
    """A dataset registry entry or a label mode against ``$defs/<definition>``; the ConfigError names ``where``."""
    import jsonschema  # only where a config is checked: job processes import this module, never call it

    key = str(basedir)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = load_yaml(Path(basedir) / "config" / "schema.yaml", checked=False)  # the workflow's own
    schema = _SCHEMAS[key]
    sub = {"$defs": schema["$defs"], **schema["$defs"][definition]}
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(sub).iter_errors(entry))
    if err is not None:
        path = ".".join(str(x) for x in err.absolute_path)
        raise ConfigError(f"{where}{'.' + path if path else ''}: {err.message}")
