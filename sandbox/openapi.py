"""OpenAPI v3 documents for the served kinds, as the real API server serves them to kubectl.

``GET /openapi/v3`` answers an index of group versions (:func:`openapi_v3_index`), each with a
``serverRelativeURL`` carrying the hash of its document; ``GET /openapi/v3/api/v1`` and
``GET /openapi/v3/apis/<group>/<version>`` answer the document itself
(:func:`openapi_v3_document`): ``components.schemas`` named as the real ones (see
:mod:`usher.sandbox.schemas`) and ``paths`` for every resource, with the operations and query
parameters kubectl looks for. In particular each PATCH operation carries the
``x-kubernetes-group-version-kind`` of its kind and a ``fieldValidation`` query parameter, from
which kubectl concludes that the server validates fields itself (it then sends
``?fieldValidation=Strict`` and skips client-side validation), and its request body lists the
patch media types the sandbox accepts: ``application/strategic-merge-patch+json`` only for
built-in kinds (kubectl computes ``kubectl apply``'s three-way strategic merge patch from these
documents when it is listed), never ``application/apply-patch+yaml`` (no server-side apply).

Documents are large: each is built once per set of served kinds of its group version and kept,
with its JSON encoding and hash, until that set changes (a CRD created, changed or removed).
:func:`serve` answers the HTTP requests (hash redirects, ``ETag``/``If-None-Match``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from usher.sandbox.kinds import ResourceType
from usher.sandbox.schemas import (
    META,
    Gvk,
    builtin_components,
    builtin_definition,
    closure,
    custom_component,
    custom_list_component,
    ref,
)

JsonObject = dict[str, Any]

OPENAPI_V3_PREFIX = "/openapi/v3"
_JSON = "application/json"


class PatchMediaType(StrEnum):
    JSON_PATCH = "application/json-patch+json"
    MERGE_PATCH = "application/merge-patch+json"
    STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class Action(StrEnum):
    """``x-kubernetes-action`` values."""

    GET = "get"
    LIST = "list"
    POST = "post"
    PUT = "put"
    PATCH = "patch"
    DELETE = "delete"


# --------------------------------------------------------------------------- parameters


def _query(name: str, kind: str, description: str) -> JsonObject:
    return {"description": description, "in": "query", "name": name, "schema": {"type": kind, "uniqueItems": True}}


def _path_param(name: str, description: str) -> JsonObject:
    return {"description": description, "in": "path", "name": name, "required": True,
            "schema": {"type": "string", "uniqueItems": True}}


_PRETTY = _query("pretty", "string", "If 'true', then the output is pretty printed.")
_NAME = _path_param("name", "name of the object")
_NAMESPACE = _path_param("namespace", "object name and auth scope, such as for teams and projects")
_FIELD_MANAGER = _query("fieldManager", "string", "fieldManager is a name associated with the actor or entity "
                        "that is making these changes.")
_FIELD_VALIDATION = _query(
    "fieldValidation", "string",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing "
    "unknown or duplicate fields. Valid values are: - Ignore: unknown fields are silently dropped from the object. "
    "- Warn: a warning is sent for each unknown field that is dropped and each duplicate field. This is the "
    "default. - Strict: the request fails with a BadRequest error if any unknown or duplicate fields are present.")
_WRITE_PARAMS = [_FIELD_MANAGER, _FIELD_VALIDATION]
_LIST_PARAMS = [
    _query("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
    _query("continue", "string", "The continue option should be set when retrieving more results from the server."),
    _query("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
    _query("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
    _query("limit", "integer", "limit is a maximum number of responses to return for a list call."),
    _query("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request "
           "may be served from."),
    _query("resourceVersionMatch", "string", "resourceVersionMatch determines how resourceVersion is applied."),
    _query("sendInitialEvents", "boolean", "`sendInitialEvents=true` may be set together with `watch=true`."),
    _query("timeoutSeconds", "integer", "Timeout for the list/watch call."),
    _query("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, "
           "update, and remove notifications."),
]
_DELETE_PARAMS = [
    _query("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted."),
    _query("orphanDependents", "boolean", "Deprecated: please use the PropagationPolicy."),
    _query("propagationPolicy", "string", "Whether and how garbage collection will be performed."),
]


# --------------------------------------------------------------------------- operations


def _camel(group: str) -> str:
    """``rbac.authorization.k8s.io`` -> ``RbacAuthorization``; ``""`` -> ``Core``."""
    if not group:
        return "Core"
    return "".join(part[:1].upper() + part[1:] for part in group.removesuffix(".k8s.io").split("."))


def _tag(group: str, version: str) -> str:
    camel = _camel(group)
    return f"{camel[:1].lower()}{camel[1:]}_{version}"


def _content(definition: str, media_types: Sequence[str] = (_JSON, "application/yaml")) -> JsonObject:
    return {media: {"schema": ref(definition)} for media in media_types}


@dataclass(slots=True)
class _Kind:
    """What the operations of one resource need to know."""

    rt: ResourceType
    definition: str
    list_definition: str | None
    custom: bool
    operation_stem: str = field(init=False)

    def __post_init__(self) -> None:
        self.operation_stem = f"{_camel(self.rt.group)}{self.rt.version[:1].upper()}{self.rt.version[1:]}"

    def operation(self, action: Action, description: str, op_id: str, params: list[JsonObject],
                  response: str | None = None, codes: Sequence[str] = ("200",), gvk: Gvk | None = None,
                  body: JsonObject | None = None) -> JsonObject:
        target = response or self.definition
        operation: JsonObject = {
            "description": description,
            "operationId": op_id,
            "parameters": params,
            "responses": {
                **{code: {"content": _content(target), "description": _CODE_TEXT[code]} for code in codes},
                "401": {"description": "Unauthorized"},
            },
            "tags": [_tag(self.rt.group, self.rt.version)],
            "x-kubernetes-action": str(action),
            "x-kubernetes-group-version-kind": (gvk or Gvk.of(self.rt)).extension(),
        }
        if body is not None:
            operation["requestBody"] = body
        return operation


_CODE_TEXT = {"200": "OK", "201": "Created", "202": "Accepted"}


def _resource_paths(kind: _Kind) -> dict[str, JsonObject]:
    """The paths of one resource: collection, object, ``status`` and pods' eviction and binding."""
    rt = kind.rt
    root = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    scoped = f"{root}/namespaces/{{namespace}}/{rt.resource}" if rt.namespaced else f"{root}/{rt.resource}"
    scope_params = [_NAMESPACE] if rt.namespaced else []
    stem, namespaced = kind.operation_stem, "Namespaced" if rt.namespaced else ""
    body = {"content": {"*/*": {"schema": ref(kind.definition)}}, "required": True}
    patch_media = [PatchMediaType.JSON_PATCH, PatchMediaType.MERGE_PATCH]
    if not kind.custom:
        patch_media.append(PatchMediaType.STRATEGIC_MERGE_PATCH)
    patch_body = {"content": {str(m): {"schema": ref(f"{META}.Patch")} for m in patch_media}, "required": True}
    paths: dict[str, JsonObject] = {}

    collection: JsonObject = {"parameters": [*scope_params, _PRETTY]}
    if kind.list_definition is not None and "list" in rt.verbs:
        collection["get"] = kind.operation(
            Action.LIST, f"list or watch objects of kind {rt.kind}", f"list{stem}{namespaced}{rt.kind}",
            list(_LIST_PARAMS), response=kind.list_definition)
    if "create" in rt.verbs:
        collection["post"] = kind.operation(
            Action.POST, f"create a {rt.kind}", f"create{stem}{namespaced}{rt.kind}", list(_WRITE_PARAMS),
            codes=("200", "201", "202"), body=body)
    paths[scoped] = collection

    item: JsonObject = {"parameters": [_NAME, *scope_params, _PRETTY]}
    item["get"] = kind.operation(Action.GET, f"read the specified {rt.kind}", f"read{stem}{namespaced}{rt.kind}", [])
    item["put"] = kind.operation(Action.PUT, f"replace the specified {rt.kind}", f"replace{stem}{namespaced}{rt.kind}",
                                 list(_WRITE_PARAMS), codes=("200", "201"), body=body)
    item["patch"] = kind.operation(Action.PATCH, f"partially update the specified {rt.kind}",
                                   f"patch{stem}{namespaced}{rt.kind}", list(_WRITE_PARAMS), codes=("200", "201"),
                                   body=patch_body)
    item["delete"] = kind.operation(
        Action.DELETE, f"delete a {rt.kind}", f"delete{stem}{namespaced}{rt.kind}", list(_DELETE_PARAMS),
        response=f"{META}.Status" if rt.resource != "pods" else None, codes=("200", "202"),
        body={"content": {"*/*": {"schema": ref(f"{META}.DeleteOptions")}}})
    paths[f"{scoped}/{{name}}"] = item

    if rt.status_subresource:
        status: JsonObject = {"parameters": [_NAME, *scope_params, _PRETTY]}
        status["get"] = kind.operation(Action.GET, f"read status of the specified {rt.kind}",
                                       f"read{stem}{namespaced}{rt.kind}Status", [])
        status["put"] = kind.operation(Action.PUT, f"replace status of the specified {rt.kind}",
                                       f"replace{stem}{namespaced}{rt.kind}Status", list(_WRITE_PARAMS),
                                       codes=("200", "201"), body=body)
        status["patch"] = kind.operation(Action.PATCH, f"partially update status of the specified {rt.kind}",
                                         f"patch{stem}{namespaced}{rt.kind}Status", list(_WRITE_PARAMS),
                                         codes=("200", "201"), body=patch_body)
        paths[f"{scoped}/{{name}}/status"] = status
    if rt.resource == "pods" and not rt.group:
        for sub, sub_kind, definition in (("eviction", Gvk("policy", "v1", "Eviction"), "io.k8s.api.policy.v1.Eviction"),
                                          ("binding", Gvk("", "v1", "Binding"), "io.k8s.api.core.v1.Binding")):
            sub_body = {"content": {"*/*": {"schema": ref(definition)}}, "required": True}
            paths[f"{scoped}/{{name}}/{sub}"] = {
                "parameters": [_NAME, *scope_params],
                "post": kind.operation(Action.POST, f"create {sub} of a Pod",
                                       f"create{stem}{namespaced}Pod{sub.title()}", list(_WRITE_PARAMS),
                                       response=definition, codes=("200", "201", "202"), gvk=sub_kind, body=sub_body),
            }
    if rt.namespaced and kind.list_definition is not None and "list" in rt.verbs:
        paths[f"{root}/{rt.resource}"] = {
            "get": kind.operation(Action.LIST, f"list or watch objects of kind {rt.kind}",
                                  f"list{stem}{rt.kind}ForAllNamespaces", list(_LIST_PARAMS),
                                  response=kind.list_definition),
            "parameters": [_PRETTY],
        }
    return paths


