"""Server-side field validation (the ``fieldValidation`` query parameter), as the real API does it.

On create, update and patch the real server decodes the body strictly and finds the fields the
schema of the kind does not know (``unknown field "spec.template.spec.containers[0].imagee"``)
and the fields a JSON object repeats (``duplicate field "spec.replicas"``). What it does then
depends on the directive (:class:`FieldValidation`):

- ``Strict`` (what kubectl sends): the request fails. Create and update answer ``400 BadRequest``,
  ``Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown
  field "spec.foo", unknown field "spec.bar"``; a patch answers ``422 Invalid``,
  `` "" is invalid: patch: Invalid value: "<the patch>": strict decoding error: ...``;
- ``Warn`` (the default when the parameter is absent): the fields are dropped and each is
  reported in a ``Warning: 299 - "unknown field \\"spec.foo\\""`` header;
- ``Ignore``: the fields are dropped silently.

Values of the wrong JSON type fail whatever the directive, as the real decoding does: ``400``
(``json: cannot unmarshal string into Go struct field PodSpec.spec.terminationGracePeriodSeconds
of type int64``) for built-in kinds, ``422`` (``spec.size: Invalid value: "string": spec.size in
body must be of type integer: "string"``) for custom resources, ``422`` for any patch.

Entry points: :func:`parse_directive`, :func:`decode_json` (keeps duplicate fields),
:func:`validate_write` and :func:`warning_header`; the schemas come from
:mod:`usher.sandbox.schemas`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from usher.sandbox.kinds import ResourceType
from usher.sandbox.schemas import INT_OR_STRING, QUANTITY, JsonType, Schema, schema_for
from usher.sandbox.smp import go_format
from usher.sandbox.store import ApiError, Reason

JsonObject = dict[str, Any]


class FieldValidation(StrEnum):
    """The ``fieldValidation`` directives."""

    IGNORE = "Ignore"
    WARN = "Warn"
    STRICT = "Strict"


class Operation(StrEnum):
    """The write a directive comes with (it names the options kind in errors)."""

    CREATE = "CreateOptions"
    UPDATE = "UpdateOptions"
    PATCH = "PatchOptions"


def parse_directive(value: str | None, operation: Operation) -> FieldValidation:
    """The directive of a request's ``fieldValidation`` parameter (absent: ``Warn``); an unknown
    value is ``422``, as the real server validates its options."""
    if not value:
        return FieldValidation.WARN
    try:
        return FieldValidation(value)
    except ValueError:
        supported = ", ".join(f'"{v}"' for v in ("", *sorted(FieldValidation)))
        detail = f'Unsupported value: "{value}": supported values: {supported}'
        message = f'{operation}.meta.k8s.io "" is invalid: fieldValidation: {detail}'
        cause = {"reason": "FieldValueNotSupported", "message": detail, "field": "fieldValidation"}
        raise ApiError(422, Reason.INVALID, message,
                       {"group": "meta.k8s.io", "kind": str(operation), "causes": [cause]}) from None


# --------------------------------------------------------------------------- duplicate fields


class _Pairs(dict[str, Any]):
    """A decoded JSON object that remembers the keys it saw more than once."""

    duplicates: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs()
    obj.duplicates = []
    for key, value in items:
        if key in obj and key not in obj.duplicates:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def decode_json(body: bytes) -> tuple[Any, list[str]]:
    """The JSON ``body`` (the last of duplicate fields wins, as in Go) and the paths of the
    fields it repeats (``spec.replicas``); plain dicts and lists come back."""
    try:
        decoded = json.loads(body or b"null", object_pairs_hook=_pairs)
        duplicates: list[str] = []
        return _plain(decoded, "", duplicates), duplicates
    except RecursionError:
        # kube-apiserver's decoder refuses deep nesting with a 400 too (its limit is 10,000)
        raise ValueError("exceeded max depth") from None


def _plain(value: Any, path: str, duplicates: list[str]) -> Any:
    if isinstance(value, _Pairs):
        duplicates.extend(_join(path, key) for key in value.duplicates)
        return {k: _plain(v, _join(path, k), duplicates) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", duplicates) for i, v in enumerate(value)]
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- unknown fields and types


@dataclass(frozen=True, slots=True)
class TypeProblem:
    """A value whose JSON type the schema does not allow."""

    path: str
    """With indices: ``spec.containers[0].ports[0].containerPort``."""
    go_path: str
    """Without indices, as Go's decoder names it: ``spec.containers.ports.containerPort``."""
    struct: str
    """The innermost named type holding the field (``ContainerPort``), ``""`` at the top."""
    expected: str
    """The JSON schema type wanted (``integer``), or a Go type name for named types."""
    go_type: str
    got: Any


