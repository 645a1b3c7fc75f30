"""Resource quantities of the built-in kinds, put in canonical text as kube-apiserver decodes them.

A real API server never stores the text a client wrote for a ``resource.Quantity`` field: the
decoder parses it (``nvidia.com/gpu: 8`` as a JSON number, ``"0.5"``, ``"1000m"``) and the object
is kept and served with ``Quantity.String()`` (``"8"``, ``"500m"``, ``"1"``), so every client reads
a string. Clients generated from the OpenAPI document (the official ``kubernetes`` Python client)
type these fields as strings and refuse a number. A quantity that does not parse fails the
decoding (``400``, the request never reaches admission or validation).

Where the quantities are comes from the kinds' schemas (:mod:`usher.sandbox.schemas` marks each
Quantity field), so this module holds no list of its own: for each kind the schema tree is walked
once into a tuple of paths (a key, every item of a list, every value of a map), kept in the
schema's memo, and each write follows only those paths: :func:`check` as the request comes in
(a ``400`` before anything else), :func:`canonicalize` once the object is validated (validation
words its errors with the quantity as written: ``0.5`` is ``int64Amount{value:5, scale:-1}``,
as Go decoded it). Custom resources are left as written (the real server keeps their JSON as
sent).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from usher.sandbox import quantity
from usher.sandbox.kinds import ResourceType
from usher.sandbox.schemas import QUANTITY, Schema, schema_for

JsonObject = dict[str, Any]


class Each(StrEnum):
    """A path step that fans out: every item of a list, every value of a map."""

    ITEM = "[*]"
    VALUE = "{*}"


Step = str
Path = tuple[Step, ...]

_MEMO = "quantity_paths"


def quantity_paths(schema: Schema) -> tuple[Path, ...]:
    """Every path from ``schema`` to a Quantity value (worked out once per schema)."""
    paths = schema.memo.get(_MEMO)
    if paths is None:
        found: list[Path] = []
        _collect(schema, (), frozenset(), found)
        paths = schema.memo[_MEMO] = tuple(found)
    return paths


def _collect(schema: Schema, path: Path, above: frozenset[str], found: list[Path]) -> None:
    name = schema.name
    if name == QUANTITY:
        found.append(path)
        return
    if name is not None:
        if name in above:  # a recursive type (none of the built-in kinds' quantities lies below one)
            return
        above = above | {name}
    for key in schema.properties:
        child = schema.field(key)
        if child is not None:
            _collect(child, (*path, key), above, found)
    if schema.type == "array":
        items = schema.items()
        if items is not None:
            _collect(items, (*path, Each.ITEM), above, found)
    elif not schema.properties:
        values = schema.values()
        if values is not None:
            _collect(values, (*path, Each.VALUE), above, found)


def check(rt: ResourceType, obj: Any) -> None:
    """Raise :class:`~usher.sandbox.quantity.QuantityError` (the decoder's message) for a quantity
    in ``obj`` that does not parse; change nothing (validation words its errors with the
    quantities as written)."""
    _each(rt, obj, _parsed)


def canonicalize(rt: ResourceType, obj: Any) -> None:
    """Replace, in place, every quantity ``obj`` holds with its canonical text (``null`` kept):
    what the stored object says, once it is validated. Raises as :func:`check` does."""
    _each(rt, obj, _canonical)


def _each(rt: ResourceType, obj: Any, change: Callable[[Any], Any]) -> None:
    if rt.custom or not isinstance(obj, dict):
        return
    schema = schema_for(rt)
    if schema is None:
        return
    for path in quantity_paths(schema):
        _apply(obj, path, 0, change)


def _apply(node: Any, path: Path, at: int, change: Callable[[Any], Any]) -> None:
    step = path[at]
    last = at == len(path) - 1
    if step == Each.ITEM:
        if isinstance(node, list):
            for i, item in enumerate(node):
                if last:
                    node[i] = change(item)
                else:
                    _apply(item, path, at + 1, change)
        return
    if not isinstance(node, dict):
        return
    keys = list(node) if step == Each.VALUE else ([step] if step in node else [])
    for key in keys:
        if last:
            node[key] = change(node[key])
        else:
            _apply(node[key], path, at + 1, change)


def _parsed(raw: Any) -> Any:
    if raw is not None:
        quantity.parse(raw)
    return raw


def _canonical(raw: Any) -> Any:
    return raw if raw is None else str(quantity.parse(raw))