# --------------------------------------------------------------------------- documents


def group_version_path(api_version: str) -> str:
    """``v1`` -> ``api/v1``; ``apps/v1`` -> ``apis/apps/v1`` (the index's keys)."""
    return f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"


def _by_group_version(served: Iterable[ResourceType]) -> dict[str, list[ResourceType]]:
    versions: dict[str, list[ResourceType]] = {}
    for rt in served:
        versions.setdefault(group_version_path(rt.api_version), []).append(rt)
    return versions


def _build_document(types: Sequence[ResourceType]) -> JsonObject:
    builtins = builtin_components()
    own: dict[str, JsonObject] = {}
    roots = [f"{META}.Status", f"{META}.DeleteOptions", f"{META}.Patch"]
    paths: dict[str, JsonObject] = {}
    for rt in types:
        definition = builtin_definition(Gvk.of(rt)) if not rt.custom else None
        if definition is not None:
            list_definition = definition + "List" if definition + "List" in builtins else None
            kind = _Kind(rt, definition, list_definition, custom=False)
        else:
            name, component = custom_component(rt)
            list_name, list_component = custom_list_component(rt)
            own[name], own[list_name] = component, list_component
            kind = _Kind(rt, name, list_name, custom=True)
        roots += [kind.definition, *([kind.list_definition] if kind.list_definition else [])]
        if rt.resource == "pods" and not rt.group:
            roots += ["io.k8s.api.policy.v1.Eviction", "io.k8s.api.core.v1.Binding"]
        paths.update(_resource_paths(kind))
    schemas = closure(roots, {**builtins, **own})
    return {
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"BearerToken": {"description": "Bearer Token authentication", "in": "header",
                                                "name": "authorization", "type": "apiKey"}},
        },
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "openapi": "3.0.0",
        "paths": dict(sorted(paths.items())),
        "security": [{"BearerToken": []}],
    }


