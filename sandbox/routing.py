"""The API server's URL scheme: which resource, namespace, name, subresource and verb a request
is about (``/api/v1/namespaces/ns/pods/p/status``), with the real server's ``404`` and ``405``
answers for paths and methods it does not serve.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from usher.engine.backends.http_server import Request
from usher.sandbox.store import ApiError, Catalogue, Reason, Resource, ResourceType

log = logging.getLogger(__name__)

_NOT_FOUND = "the server could not find the requested resource"


# --------------------------------------------------------------------------- routing


class Verb(StrEnum):
    """What a request does to a resource (the API's verbs, as RBAC names them)."""

    GET = "GET"
    LIST = "LIST"
    WATCH = "WATCH"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    PATCH = "PATCH"
    DELETE = "DELETE"


class Sub(StrEnum):
    """Subresources served over HTTP."""

    STATUS = "status"
    BINDING = "binding"
    EVICTION = "eviction"
    LOG = "log"


def subresources(rt: ResourceType) -> tuple[Sub, ...]:
    """The subresources served for ``rt``."""
    if rt.resource is Resource.PODS:
        return (Sub.STATUS, Sub.BINDING, Sub.EVICTION, Sub.LOG)
    return (Sub.STATUS,) if rt.status_subresource else ()


_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_BINDINGS = "bindings"
"""The legacy ``POST namespaces/{ns}/bindings`` endpoint (the Binding names the pod)."""

_VERBS = {
    ("GET", False): Verb.LIST,
    ("POST", False): Verb.CREATE,
    ("GET", True): Verb.GET,
    ("PUT", True): Verb.UPDATE,
    ("PATCH", True): Verb.PATCH,
    ("DELETE", True): Verb.DELETE,
}


@dataclass(frozen=True, slots=True)
class Route:
    """A resource request: which resource, where, and what to do."""

    rt: ResourceType | None
    verb: Verb
    namespace: str | None = None
    name: str | None = None
    sub: Sub | None = None


def route(request: Request, watch: bool, catalogue: Catalogue) -> Route:
    """Where a resource path leads; ``404``/``405`` Status errors for what the server does not have."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        api_version, rest = "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise not_found()
    served = catalogue.in_version(api_version)
    if not served or not rest:
        raise not_found()
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise not_found()
    if api_version == "v1" and rest[0] == _BINDINGS and namespace and len(rest) == 1:
        return _route_verb(request, Route(None, Verb.CREATE, namespace, None, Sub.BINDING), {"POST"})
    rt = next((t for t in served if t.resource == rest[0]), None)
    if rt is None or (namespace is not None and not rt.namespaced):
        raise not_found()
    name = rest[1] if len(rest) > 1 else None
    if name is not None and rt.namespaced and namespace is None:
        raise not_found()
    sub = _subresource(rt, rest[2]) if len(rest) > 2 else None
    return _resource_verb(request, rt, namespace, name, sub, watch)


def _subresource(rt: ResourceType, text: str) -> Sub:
    if text not in subresources(rt):
        raise not_found()
    return Sub(text)


def _resource_verb(
    request: Request, rt: ResourceType, namespace: str | None, name: str | None, sub: Sub | None, watch: bool
) -> Route:
    if sub in (Sub.BINDING, Sub.EVICTION):
        return _route_verb(request, Route(rt, Verb.CREATE, namespace, name, sub), {"POST"})
    if sub is Sub.LOG:
        return _route_verb(request, Route(rt, Verb.GET, namespace, name, sub), {"GET"})
    verb = _VERBS.get((request.method, name is not None))
    if verb is None or (sub is Sub.STATUS and verb is Verb.DELETE):
        raise ApiError(
            405, Reason.METHOD_NOT_ALLOWED, "the server does not allow this method on the requested resource"
        )
    if verb is Verb.LIST and watch:
        verb = Verb.WATCH
    return Route(rt, verb, namespace, name, sub)


def _route_verb(request: Request, target: Route, methods: set[str]) -> Route:
    if request.method not in methods:
        raise ApiError(
            405, Reason.METHOD_NOT_ALLOWED, "the server does not allow this method on the requested resource"
        )
    return target


def not_found() -> ApiError:
    return ApiError(404, Reason.NOT_FOUND, _NOT_FOUND, {})
