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
schema's memo, and :func:`canonicalize` follows only those paths on each write. Custom resources
are left as written (the real server keeps their JSON as sent).
"""

from __future__ import annotations

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


def canonicalize(rt: ResourceType, obj: Any) -> None:
    """Replace, in place, every quantity ``obj`` holds with its canonical text (``null`` kept).

    Raises :class:`~usher.sandbox.quantity.QuantityError` (the decoder's message) for a quantity
    that does not parse."""
    if rt.custom or not isinstance(obj, dict):
        return
    schema = schema_for(rt)
    if schema is None:
        return
    for path in quantity_paths(schema):
        _apply(obj, path, 0)


def _apply(node: Any, path: Path, at: int) -> None:
    step = path[at]
    last = at == len(path) - 1
    if step == Each.ITEM:
        if isinstance(node, list):
            for i, item in enumerate(node):
                if last:
                    node[i] = _canonical(item)
                else:
                    _apply(item, path, at + 1)
        return
    if not isinstance(node, dict):
        return
    keys = list(node) if step == Each.VALUE else ([step] if step in node else [])
    for key in keys:
        if last:
            node[key] = _canonical(node[key])
        else:
            _apply(node[key], path, at + 1)


def _canonical(raw: Any) -> Any:
    return raw if raw is None else str(quantity.parse(raw))
