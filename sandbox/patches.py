"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) as the API server applies them, with its
refusals; strategic merge patch lives in :mod:`usher.sandbox.smp`, which needs the schemas.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .api_errors import ApiError, _patch_failed
from .changes import _copy

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- patches


class PatchType(StrEnum):
    """The patch media types the sandbox accepts."""

    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; ``target`` is not modified."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class _PatchError(Exception):
    """A JSON patch operation that does not apply to the document."""


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; ``doc`` is modified in place and returned (it may be replaced)."""
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise ApiError.bad_request("a JSON patch must be a list of operation objects")
    try:
        for op in operations:
            doc = _apply_operation(doc, op)
    except _PatchError as exc:
        raise _patch_failed(str(exc)) from None
    return doc


def _apply_operation(doc: Any, op: JsonObject) -> Any:
    name, path = op.get("op"), op.get("path")
    if not isinstance(path, str):
        raise ApiError.bad_request(f"JSON patch operation {name!r} has no path")
    if name in ("add", "replace", "test") and "value" not in op:
        raise ApiError.bad_request(f"JSON patch operation {name!r} on {path} has no value")
    match name:
        case "add":
            return _pointer_add(doc, path, _copy(op["value"]))
        case "remove":
            return _pointer_remove(doc, path)[0]
        case "replace":
            doc, _ = _pointer_remove(doc, path)
            return _pointer_add(doc, path, _copy(op["value"]))
        case "move":
            doc, value = _pointer_remove(doc, _from(op))
            return _pointer_add(doc, path, value)
        case "copy":
            return _pointer_add(doc, path, _copy(_pointer_get(doc, _from(op))))
        case "test":
            if not _json_equal(_pointer_get(doc, path), op["value"]):
                raise _PatchError(f"testing value {path} failed")
            return doc
    raise ApiError.bad_request(f"unknown JSON patch operation {name!r}")


def _from(op: JsonObject) -> str:
    source = op.get("from")
    if not isinstance(source, str):
        raise ApiError.bad_request(f"JSON patch operation {op.get('op')!r} has no from")
    return source


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError.bad_request(f"JSON pointer {path!r} does not start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, append: bool = False) -> int:
    if append and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _PatchError(f"invalid array index {token!r} in {path}")
    index = int(token)
    if index > len(container) - (0 if append else 1):
        raise _PatchError(f"array index {index} out of range in {path}")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path)]
        else:
            raise _PatchError(f"doc is missing path: {path}")
    return node


def _pointer_get(doc: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path)]
    raise _PatchError(f"doc is missing path: {path}")


def _pointer_add(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, append=True), value)
    else:
        raise _PatchError(f"doc is missing path: {path}")
    return doc


def _pointer_remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _tokens(path)
    if not tokens:
        return None, doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path))
    raise _PatchError(f"doc is missing path: {path}")


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values, where ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b
