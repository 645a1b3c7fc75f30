"""Strategic merge patch (``application/strategic-merge-patch+json``), as the real API server applies it.

A JSON merge patch with the list semantics the API declares per field (see
:data:`usher.sandbox.schemas.PATCH_METADATA`): a list with ``patchStrategy: merge`` and a merge
key (``containers`` by ``name``, ``conditions`` by ``type``) is merged element by element, a
primitive list with ``merge`` (``finalizers``) as a set, and every other list is replaced whole.
The directives kubectl and controllers send are honoured:

- ``$patch: replace`` (a map or a list is replaced by the patch), ``$patch: delete`` (a map is
  emptied; in a merging list, the elements with that merge key are removed); ``$patch: merge`` is
  refused as the real server refuses it;
- ``$retainKeys`` (keys of the original missing from the list are cleared first);
- ``$setElementOrder/<field>`` (the order of a merging list after the merge);
- ``$deleteFromPrimitiveList/<field>`` (values removed from a primitive merging list);
- ``null`` deletes a key.

Order follows the real merge: items named by the patch come in the patch's order (or
``$setElementOrder``'s), items only on the server keep their relative order between them.

One deliberate difference: a value that lands where the original has nothing (a new key, a new
list element) is stored without directives and ``null`` members, as the real server's typed
decoding would leave it; the real server would keep a bare ``{"name": x}`` element for a
``$patch: delete`` inside a list that did not exist before, this removes it.

Custom resources do not take strategic merge patches: :func:`check_supported` answers ``415``
as the real server does, and kubectl falls back to a JSON merge patch.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from usher.sandbox.kinds import ResourceType
from usher.sandbox.schemas import PatchStrategy, Schema

JsonObject = dict[str, Any]


class Directive(StrEnum):
    """The keys strategic merge patches use for directives."""

    PATCH = "$patch"
    RETAIN_KEYS = "$retainKeys"
    SET_ELEMENT_ORDER = "$setElementOrder"
    DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"


class PatchAction(StrEnum):
    """The values of a ``$patch`` directive."""

    REPLACE = "replace"
    DELETE = "delete"
    MERGE = "merge"


class StrategicMergePatchError(Exception):
    """A patch the real server refuses: ``code`` and ``reason`` for its ``Status``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def _bad_request(message: str) -> StrategicMergePatchError:
    return StrategicMergePatchError(400, "BadRequest", message)


def _unprocessable(message: str) -> StrategicMergePatchError:
    return StrategicMergePatchError(422, "", message)


def _internal(message: str) -> StrategicMergePatchError:
    """What the real server answers for a patch error it has no status for: 500, no reason."""
    return StrategicMergePatchError(500, "", message)


_BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
_BAD_SET_ELEMENT_ORDER = "invalid patch format of setElementOrder list"
_BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"

CUSTOM_RESOURCE_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
"""The patch media types the sandbox accepts for custom resources."""


def check_supported(rt: ResourceType) -> None:
    """Refuse a strategic merge patch of a custom resource with the real server's ``415``."""
    if rt.custom:
        accepted = ", ".join(CUSTOM_RESOURCE_PATCH_TYPES)
        raise StrategicMergePatchError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: {accepted}",
        )


def apply_strategic_merge_patch(
    original: JsonObject, patch: Any, schema: Schema | None, *, original_is_ours: bool = False
) -> JsonObject:
    """``original`` patched by the strategic merge ``patch``, using ``schema`` (the kind's schema,
    see :func:`usher.sandbox.schemas.schema_for`) for list semantics; ``None``: every list is
    atomic. Neither argument is modified, unless ``original_is_ours``: the caller hands over a copy
    of its own (the store's fresh decoding of the object), which is patched in place rather than
    copied again. Raises :class:`StrategicMergePatchError`."""
    if not isinstance(patch, dict):
        raise _bad_request("invalid JSON document")
    return _merge_map(original if original_is_ours else _copy(original), _copy(patch), schema)


