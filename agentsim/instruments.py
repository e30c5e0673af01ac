"""Typed survey instruments: the forms a survey or interview answer may be asked in
(``answer:`` on the step), the JSON schema a model's answer follows, and reading and
checking an answer.

An answer to ``likert``, ``choice`` and ``number`` is the JSON object ``{"answer": VALUE}``
(a server's structured output needs an object at the top); an answer to ``json`` is the
value its own schema describes. Reading is lenient about the wrapping (a bare value, a code
fence, text around the object) and strict about the value: it is checked against the
schema with ``jsonschema``. A shared leaf: it imports no layer of the package.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

__all__ = [
    "INSTRUMENTS",
    "Instrument",
    "InstrumentError",
    "Reading",
    "instance_of",
    "instrument_of",
]

INSTRUMENTS = ("likert", "choice", "number", "json")
"""The typed answer forms (a step without ``answer:`` asks for free text)."""

_MAX_OPTIONS = 100
_MAX_REASON = 300
_RESPONSE_NAME = re.compile(r"[^A-Za-z0-9_-]")


class InstrumentError(ValueError):
    """An ``answer:`` form that cannot be used: the problem, the fix, and where (a
    sub-path of the form, e.g. ``likert`` or ``number.min``)."""

    def __init__(self, problem: str, fix: str, *, where: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.problem = problem
        self.fix = fix
        self.where = where


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """What an answer's text says: the typed ``value`` when it is valid, else ``None`` and
    the ``reason``."""

    value: Any = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Instrument:
    """One typed answer form. ``schema`` is the JSON schema of the value (for ``json``, the
    user's schema)."""

    kind: str
    schema: Mapping[str, Any] = field(hash=False)

    # -- what the model is asked for -------------------------------------------------------

    @property
    def response_schema(self) -> dict[str, Any]:
        """The JSON schema of the whole answer the model writes."""
        if self.kind == "json":
            return dict(self.schema)
        return {
            "type": "object",
            "properties": {"answer": dict(self.schema)},
            "required": ["answer"],
            "additionalProperties": False,
        }

    def response_format(self, name: str | None = None) -> dict[str, Any]:
        """OpenAI's ``json_schema`` object (``response_format: {"type": "json_schema",
        "json_schema": ...}``), named ``name`` (default ``KIND_answer``). ``strict`` for the
        built-in forms, which keep to the subset strict mode accepts; a ``json`` schema is
        the user's and is sent as written."""
        safe = _RESPONSE_NAME.sub("_", name or f"{self.kind}_answer")[:64] or "answer"
        return {"name": safe, "schema": self.response_schema, "strict": self.kind != "json"}

    def describe(self) -> str:
        """The line added to the question that tells the model the answer's form."""
        s = self.schema
        if self.kind == "json":
            text = json.dumps(self.schema, ensure_ascii=False, sort_keys=True)
            return f"Answer with JSON only: one value that follows this JSON schema: {text}"
        if self.kind == "likert":
            what = f"a whole number from {s['minimum']} to {s['maximum']}"
        elif self.kind == "choice":
            what = "exactly one of " + ", ".join(json.dumps(o) for o in s["enum"])
        else:
            what = "a number" + _bounds_text(s.get("minimum"), s.get("maximum"))
        return f'Answer with JSON only, in the form {{"answer": VALUE}}, where VALUE is {what}.'

    def render(self, value: Any) -> str:
        """The answer text a model gives for ``value``."""
        body = value if self.kind == "json" else {"answer": value}
        return json.dumps(body, ensure_ascii=False, sort_keys=True)

    # -- reading an answer -----------------------------------------------------------------

    def read(self, text: str) -> Reading:
        """The typed value of an answer's text, or why there is none."""
        found, data = _json_in(text)
        if not found:
            bare = self._bare(text)
            if bare is None:
                return Reading(reason=self._why("the answer is not JSON"))
            data = bare
        if self.kind != "json":
            if isinstance(data, Mapping):
                if "answer" not in data:
                    return Reading(reason=self._why('the JSON object has no "answer" key'))
                data = data["answer"]
            if self.kind == "choice" and isinstance(data, str):
                data = self._option(data) or data
        error = jsonschema.exceptions.best_match(_validator(self._schema_key).iter_errors(data))
        if error is not None:
            return Reading(reason=self._why(_error_text(error)))
        if self.kind == "likert":
            return Reading(value=int(data))
        if self.kind == "number":
            return Reading(value=float(data))
        return Reading(value=data)

    def _bare(self, text: str) -> Any:
        """A choice's option or a number written without JSON (a server that does not
        constrain may answer ``yes`` or ``4``), else None."""
        words = text.strip().strip("\"'`*.").strip()
        if self.kind == "choice":
            return self._option(words)
        if self.kind in ("likert", "number"):
            try:
                number = float(words)
            except ValueError:
                return None
            return number if math.isfinite(number) else None
        return None

    def _option(self, text: str) -> str | None:
        folded = text.strip().casefold()
        return next((o for o in self.schema["enum"] if o.casefold() == folded), None)

    def _why(self, problem: str) -> str:
        return f"{self.kind}: {problem}"[:_MAX_REASON]

    @property
    def _schema_key(self) -> str:
        return json.dumps(self.schema, sort_keys=True)


def instrument_of(kind: str, spec: Any) -> Instrument:
    """The instrument an ``answer: {KIND: SPEC}`` form asks for; ``InstrumentError`` naming
    what is wrong with a form that cannot be used."""
    if kind == "likert":
        if not (isinstance(spec, list | tuple) and len(spec) == 2):
            raise InstrumentError(
                f"{spec!r} is not a scale", "write the scale's ends, e.g. [1, 5]", where=kind
            )
        low, high = spec
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in spec):
            raise InstrumentError(
                f"the scale's ends must be whole numbers, got {low!r} and {high!r}",
                "write whole numbers, e.g. [1, 5]",
                where=kind,
            )
        if low >= high:
            raise InstrumentError(
                f"the scale's low end {low} is not below its high end {high}",
                "write [LOW, HIGH] with LOW < HIGH, e.g. [1, 5]",
                where=kind,
            )
        return Instrument(kind=kind, schema={"type": "integer", "minimum": low, "maximum": high})
    if kind == "choice":
        if not isinstance(spec, list | tuple) or not spec:
            raise InstrumentError(
                "the list of options is empty"
                if isinstance(spec, list | tuple)
                else f"{spec!r} is not a list of options",
                "list the options, e.g. [yes, no]",
                where=kind,
            )
        flags = [o for o in spec if isinstance(o, bool)]
        if flags:
            raise InstrumentError(
                f"option {flags[0]!r} is a boolean, not text (YAML reads yes, no, on, off, "
                "true and false written without quotes as booleans)",
                'quote the options, e.g. ["yes", "no"]',
                where=kind,
            )
        if not all(isinstance(o, str) and o.strip() for o in spec):
            raise InstrumentError(
                "every option must be a non-empty string",
                'quote options YAML reads as other types, e.g. ["yes", "no"]',
                where=kind,
            )
        if len(set(spec)) != len(spec) or len(spec) > _MAX_OPTIONS:
            raise InstrumentError(
                "options repeat" if len(spec) <= _MAX_OPTIONS else f"over {_MAX_OPTIONS} options",
                f"list each option once, at most {_MAX_OPTIONS}",
                where=kind,
            )
        return Instrument(kind=kind, schema={"type": "string", "enum": list(spec)})
    if kind == "number":
        if spec is None:
            spec = {}
        if not isinstance(spec, Mapping) or set(spec) - {"min", "max"}:
            raise InstrumentError(
                f"{spec!r} is not a number's bounds",
                "write {min: LOW, max: HIGH} (either optional), or {} for any number",
                where=kind,
            )
        schema: dict[str, Any] = {"type": "number"}
        for key, name in (("min", "minimum"), ("max", "maximum")):
            value = spec.get(key)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise InstrumentError(
                    f"{value!r} is not a number", "write a finite number", where=f"{kind}.{key}"
                )
            schema[name] = value
        if schema.get("minimum", -math.inf) > schema.get("maximum", math.inf):
            raise InstrumentError(
                f"min {schema['minimum']} is above max {schema['maximum']}",
                "write min <= max",
                where=kind,
            )
        return Instrument(kind=kind, schema=schema)
    if kind == "json":
        if not isinstance(spec, Mapping) or not spec:
            raise InstrumentError(
                f"{spec!r} is not a JSON schema object",
                "write a JSON schema, e.g. {type: object, properties: {reason: {type: string}}, "
                "required: [reason]}",
                where=kind,
            )
        try:
            text = json.dumps(spec, sort_keys=True, allow_nan=False)
            _validator(text)
        except (TypeError, ValueError) as exc:
            raise InstrumentError(
                f"the schema is not JSON ({exc})", "use JSON values only", where=kind
            ) from None
        except jsonschema.exceptions.SchemaError as exc:
            where = ".".join(str(p) for p in exc.path)
            at = f" at {where}" if where else ""
            raise InstrumentError(
                f"not a valid JSON Schema{at}: {exc.message}",
                "fix the schema (https://json-schema.org)",
                where=kind,
            ) from None
        return Instrument(kind=kind, schema=json.loads(text))
    raise InstrumentError(
        f"unknown answer form {kind!r}", f"use one of {', '.join(INSTRUMENTS)}", where=kind
    )


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    """A checked validator of a schema (its JSON text), of the draft it names (2020-12
    when it names none); ``SchemaError`` if it is not a valid schema."""
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _error_text(error: jsonschema.exceptions.ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message} (at {where})" if where else error.message