@dataclass(frozen=True, slots=True)
class _Built:
    fingerprint: tuple[Any, ...]
    document: JsonObject
    body: bytes
    hash: str


def _fingerprint(types: Sequence[ResourceType]) -> tuple[Any, ...]:
    """What a document depends on; CRD schemas by identity (a changed CRD makes new types)."""
    return tuple((rt.resource, rt.kind, rt.namespaced, rt.status_subresource, rt.custom, rt.verbs,
                  id(rt.schema) if rt.schema is not None else None) for rt in types)


class OpenApiV3:
    """The documents for the kinds a server serves, built on demand and cached per group version."""

    def __init__(self) -> None:
        self._built: dict[str, tuple[_Built, tuple[Any, ...]]] = {}

    def _get(self, gv_path: str, types: Sequence[ResourceType]) -> _Built:
        fingerprint = _fingerprint(types)
        cached = self._built.get(gv_path)
        # keep the schemas referenced so that their ids cannot be reused while cached
        if cached is not None and cached[0].fingerprint == fingerprint:
            return cached[0]
        document = _build_document(types)
        body = json.dumps(document, separators=(",", ":")).encode()
        built = _Built(fingerprint, document, body, hashlib.sha512(body).hexdigest().upper())
        self._built[gv_path] = (built, tuple(rt.schema for rt in types))
        return built

    def index(self, served: Iterable[ResourceType]) -> JsonObject:
        """``GET /openapi/v3``: every served group version and the URL of its document."""
        paths = {}
        for gv_path, types in sorted(_by_group_version(served).items()):
            built = self._get(gv_path, types)
            paths[gv_path] = {"serverRelativeURL": f"{OPENAPI_V3_PREFIX}/{gv_path}?hash={built.hash}"}
        for gone in set(self._built) - set(paths):
            del self._built[gone]
        return {"paths": paths}

    def document(self, gv_path: str, served: Iterable[ResourceType]) -> _Built | None:
        types = _by_group_version(served).get(gv_path.strip("/"))
        if not types:
            return None
        return self._get(gv_path.strip("/"), types)