def _copy(value: Any) -> Any:
    """A copy of a JSON value's objects and arrays (``copy.deepcopy`` takes three times as long)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------- maps


def _field_meta(schema: Schema | None, key: str) -> tuple[Schema | None, str, str | None]:
    """The schema of ``key`` in ``schema``, its strategy (``merge``, ``replace`` or ``""``) and merge key."""
    field = schema.field(key) if schema is not None else None
    if field is None:
        return None, "", None
    strategies = [s for s in field.patch_strategies if s != PatchStrategy.RETAIN_KEYS]
    if len(strategies) > 1:
        raise _internal(f"unexpected patch strategy: {list(field.patch_strategies)}")
    return field, (strategies[0] if strategies else ""), field.merge_key


def _split_directive(key: str, prefix: Directive, error: str) -> str:
    head, sep, rest = key.partition("/")
    if head != prefix or not sep:
        raise _bad_request(error)
    return rest


def _merge_map(original: JsonObject, patch: JsonObject, schema: Schema | None) -> JsonObject:
    if Directive.PATCH in patch:
        action = patch[Directive.PATCH]
        if action == PatchAction.REPLACE:
            return _clean({k: v for k, v in patch.items() if k != Directive.PATCH})
        if action == PatchAction.DELETE:
            return {}
        raise _internal(f"unknown patch type: {go_format(action)} in map: {go_format(patch)}")
    _apply_retain_keys(original, patch)
    _apply_element_orders(original, patch, schema)
    for key, value in patch.items():
        deleting = key.startswith(Directive.DELETE_FROM_PRIMITIVE_LIST)
        if deleting:
            key = _split_directive(key, Directive.DELETE_FROM_PRIMITIVE_LIST, _BAD_PRIMITIVE_LIST)
        if value is None:
            original.pop(key, None)
            continue
        if key not in original:
            if not deleting:
                original[key] = _clean(value)
            continue
        current = original[key]
        if type(current) is not type(value):
            if not deleting:
                original[key] = _clean(value)
            continue
        field, strategy, merge_key = _field_meta(schema, key)
        if isinstance(value, dict):
            original[key] = _clean(value) if strategy == PatchStrategy.REPLACE else _merge_map(current, value, field)
        elif isinstance(value, list):
            if strategy == PatchStrategy.MERGE or deleting:
                original[key] = _merge_list(current, value, field, merge_key, deleting)
            else:
                original[key] = _clean(value)
        else:
            original[key] = value
    return original


def _apply_retain_keys(original: JsonObject, patch: JsonObject) -> None:
    """``$retainKeys``: every key the patch sets must be listed; keys of ``original`` that are not are cleared."""
    if Directive.RETAIN_KEYS not in patch:
        return
    retained = patch.pop(Directive.RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _bad_request(_BAD_RETAIN_KEYS)
    allowed = {k for k in retained if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key.startswith((Directive.DELETE_FROM_PRIMITIVE_LIST, Directive.SET_ELEMENT_ORDER)):
            continue
        if key not in allowed:
            raise _bad_request(_BAD_RETAIN_KEYS)
    for key in [k for k in original if k not in allowed]:
        del original[key]


def _apply_element_orders(original: JsonObject, patch: JsonObject, schema: Schema | None) -> None:
    """``$setElementOrder/<field>``: merge that field's list now and put it in the given order."""
    for directive in [k for k in patch if k.startswith(Directive.SET_ELEMENT_ORDER)]:
        order = patch.pop(directive)
        key = _split_directive(directive, Directive.SET_ELEMENT_ORDER, _BAD_SET_ELEMENT_ORDER)
        if not isinstance(order, list):
            raise _bad_request(_BAD_SET_ELEMENT_ORDER)
        current, patched = original.get(key), patch.get(key)
        if current is not None and not isinstance(current, list) or patched is not None and not isinstance(patched, list):
            raise _bad_request(_BAD_SET_ELEMENT_ORDER)
        field, strategy, merge_key = _field_meta(schema, key)
        if current is None and patched is None:
            continue
        if patched is None:
            merged = current
        elif current is None:
            merged = _clean(patched)
        elif strategy == PatchStrategy.MERGE:
            merged = _merge_list(current, patched, field, merge_key, deleting=False)
        else:
            merged = _clean(patched)
        assert merged is not None
        key_of = _key_function(merged + order, merge_key)
        wanted = {key_of(item) for item in order}
        in_order = [item for item in merged if key_of(item) in wanted]
        server_only = [item for item in merged if key_of(item) not in wanted]
        original[key] = _normalize(in_order, server_only, order, current or [], key_of)
        patch.pop(key, None)


# --------------------------------------------------------------------------- lists


def _element_kind(*lists: list[Any]) -> type | None:
    kind: type | None = None
    for items in lists:
        for item in items:
            if isinstance(item, list):
                raise _unprocessable("lists of lists are not supported")
            if kind is None:
                kind = type(item)
            elif kind is not type(item):
                raise _internal(f"list element types are not identical: {go_format(list(lists))}")
    return kind