@dataclass(slots=True)
class FieldReport:
    """What strict decoding finds in one object."""

    unknown: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    types: list[TypeProblem] = field(default_factory=list)

    def strict_messages(self) -> list[str]:
        """One message per problem, as the real server words them (duplicates first)."""
        return [f'duplicate field "{p}"' for p in self.duplicates] + [f'unknown field "{p}"' for p in self.unknown]


_ANY_VALUE = frozenset({INT_OR_STRING, QUANTITY})


_JSON_TYPES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    got = _JSON_TYPES.get(type(value))
    if got is not None:
        return got
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


class _Plan:
    """What validating a value against one schema asks of it, worked out once per schema (the
    walk visits the same schemas on every write) and kept in the schema's ``memo``."""

    __slots__ = ("alternatives", "any_value", "children", "inner", "int_or_string", "open", "properties", "schema", "values", "wanted")

    def __init__(self, schema: Schema) -> None:
        resolved = schema.resolved
        self.schema = schema
        self.any_value = schema.name in _ANY_VALUE
        alternatives = resolved.get("oneOf") or resolved.get("anyOf")
        self.alternatives = tuple(Schema(a, schema.components) for a in alternatives) if alternatives else ()
        self.wanted = schema.type
        self.int_or_string = bool(resolved.get("x-kubernetes-int-or-string"))
        self.properties = schema.properties
        self.inner = schema.name.rsplit(".", 1)[-1] if schema.name else None
        self.values = schema.values()
        self.open = schema.open
        #: the schema of each property asked for so far
        self.children: dict[str, Schema | None] = {}

    def child(self, key: str) -> Schema | None:
        try:
            return self.children[key]
        except KeyError:
            child = self.children[key] = self.schema.field(key)
            return child

    def fits(self, value: Any) -> bool:
        """Whether ``value``'s JSON type is one the schema allows (``null`` always is)."""
        if value is None or self.any_value:
            return True
        if self.alternatives:
            return any(_plan(a).fits(value) for a in self.alternatives)
        wanted, got = self.wanted, _json_type(value)
        if wanted == got and not self.int_or_string:
            return True
        if wanted is None or self.int_or_string:
            return wanted is None or got in ("integer", "string")
        if wanted == JsonType.NUMBER:
            return got in ("integer", "number")
        if wanted == JsonType.INTEGER and got == "number":
            return float(value).is_integer()
        return False


def _plan(schema: Schema) -> _Plan:
    plan = schema.memo.get("validation")
    if plan is None:
        plan = schema.memo["validation"] = _Plan(schema)
    return plan


def _fits(value: Any, schema: Schema) -> bool:
    """Whether ``value``'s JSON type is one ``schema`` allows (``null`` always is)."""
    return _plan(schema).fits(value)


def _go_type(schema: Schema) -> str:
    if schema.name and schema.name.startswith("io.k8s.api."):
        version, kind = schema.name.split(".")[-2:]
        return f"{version}.{kind}"
    if schema.name:
        return schema.name.rsplit(".", 1)[-1]
    match schema.type:
        case JsonType.STRING:
            return "string"
        case JsonType.INTEGER:
            return "int64"
        case JsonType.NUMBER:
            return "float64"
        case JsonType.BOOLEAN:
            return "bool"
        case JsonType.ARRAY:
            items = schema.items()
            return "[]" + (_go_type(items) if items is not None else "interface {}")
        case JsonType.OBJECT if schema.values() is not None:
            values = schema.values()
            assert values is not None
            return "map[string]" + _go_type(values)
    return "interface {}"


class _Walker:
    """One pass over an object and its schema, collecting (and optionally pruning) problems.

    The path to the value at hand is kept as a stack of keys and indices, and written out only
    for a problem (most writes have none)."""

    def __init__(self, prune: bool) -> None:
        self.prune = prune
        self.report = FieldReport()
        self.stack: list[str | int] = []

    def path(self) -> str:
        """``spec.containers[0].ports[0].containerPort``."""
        path = ""
        for step in self.stack:
            path = f"{path}[{step}]" if isinstance(step, int) else _join(path, step)
        return path

    def go_path(self) -> str:
        """The path without indices: ``spec.containers.ports.containerPort``."""
        path = ""
        for step in self.stack:
            if not isinstance(step, int):
                path = _join(path, step)
        return path

    def walk(self, value: Any, schema: Schema | None, struct: str) -> None:
        if schema is None:
            return
        plan = _plan(schema)
        if not plan.fits(value):
            self.report.types.append(TypeProblem(self.path(), self.go_path(), struct, schema.type or "object", _go_type(schema), value))
            return
        if isinstance(value, dict):
            self._object(value, plan, struct)
        elif isinstance(value, list):
            items = schema.items()
            if items is None:
                return
            stack = self.stack
            for i, item in enumerate(value):
                stack.append(i)
                self.walk(item, items, struct)
                stack.pop()

    def _object(self, value: JsonObject, plan: _Plan, struct: str) -> None:
        properties = plan.properties
        inner = plan.inner or struct
        values = plan.values
        stack = self.stack
        for key in list(value):
            if key in properties:
                child = plan.child(key)
            elif values is not None:
                child = values
            else:
                if not plan.open:
                    stack.append(key)
                    self.report.unknown.append(self.path())
                    stack.pop()
                    if self.prune:
                        del value[key]
                continue
            if child is not None:
                stack.append(key)
                self.walk(value[key], child, inner)
                stack.pop()