def _bounds_text(low: Any, high: Any) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    if high is not None:
        return f" of at most {high}"
    return ""


_FENCE = re.compile(r"^```[A-Za-z]*\s*(.*?)\s*```$", re.S)


def _no_constant(name: str) -> Any:
    # JSON has no NaN or Infinity; Python's reader takes them, and NaN passes every bound.
    raise ValueError(f"{name} is not a number JSON allows")


def _json_in(text: str) -> tuple[bool, Any]:
    """(found, value): the text as JSON (inside a code fence, if any), else the first JSON
    object or array in it."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        return True, json.loads(body, parse_constant=_no_constant)
    except ValueError:
        pass
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    for i, ch in enumerate(body):
        if ch in "{[":
            try:
                return True, decoder.raw_decode(body, i)[0]
            except ValueError:
                continue
    return False, None


def instance_of(schema: Mapping[str, Any], rng: random.Random) -> Any:
    """A value of ``schema`` drawn with ``rng``: what an offline model answers. Covers
    ``type``, ``enum``, ``const``, ``properties``, ``items``, ``anyOf``/``oneOf`` (the
    first), bounds and ``minLength``/``minItems``; a schema beyond that may get a value it
    rejects (and the answer is then ``invalid``)."""
    return _instance(schema, rng)


def _number(schema: Mapping[str, Any], rng: random.Random, *, whole: bool) -> int | float:
    step = 1 if whole else 0.01
    low = schema.get("minimum")
    if low is None and "exclusiveMinimum" in schema:
        low = schema["exclusiveMinimum"] + step
    high = schema.get("maximum")
    if high is None and "exclusiveMaximum" in schema:
        high = schema["exclusiveMaximum"] - step
    if low is None:
        low = high - 10 if high is not None else 0
    if high is None:
        high = low + 10
    if whole:
        return rng.randint(math.ceil(low), max(math.ceil(low), math.floor(high)))
    return min(max(round(rng.uniform(low, high), 2), low), high)


def _instance(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value of a JSON schema made of ``type``, ``enum``, ``const``, ``properties``,
    ``required``, ``items``, bounds and lengths (what the offline model can answer)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _instance(v, rng, depth + 1) for k, v in sorted(props.items())}
    if kind == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        return [_instance(schema.get("items", {}), rng, depth + 1) for _ in range(n)]
    if kind in ("integer", "number"):
        return _number(schema, rng, whole=kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    word = rng.choice(("yes", "no", "maybe", "often", "rarely"))
    return word * max(1, -(-int(schema.get("minLength", 1)) // len(word)))