_DOCUMENTS = OpenApiV3()


def openapi_v3_index(served: Iterable[ResourceType]) -> JsonObject:
    """The ``/openapi/v3`` index for the ``served`` types (every served version of every kind)."""
    return _DOCUMENTS.index(served)


def openapi_v3_document(group_version: str, served: Iterable[ResourceType]) -> JsonObject | None:
    """The document of one group version (``api/v1``, ``apis/apps/v1``; ``v1`` and ``apps/v1`` work
    too), or ``None`` when nothing is served there. Shared and cached: do not modify it."""
    path = group_version if group_version.startswith(("api/", "apis/")) else group_version_path(group_version)
    built = _DOCUMENTS.document(path, served)
    return built.document if built is not None else None


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True, slots=True)
class OpenApiReply:
    """An HTTP answer for an ``/openapi/v3`` request."""

    status: int
    headers: dict[str, str]
    body: bytes


def serve(path: str, query: Mapping[str, str], headers: Mapping[str, str], served: Iterable[ResourceType]) -> OpenApiReply | None:
    """Answer ``GET /openapi/v3[/...]``; ``None`` for any other path.

    ``query`` holds single query values; ``headers`` is looked up by lower-case name. A document
    requested with a stale ``hash`` is redirected (``301``) to its current URL, as the real server
    does; a current one is ``Cache-Control: public, immutable`` with an ``ETag``, and
    ``If-None-Match`` with that tag answers ``304``.
    """
    if path.rstrip("/") == OPENAPI_V3_PREFIX:
        body = json.dumps(openapi_v3_index(served), separators=(",", ":")).encode()
        return OpenApiReply(200, {"content-type": _JSON, "cache-control": "no-cache, private"}, body)
    if not path.startswith(OPENAPI_V3_PREFIX + "/"):
        return None
    gv_path = path[len(OPENAPI_V3_PREFIX) + 1:].strip("/")
    built = _DOCUMENTS.document(gv_path, served)
    if built is None:
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": "the server could not find the requested resource", "reason": "NotFound",
                  "details": {}, "code": 404}
        return OpenApiReply(404, {"content-type": _JSON}, json.dumps(status).encode())
    etag = f'"{built.hash}"'
    wanted = query.get("hash")
    if wanted and wanted != built.hash:
        location = f"{OPENAPI_V3_PREFIX}/{gv_path}?hash={built.hash}"
        return OpenApiReply(301, {"location": location, "cache-control": "no-cache, private"}, b"")
    cache_control = "public, immutable" if wanted else "no-cache, private"
    if headers.get("if-none-match") == etag:
        return OpenApiReply(304, {"etag": etag, "cache-control": cache_control}, b"")
    return OpenApiReply(200, {"content-type": _JSON, "etag": etag, "cache-control": cache_control}, built.body)