def inspect(obj: Any, schema: Schema | None, *, prune: bool = False) -> FieldReport:
    """The unknown fields and type problems of ``obj`` against ``schema`` (``None``: none);
    ``prune``: remove the unknown fields from ``obj`` as they are found."""
    walker = _Walker(prune)
    walker.walk(obj, schema, "")
    return walker.report


# --------------------------------------------------------------------------- the checks of a write


def _type_error(rt: ResourceType, obj: Any, problems: list[TypeProblem]) -> ApiError:
    """A create's or update's type problems: the decoder's ``400`` for built-in kinds, the
    schema validation's ``422`` for custom resources."""
    if not rt.custom:
        decode = _unmarshal_text(problems[0])
        return ApiError.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {decode}')
    details = []
    for p in problems:
        got = _json_type(p.got)
        details.append((p.path, f'Invalid value: "{got}": {p.path} in body must be of type {p.expected}: "{got}"'))
    text = ", ".join(f"{path}: {detail}" for path, detail in details)
    name = (obj.get("metadata") or {}).get("name", "") if isinstance(obj, dict) else ""
    message = f'{rt.kind}.{rt.group} "{name}" is invalid: ' + (f"[{text}]" if len(details) > 1 else text)
    causes = [{"reason": "FieldValueTypeInvalid", "message": d, "field": p} for p, d in details]
    return ApiError(422, Reason.INVALID, message, {"name": name, "group": rt.group, "kind": rt.kind, "causes": causes})


def _unmarshal_text(problem: TypeProblem) -> str:
    """Go's ``encoding/json`` error for one type problem."""
    got = _json_type(problem.got)
    value = {"integer": "number", "boolean": "bool"}.get(got, got)
    if got == "number" and problem.expected == JsonType.INTEGER:
        value = f"number {problem.got}"
    where = f"Go struct field {problem.struct}.{problem.go_path}" if problem.struct else "Go value"
    return f"json: cannot unmarshal {value} into {where} of type {problem.go_type}"


def patch_error(detail: str, shown: str) -> ApiError:
    """The real server's ``422`` for a patch whose result does not decode: ``shown`` is the
    patch as Go prints it (strategic merge) or the patched object's JSON (merge and JSON patch)."""
    message = f'Invalid value: "{shown}": {detail}'
    return ApiError(422, Reason.INVALID, f' "" is invalid: patch: {message}',
                    {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": "patch"}]})


def validate_write(
    rt: ResourceType,
    obj: Any,
    directive: FieldValidation,
    *,
    duplicates: Iterable[str] = (),
    patch: Any = None,
    strategic: bool = False,
    schema: Schema | None = None,
) -> list[str]:
    """Check the object a create, update or patch would store; return the warnings to send.

    ``obj`` is the request body (create, update) or the patched object (patch: pass the
    request's ``patch`` too, and ``strategic`` for a strategic merge patch); ``duplicates`` the
    repeated fields :func:`decode_json` found in the body. Unknown fields are removed from
    ``obj`` unless the directive is ``Strict``, in which case they fail the request; type
    problems always do. ``schema`` defaults to the kind's (:func:`schema_for`).
    """
    schema = schema if schema is not None else schema_for(rt)
    report = inspect(obj, schema, prune=directive is not FieldValidation.STRICT)
    report.duplicates = list(duplicates)
    if report.types:
        if patch is None or rt.custom:
            raise _type_error(rt, obj, report.types)
        shown = go_format(patch) if strategic else json.dumps(obj, separators=(",", ":"))
        raise patch_error(_unmarshal_text(report.types[0]), shown)
    messages = report.strict_messages()
    if not messages or directive is FieldValidation.IGNORE:
        return []
    if directive is FieldValidation.WARN:
        return messages
    strict = "strict decoding error: " + ", ".join(messages)
    if patch is not None:
        shown = go_format(patch) if strategic else json.dumps(obj, separators=(",", ":"))
        raise patch_error(strict, shown)
    raise ApiError.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {strict}')


def warning_header(messages: Iterable[str]) -> str | None:
    """The ``Warning`` header value carrying ``messages`` (RFC 7234 warn-code 299), or ``None``."""
    parts = [f'299 - "{_escape(m)}"' for m in messages]
    return ", ".join(parts) if parts else None


def _escape(message: str) -> str:
    return message.replace("\\", "\\\\").replace('"', '\\"')
