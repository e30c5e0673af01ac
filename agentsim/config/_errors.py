"""Configuration plumbing: environment-variable overrides and the translation of pydantic's
errors into one ``ConfigError`` that names the field path, the problem and the fix.

Generic over the root model, so ``config.py`` keeps only the schema of an experiment.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from agentsim.errors import ConfigError

__all__ = ["StrictModel", "apply_overrides", "fail", "to_config_error"]


class StrictModel(BaseModel):
    """The base of every config section: unknown keys fail loudly, parsed values are frozen,
    and floats are finite (``.inf`` would overflow timers and prices)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def fail(problem: str, fix: str, *, field: str = "") -> PydanticCustomError:
    """A validation error carrying our own wording; ``field`` extends the error location."""
    return PydanticCustomError(
        "agentsim", "{problem}", {"problem": problem, "fix": fix, "field": field}
    )


def _shape(ann: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model inside a field annotation, and whether it is a sequence of them."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann, False
    origin = getattr(ann, "__origin__", None)
    args = [a for a in get_args(ann) if a is not type(None) and a is not Ellipsis]
    if origin in (tuple, list) and args:
        return _shape(args[0])[0], True
    if origin is Union or isinstance(ann, types.UnionType):
        for arg in args:
            found = _shape(arg)
            if found[0] is not None:
                return found
    return None, False


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    cls: type[BaseModel] | None = root
    for seg in loc:
        if isinstance(seg, int):
            continue
        field = cls.model_fields.get(seg) if cls else None
        if field is None:
            return None
        cls = _shape(field.annotation)[0]
    return cls


def _override_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def apply_overrides(
    root: type[BaseModel],
    data: dict[str, Any],
    environ: Mapping[str, str],
    *,
    prefix: str,
    ignored: frozenset[str],
    free_form: type[BaseModel],
) -> dict[str, str]:
    """Write ``<PREFIX>A__B=v`` into ``data["a"]["b"]``; return dotted path -> variable.

    Every variable with the prefix must name a field (the ``ignored`` ones excepted): a typo
    such as ``AGENTSIM_MODLE__BACKEND`` is an error naming the close match, never a silent
    no-op. The options of a ``free_form`` section (environment modules) are not checked here."""
    applied: dict[str, str] = {}
    for var in sorted(environ):
        if not var.startswith(prefix) or var in ignored:
            continue
        segments = var[len(prefix) :].lower().split("__")
        if segments[0] not in root.model_fields:
            raise _unknown_variable(var, segments, root, prefix)
        where = _Where(root=root, prefix=prefix, free_form=free_form, var=var)
        _set_override(data, segments, _override_value(environ[var]), where)
        applied[".".join(segments)] = var
    return applied


def _unknown_variable(
    var: str, segments: list[str], root: type[BaseModel], prefix: str
) -> ConfigError:
    fields = list(root.model_fields)
    close = difflib.get_close_matches(segments[0], fields, n=1)
    if close:
        meant = prefix + "__".join([close[0], *segments[1:]]).upper()
        fix = f"did you mean {meant}? Rename or unset {var}"
    else:
        fix = f"unset {var}, or rename it to name a field (top-level fields: {', '.join(fields)})"
    return ConfigError(
        var,
        f"environment variable {var} names no config field ({prefix}* variables override "
        "fields of the experiment)",
        f"{fix}; keep your own variables, such as API keys, under another prefix",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Where:
    root: type[BaseModel]
    prefix: str
    free_form: type[BaseModel]
    var: str


def _set_override(data: dict[str, Any], segments: list[str], value: Any, where: _Where) -> None:
    var = where.var
    node: Any = data
    cls: type[BaseModel] | None = where.root  # the section `node` holds; None: a list
    item_cls: type[BaseModel] | None = None
    for depth, seg in enumerate(segments):
        here = ".".join(segments[:depth]) or "top level"
        last = depth == len(segments) - 1
        if cls is None:
            if not (isinstance(node, list) and seg.isdigit() and int(seg) < len(node)):
                size = len(node) if isinstance(node, list) else 0
                raise ConfigError(
                    var,
                    f"'{here}' has {size} item(s), so {seg!r} is not an index of it",
                    f"use the index of an existing item (0 to {max(size - 1, 0)})",
                )
            if last:
                node[int(seg)] = value
                return
            node, cls = node[int(seg)], item_cls
            continue
        if not isinstance(node, dict):
            raise ConfigError(var, f"'{here}' is not a mapping", f"fix the file or unset {var}")
        field = cls.model_fields.get(seg)
        # Environment module options are free-form: the module validates them.
        if field is None and not (cls is where.free_form and last):
            close = difflib.get_close_matches(seg, list(cls.model_fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                var,
                f"environment variable {var} overrides unknown field {seg!r} "
                f"(allowed at {here}: {', '.join(cls.model_fields)})",
                f"{hint}rename or unset {var}; double underscores separate nested fields",
            )
        if last:
            node[seg] = value
            return
        sub, is_seq = _shape(field.annotation) if field else (None, False)
        if sub is None:
            whole = segments[: depth + 1]
            raise ConfigError(
                var,
                f"field '{'.'.join(whole)}' has no sub-fields",
                f"override it as a whole with {where.prefix}{'__'.join(whole).upper()}",
            )
        if is_seq:
            node, cls, item_cls = node.get(seg), None, sub
        else:
            if node.get(seg) is None:
                node[seg] = {}
            node, cls = node[seg], sub


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(root: type[BaseModel], err: Any, hints: Mapping[str, str]) -> tuple[str, str, str]:
    """(dotted field path, problem, fix) of one pydantic error."""
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    kind = err["type"]
    path = ".".join(str(x) for x in loc)
    if kind == "agentsim":
        extra = str(ctx.get("field", ""))
        path = f"{path}.{extra}" if path and extra else path or extra
        return path, str(ctx["problem"]), str(ctx["fix"])
    if kind == "extra_forbidden":
        cls = _model_at(root, loc[:-1])
        allowed = list(cls.model_fields) if cls else []
        name = str(loc[-1])
        close = difflib.get_close_matches(name, allowed, n=1)
        return (
            path,
            f"unknown field {name!r} (allowed: {', '.join(allowed)})",
            f"did you mean {close[0]!r}?" if close else "remove it",
        )
    if kind == "missing":
        return path, "required field is missing", f"add {loc[-1]}: ..."
    if kind == "literal_error":
        choices = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return (
            path,
            f"{_short(err['input'])} is not allowed; must be one of {choices}",
            ("use one of the allowed values"),
        )
    if kind == "string_pattern_mismatch":
        hint = hints.get(str(ctx.get("pattern")), f"match {ctx.get('pattern')}")
        return path, f"{_short(err['input'])} is not a valid value here", hint
    msg = str(err["msg"])
    shown = "" if loc[-1:] == ("api_key_env",) else f" (got {_short(err['input'])})"
    return path, f"{msg[:1].lower()}{msg[1:]}{shown}", "correct the value"


def to_config_error(
    root: type[BaseModel],
    exc: ValidationError,
    *,
    source: str,
    overridden: Mapping[str, str],
    hints: Mapping[str, str],
) -> ConfigError:
    """One ``ConfigError`` for all of pydantic's errors: the first names the field, the
    others are listed in its fix; values that came from environment variables say so."""
    items = []
    for err in exc.errors():
        path, problem, fix = _describe(root, err, hints)
        var = next(
            (v for p, v in overridden.items() if path == p or path.startswith(p + ".")), None
        )
        if var is not None:
            items.append((path, f"{problem} (value from {var})", f"{fix}, or change {var}"))
        else:
            items.append((path, problem, f"{fix} (in {source})"))
    field, problem, fix = items[0]
    if len(items) > 1:
        more = "\n".join(f"  - {p or '(file)'}: {pr}; {fx}" for p, pr, fx in items[1:])
        fix = f"{fix}\n{len(items) - 1} more problem(s):\n{more}"
    return ConfigError(field, problem, fix)
