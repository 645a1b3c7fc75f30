"""Discovery documents as the real API server serves them: ``/api``, ``/apis``, each group's and
version's resource list (verbs, short names, categories, subresources, storage version hash) and
``/version``, built from the served kinds (:mod:`.kinds`) and the custom resources established
now (the ``Catalogue``).
"""

from __future__ import annotations

import base64
import hashlib

from usher.engine.backends.http_server import Request
from usher.sandbox.store import Catalogue, JsonObject, ResourceType
from usher.sandbox.routing import _BINDINGS, Sub, subresources

KUBERNETES_VERSION = "v1.32.0"


# --------------------------------------------------------------------------- discovery


def _api_resources(api_version: str, catalogue: Catalogue) -> JsonObject:
    resources: list[JsonObject] = []
    for rt in catalogue.in_version(api_version):
        resources.append(
            {
                "name": str(rt.resource),
                "singularName": rt.singular_name,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
                **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                **({"categories": list(rt.categories)} if rt.categories else {}),
                "storageVersionHash": _storage_hash(rt),
            }
        )
        for sub in subresources(rt):
            resources.append(_subresource_entry(rt, sub))
    if api_version == "v1":
        resources.append(
            {"name": _BINDINGS, "singularName": "binding", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
        )
    if api_version in (_AUTHORIZATION, _AUTHENTICATION):
        for review in _REVIEW_KINDS if api_version == _AUTHORIZATION else _AUTHENTICATION_KINDS:
            resources.append(
                {"name": review.lower() + "s", "singularName": review.lower(), "namespaced": review.startswith("Local"),
                 "kind": review, "verbs": ["create"]}
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version, "resources": resources}


def _storage_hash(rt: ResourceType) -> str:
    return base64.b64encode(hashlib.sha256(f"{rt.key}/{rt.version}".encode()).digest()[:8]).decode()


def _subresource_entry(rt: ResourceType, sub: Sub) -> JsonObject:
    entry: JsonObject = {"name": f"{rt.resource}/{sub}", "singularName": "", "namespaced": rt.namespaced}
    if sub is Sub.STATUS:
        return entry | {"kind": rt.kind, "verbs": ["get", "patch", "update"]}
    if sub is Sub.BINDING:
        return entry | {"kind": "Binding", "verbs": ["create"]}
    if sub is Sub.LOG:
        return entry | {"kind": "Pod", "verbs": ["get"]}
    return entry | {"group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}


_AUTHORIZATION = "authorization.k8s.io/v1"
_REVIEW_KINDS = ("SelfSubjectAccessReview", "SubjectAccessReview", "LocalSubjectAccessReview", "SelfSubjectRulesReview")
_AUTHENTICATION = "authentication.k8s.io/v1"
_AUTHENTICATION_KINDS = ("SelfSubjectReview",)


def _served_versions(catalogue: Catalogue) -> dict[str, list[ResourceType]]:
    versions = catalogue.versions()
    versions.setdefault(_AUTHORIZATION, [])
    versions.setdefault(_AUTHENTICATION, [])
    return versions


def _api_group(group: str, catalogue: Catalogue) -> JsonObject:
    served = _served_versions(catalogue)
    versions = [{"groupVersion": v, "version": v.split("/")[1]} for v in served if v.startswith(group + "/")]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def _groups(catalogue: Catalogue) -> list[str]:
    return sorted({v.split("/")[0] for v in _served_versions(catalogue) if "/" in v})


def discovery_document(request: Request, server_address: str, catalogue: Catalogue) -> JsonObject | None:
    parts = [p for p in request.path.split("/") if p]
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }
    if parts == ["api", "v1"]:
        return _api_resources("v1", catalogue)
    if parts == ["version"]:
        return _version()
    if len(parts) > 3 or parts[:1] != ["apis"]:
        return None  # a resource path (most requests): no need to list the groups
    groups = _groups(catalogue)
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group(g, catalogue) for g in groups]}
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(parts[1], catalogue)}
    if len(parts) == 3 and parts[0] == "apis" and f"{parts[1]}/{parts[2]}" in _served_versions(catalogue):
        return _api_resources(f"{parts[1]}/{parts[2]}", catalogue)
    return None


def _version() -> JsonObject:
    major, minor = KUBERNETES_VERSION[1:].split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "usher-sandbox",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