def _merge_list(original: list[Any], patch: list[Any], field: Schema | None, merge_key: str | None,
                deleting: bool) -> list[Any]:
    if not original and not patch:
        return original
    kind = _element_kind(original, patch)
    if kind is not dict:
        if deleting:
            return [item for item in original if item not in patch]
        merged: list[Any] = []
        for item in original + patch:
            if item not in merged:
                merged.append(item)
        in_patch = [item for item in merged if item in patch]
        server_only = [item for item in merged if item not in patch]
        return _normalize(in_patch, server_only, patch, original, lambda item: _hashable(item))
    if not merge_key:
        raise _internal("cannot merge lists without merge key for type struct")
    items = field.items() if field is not None else None
    original, plain = _special_elements(original, patch, merge_key)
    server_order = list(original)
    merged = list(original)
    for element in plain:
        if merge_key not in element:
            raise _internal(f"map: {go_format(element)} does not contain declared merge key: {merge_key}")
        index = _find(merged, merge_key, element[merge_key])
        if index is None:
            merged.append(_clean(element))
        else:
            merged[index] = _merge_map(merged[index], element, items)
    key_of = _key_function(merged, merge_key)
    named = {key_of(element) for element in plain}
    in_patch = [item for item in merged if key_of(item) in named]
    server_only = [item for item in merged if key_of(item) not in named]
    return _normalize(in_patch, server_only, plain, server_order, key_of)


def _special_elements(original: list[Any], patch: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """Apply the ``$patch`` elements of a merging list: the original after deletions (or the
    replacement) and the patch's plain elements still to merge."""
    plain: list[Any] = []
    replace = False
    for element in patch:
        if Directive.PATCH not in element:
            plain.append(element)
            continue
        action = element[Directive.PATCH]
        if action == PatchAction.DELETE:
            if merge_key not in element:
                raise _internal(f"map: {go_format(element)} does not contain declared merge key: {merge_key}")
            original = [item for item in original if not _matches(item, merge_key, element[merge_key])]
        elif action == PatchAction.REPLACE:
            replace = True
        elif action == PatchAction.MERGE:
            raise _internal("merging lists cannot yet be specified in the patch")
        else:
            raise _internal(f"unknown patch type: {go_format(action)} in map: {go_format(element)}")
    if replace:
        return [_clean(element) for element in plain], []
    return original, plain


def _matches(item: Any, merge_key: str, value: Any) -> bool:
    if not isinstance(item, dict):
        raise _internal("value for key is not a map.")
    return merge_key in item and _same(item[merge_key], value)


def _find(items: list[Any], merge_key: str, value: Any) -> int | None:
    for index, item in enumerate(items):
        if _matches(item, merge_key, value):
            return index
    return None


def _same(left: Any, right: Any) -> bool:
    return type(left) is type(right) and left == right


def _hashable(value: Any) -> Any:
    return (type(value).__name__, repr(value)) if isinstance(value, (dict, list)) else (type(value).__name__, value)


def _key_function(items: list[Any], merge_key: str | None) -> Any:
    if merge_key is None:
        return _hashable
    return lambda item: _hashable(item.get(merge_key)) if isinstance(item, dict) else _hashable(item)


def _normalize(in_patch: list[Any], server_only: list[Any], patch_order: list[Any], server_order: list[Any],
               key_of: Any) -> list[Any]:
    """The real merge's order: ``in_patch`` sorted by ``patch_order``, ``server_only`` by
    ``server_order``, then interleaved so that each keeps its relative order and a server-only
    item goes before a patch item that the live list has after it."""
    patch_index = _indexer(patch_order, key_of)
    server_index = _indexer(server_order, key_of)
    left = _stable_sort(server_only, server_index, key_of)
    right = _stable_sort(in_patch, patch_index, key_of)
    result: list[Any] = []
    i = j = 0
    while i < len(left) and j < len(right):
        li, ri = server_index.get(key_of(left[i])), server_index.get(key_of(right[j]))
        if li is not None and ri is not None and li < ri:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    return result + left[i:] + right[j:]


def _indexer(order: list[Any], key_of: Any) -> dict[Any, int]:
    index: dict[Any, int] = {}
    for position, item in enumerate(order):
        index.setdefault(key_of(item), position)
    return index


def _stable_sort(items: list[Any], index: dict[Any, int], key_of: Any) -> list[Any]:
    return sorted(items, key=lambda item: index.get(key_of(item), len(index)))


# --------------------------------------------------------------------------- values


def _clean(value: Any) -> Any:
    """A patch value stored where the original has nothing: without directives or ``null`` members."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and not k.startswith(_DIRECTIVES)}
    if isinstance(value, list):
        return [_clean(v) for v in value if not _directive_element(v)]
    return value


_DIRECTIVES = tuple(str(d) for d in Directive)


def _directive_element(value: Any) -> bool:
    """A list element that only carries a directive: ``{$patch: delete, ...}`` or ``{$patch: replace}``."""
    if not isinstance(value, dict):
        return False
    action = value.get(Directive.PATCH)
    return action == PatchAction.DELETE or (action == PatchAction.REPLACE and len(value) == 1)


def go_format(value: Any) -> str:
    """``value`` as Go's ``%v`` prints decoded JSON (``map[a:1 b:[x y]]``): how the real server
    quotes patches and values in error messages."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_format(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
