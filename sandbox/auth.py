"""RBAC authorization for the sandbox's API server, and its auth endpoints, as a real cluster does them.

Off by default; ``FakeApiServer(authorization=True)`` (``usher sandbox --rbac``) turns it on. A
request then goes through the real server's filters in their order: authentication (bearer tokens,
:mod:`.authn`), impersonation (the ``Impersonate-*`` headers, :mod:`.impersonation`), then:

- **Authorization**: the request's attributes are resolved from its URL as the real server's
  ``RequestInfoFactory`` does (so authorization happens before routing: an unauthorized request
  for a resource that does not exist is ``403``, not ``404``; ``GET`` of a collection is ``list``,
  or ``watch`` with ``?watch=true``, and a ``fieldSelector=metadata.name=X`` names the object;
  ``DELETE`` of a collection is ``deletecollection``; ``POST`` to ``pods/x/binding`` or
  ``pods/x/eviction`` is ``create`` on the subresource), then checked by the ``system:masters``
  privileged-group authorizer and :class:`RbacAuthorizer`, which evaluates the Roles,
  ClusterRoles, RoleBindings and ClusterRoleBindings in the store exactly as the RBAC authorizer
  (``rbac.RuleAllows``, subject matching, RoleBindings to ClusterRoles scoped to their
  namespace, ``resourceNames``, ``nonResourceURLs`` with ``*`` suffixes). Denials are ``403
  Forbidden`` with the real message, e.g. ``pods "x" is forbidden: User "…" cannot get resource
  "pods" in API group "" in the namespace "default"``.
- The default bootstrap policy of a real cluster is created at start: ``cluster-admin`` (bound to
  ``system:masters``), ``system:discovery`` and ``system:basic-user`` (bound to
  ``system:authenticated``), ``system:public-info-viewer`` (bound to ``system:authenticated`` and
  ``system:unauthenticated``).
- Every allowed request is recorded (:attr:`RbacAuthorizer.uses`, :attr:`RbacAuthorizer.accesses`)
  so a test can find the permissions that a role grants and that nothing exercised.

Not modelled: ClusterRole aggregation (``aggregationRule``: the rules must be written out),
the ``escalate``/``bind`` checks on writing roles and bindings (anyone allowed to create a Role
may grant anything), client certificates, TokenReview, audiences and bound-object references of tokens, the default ``admin``/``edit``/``view`` and
controller roles, Node and Webhook authorizers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .authn import AUTHENTICATED, MASTERS, SA_PREFIX, UNAUTHENTICATED, Authenticator, UserInfo
from .storage_rbac import DRA_ROLES, STORAGE_ROLES
from .store import ApiError, Change, JsonObject, Reason, Resource, Store

RBAC_GROUP = "rbac.authorization.k8s.io"

_RBAC_RESOURCES = (Resource.ROLES, Resource.CLUSTERROLES, Resource.ROLEBINDINGS, Resource.CLUSTERROLEBINDINGS)


# --------------------------------------------------------------------------- request attributes


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request asks to do, as the authorizers see it (``authorizer.Attributes``)."""

    verb: str
    resource_request: bool = True
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""

    @classmethod
    def from_review(cls, spec: JsonObject) -> Attributes:
        """From a SubjectAccessReview spec's ``resourceAttributes`` or ``nonResourceAttributes``."""
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if isinstance(ra, dict) and (ra.get("verb") or ra.get("resource")):
            fields = {"group": "group", "version": "version", "resource": "resource", "subresource": "subresource",
                      "name": "name", "namespace": "namespace"}
            return cls(str(ra.get("verb") or ""), True, **{k: str(ra.get(v) or "") for k, v in fields.items()})
        if isinstance(nra, dict) and nra.get("verb"):
            return cls(str(nra["verb"]), False, path=str(nra.get("path") or ""))
        raise ApiError(
            422, Reason.INVALID,
            "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or resourceAttributes "
            "must be specified",
        )


_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_SPECIAL_VERBS = {"proxy", "watch"}


def request_attributes(method: str, path: str, query: dict[str, list[str]]) -> Attributes:
    """The attributes of an HTTP request, resolved as ``RequestInfoFactory.NewRequestInfo`` does."""
    non_resource = Attributes(method.lower(), False, path=path)
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            return non_resource
        verb, parts = parts[0], parts[1:]
    else:
        verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        watch = (query.get("watch") or [""])[0].lower() in ("true", "1", "t")
        verb = "watch" if watch else "list"
        name = _exact_name((query.get("fieldSelector") or [""])[0])
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, True, group, version, resource, subresource, name, namespace, path)


_NAME = re.compile(r"[^/%]+")


def _exact_name(selector: str) -> str:
    for term in selector.split(","):
        key, op, value = re.split(r"(==|!=|=)", term, maxsplit=1) if re.search("=", term) else (term, "", "")
        if key.strip() == "metadata.name" and op in ("=", "==") and _NAME.fullmatch(value.strip() or "%"):
            if value.strip() not in (".", ".."):
                return value.strip()
    return ""


def forbidden(user: UserInfo, attrs: Attributes, reason: str = "") -> ApiError:
    """A ``403`` as the real server words it (``responsewriters.Forbidden``)."""
    if not attrs.resource_request:
        message = f'User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        message = f'User "{user.name}" cannot {attrs.verb} resource "{what}" in API group "{attrs.group}" {where}'
    if reason:
        message = f"{message}: {reason}"
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    details: JsonObject = {}
    if attrs.resource_request and attrs.name:
        details["name"] = attrs.name
    if attrs.resource_request and attrs.group:
        details["group"] = attrs.group
    if attrs.resource_request and attrs.resource:
        details["kind"] = attrs.resource
    if not (attrs.resource_request and attrs.resource):
        text = f"forbidden: {message}"
    elif attrs.name:
        text = f'{qualified} "{attrs.name}" is forbidden: {message}'
    else:
        text = f"{qualified} is forbidden: {message}"
    return ApiError(403, Reason.FORBIDDEN, text, details)


# --------------------------------------------------------------------------- RBAC


def rule_allows(attrs: Attributes, rule: JsonObject) -> bool:
    """``rbac.RuleAllows``: does one PolicyRule allow the request?"""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if attrs.resource_request:
        groups = rule.get("apiGroups") or []
        if "*" not in groups and attrs.group not in groups:
            return False
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        resources = rule.get("resources") or []
        if not any(
            r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources
        ):
            return False
        names = rule.get("resourceNames") or []
        return not names or attrs.name in names
    for url in rule.get("nonResourceURLs") or []:
        if url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1])):
            return True
    return False


def applies_to(subject: JsonObject, user: UserInfo, binding_namespace: str) -> bool:
    """``appliesToUser``: does a binding's subject name this user?"""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"{SA_PREFIX}{namespace}:{name}"
    return False


def _describe_subject(subject: JsonObject, binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


@dataclass(frozen=True, slots=True)
class RuleRef:
    """One rule of one role, reached through one binding."""

    binding_kind: str
    binding_namespace: str
    binding: str
    role_kind: str
    role_namespace: str
    role: str
    index: int

    def describe(self, subject: JsonObject) -> str:
        """Who allowed it, in the words of the RBAC authorizer's reason."""
        name = f"{self.binding}/{self.binding_namespace}" if self.binding_kind == "RoleBinding" else self.binding
        return f'{self.binding_kind} "{name}" of {self.role_kind} "{self.role}" to {_describe_subject(subject, self.binding_namespace)}'


@dataclass(frozen=True, slots=True)
class Access:
    """An allowed request, as a permission: who, which verb on which group/resource, where."""

    user: str
    group: str
    resource: str
    """``resource/subresource`` for a subresource; for a non-resource request, the path."""
    verb: str
    namespace: str = ""
    name: str = ""


@dataclass(slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    denied: bool = False
    rule: RuleRef | None = None


@dataclass(slots=True)
class RbacAuthorizer:
    """The RBAC authorizer over the store's roles and bindings, plus ``system:masters``."""

    store: Store
    uses: Counter[tuple[str, RuleRef]] = field(default_factory=Counter)
    """(user, rule) -> how many allowed requests that rule decided."""
    accesses: Counter[Access] = field(default_factory=Counter)
    """Every allowed request by a user outside ``system:masters``, as an :class:`Access`."""
    _cache: list[tuple[str, str, JsonObject]] | None = None

    def __post_init__(self) -> None:
        self.store.add_listener(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.rt.resource in _RBAC_RESOURCES:
            self._cache = None

    def _bindings(self) -> list[tuple[str, str, JsonObject]]:
        """(kind, namespace, binding) for every ClusterRoleBinding, then every RoleBinding."""
        if self._cache is None:
            cluster = [("ClusterRoleBinding", "", s.obj) for s in self.store.list(Resource.CLUSTERROLEBINDINGS).items]
            local = [
                ("RoleBinding", s.obj["metadata"]["namespace"], s.obj)
                for s in self.store.list(Resource.ROLEBINDINGS).items
            ]
            self._cache = cluster + local
        return self._cache

    def _role_rules(self, kind: str, name: str, namespace: str) -> list[JsonObject]:
        if kind == "ClusterRole":
            return list(self.store.get_stored(Resource.CLUSTERROLES, name).obj.get("rules") or [])
        if kind == "Role":
            return list(self.store.get_stored(Resource.ROLES, name, namespace).obj.get("rules") or [])
        raise ApiError(404, Reason.NOT_FOUND, f"unknown roleRef kind {kind!r}")

    def visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[RuleRef, JsonObject, JsonObject] | str]:
        """Every rule that applies to ``user`` in ``namespace`` (``""``: cluster scope) with the subject
        that matched, in the RBAC authorizer's order; an error text for a binding to a missing role."""
        for kind, bns, binding in self._bindings():
            if kind == "RoleBinding" and bns != namespace:
                continue
            subject = next((s for s in binding.get("subjects") or [] if applies_to(s, user, bns)), None)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            role_kind, role_name = ref.get("kind", ""), ref.get("name", "")
            role_ns = bns if role_kind == "Role" else ""
            try:
                rules = self._role_rules(role_kind, role_name, role_ns)
            except ApiError:
                what = "role" if role_kind == "Role" else "clusterrole"
                yield f'{what}.{RBAC_GROUP} "{role_name}" not found'
                continue
            meta = binding["metadata"]
            for index, rule in enumerate(rules):
                yield RuleRef(kind, bns, meta["name"], role_kind, role_ns, role_name, index), rule, subject

    def authorize(self, user: UserInfo, attrs: Attributes, record: bool = True) -> Decision:
        if MASTERS in user.groups:
            return Decision(True)
        errors: list[str] = []
        for item in self.visit(user, attrs.namespace if attrs.resource_request else ""):
            if isinstance(item, str):
                errors.append(item)
                continue
            ref, rule, subject = item
            if rule_allows(attrs, rule):
                if record:
                    self._record(user, attrs, ref)
                return Decision(True, f"RBAC: allowed by {ref.describe(subject)}", rule=ref)
        reason = ""
        if errors:
            reason = "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        return Decision(False, reason)

    def _record(self, user: UserInfo, attrs: Attributes, ref: RuleRef) -> None:
        self.uses[(user.name, ref)] += 1
        if attrs.resource_request:
            what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
            self.accesses[Access(user.name, attrs.group, what, attrs.verb, attrs.namespace, attrs.name)] += 1
        else:
            self.accesses[Access(user.name, "", attrs.path, attrs.verb)] += 1

    def rules_review(self, user: UserInfo, namespace: str) -> JsonObject:
        """A SelfSubjectRulesReview's status: the rules that apply in ``namespace``."""
        resource_rules: list[JsonObject] = []
        non_resource_rules: list[JsonObject] = []
        errors: list[str] = []
        for item in self.visit(user, namespace):
            if isinstance(item, str):
                errors.append(item)
                continue
            rule = item[1]
            if rule.get("nonResourceURLs"):
                non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                           "nonResourceURLs": list(rule["nonResourceURLs"])})
            else:
                entry = {"verbs": list(rule.get("verbs") or []), "apiGroups": list(rule.get("apiGroups") or []),
                         "resources": list(rule.get("resources") or [])}
                if rule.get("resourceNames"):
                    entry["resourceNames"] = list(rule["resourceNames"])
                resource_rules.append(entry)
        status: JsonObject = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                              "incomplete": bool(errors)}
        if errors:
            status["evaluationError"] = ", ".join(errors)
        return status

    def granted(self, user: UserInfo, namespace: str | None = None) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) triples the user's rules name (in ``namespace``, or anywhere)."""
        namespaces = {namespace} if namespace is not None else {""} | {
            bns for kind, bns, _ in self._bindings() if kind == "RoleBinding"
        }
        out: set[tuple[str, str, str]] = set()
        for ns in namespaces:
            for item in self.visit(user, ns):
                if isinstance(item, str):
                    continue
                rule = item[1]
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        for verb in rule.get("verbs") or []:
                            out.add((group, resource, verb))
        return out


# --------------------------------------------------------------------------- the default policy


def _meta(name: str) -> JsonObject:
    return {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def bootstrap_policy() -> Iterator[tuple[Resource, JsonObject]]:
    """The default ClusterRoles and ClusterRoleBindings a new cluster has that matter to clients."""
    roles: dict[str, list[JsonObject]] = {
        "cluster-admin": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
        "system:discovery": [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                 "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ],
        "system:public-info-viewer": [
            {"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
        ],
        "system:basic-user": [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
        ],
    }
    bindings = {
        "cluster-admin": [MASTERS],
        "system:discovery": [AUTHENTICATED],
        "system:public-info-viewer": [AUTHENTICATED, UNAUTHENTICATED],
        "system:basic-user": [AUTHENTICATED],
    }
    for name, rules in roles.items():
        yield Resource.CLUSTERROLES, {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
                                      "metadata": _meta(name), "rules": rules}
    for name, (account, rules) in {**STORAGE_ROLES, **DRA_ROLES}.items():  # the controllers' (sandbox/storage_rbac.py)
        yield Resource.CLUSTERROLES, {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
                                      "metadata": _meta(name), "rules": rules}
        yield Resource.CLUSTERROLEBINDINGS, {
            "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding", "metadata": _meta(name),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}],
        }
    for name, groups in bindings.items():
        yield Resource.CLUSTERROLEBINDINGS, {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups],
        }


def install_bootstrap_policy(store: Store) -> None:
    for resource, obj in bootstrap_policy():
        if not store.exists(resource, obj["metadata"]["name"]):
            store.create(resource, obj)


# --------------------------------------------------------------------------- the server's auth layer


_REVIEWS = "/apis/authorization.k8s.io/v1/"
_SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_TOKEN_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)/token$")
_LOCAL_REVIEW = re.compile(r"^/apis/authorization\.k8s\.io/v1/namespaces/([^/]+)/localsubjectaccessreviews$")


class Auth:
    """What :class:`~usher.sandbox.apiserver.FakeApiServer` asks: who is this, may they, and the
    authentication/authorization endpoints (TokenRequest, SelfSubjectReview, the access and rules reviews)."""

    def __init__(self, store: Store, *, enabled: bool, admin_token: str, static_tokens: set[str] | None) -> None:
        self.store = store
        self.enabled = enabled
        self.authn = Authenticator(store, admin_token, static_tokens)
        self.rbac = RbacAuthorizer(store)
        if enabled:
            install_bootstrap_policy(store)

    def user(self, headers_authorization: str | None) -> UserInfo:
        return self.authn.authenticate(headers_authorization)

    def check(self, user: UserInfo, attrs: Attributes, extra_deny: Decision | None = None) -> None:
        """``403`` unless ``user`` may; ``extra_deny``: a deny from an authorizer ahead of RBAC."""
        if extra_deny is not None and extra_deny.denied:
            raise forbidden(user, attrs, extra_deny.reason)
        decision = self.rbac.authorize(user, attrs)
        if not decision.allowed:
            raise forbidden(user, attrs, decision.reason)

    def endpoint(self, method: str, path: str) -> str | None:
        """Which auth endpoint a path is (``token``, ``ssr``, ``ssar``, ``sar``, ``lsar``, ``ssrr``), if any."""
        if _TOKEN_PATH.match(path):
            return "token"
        if path == _SELF_REVIEW:
            return "ssr"
        if _LOCAL_REVIEW.match(path):
            return "lsar"
        if path.startswith(_REVIEWS):
            return {"selfsubjectaccessreviews": "ssar", "subjectaccessreviews": "sar",
                    "selfsubjectrulesreviews": "ssrr"}.get(path[len(_REVIEWS):])
        return None

    def token(self, path: str, body: JsonObject) -> JsonObject:
        match = _TOKEN_PATH.match(path)
        assert match is not None
        return self.authn.token_request(match.group(1), match.group(2), body)

    def review(self, kind: str, path: str, user: UserInfo, review: JsonObject,
               extra: Any = None) -> JsonObject:
        """Answer an access or rules review; ``extra(user, attrs)``: the deny layer ahead of RBAC."""
        spec = review.get("spec") or {}
        if kind == "ssrr":
            namespace = str(spec.get("namespace") or "")
            return {**_review_shell(review, "SelfSubjectRulesReview"), "status": self.rbac.rules_review(user, namespace)}
        if kind in ("sar", "lsar"):
            subject = UserInfo(str(spec.get("user") or ""), tuple(spec.get("groups") or ()), str(spec.get("uid") or ""))
            if not subject.name and not subject.groups:
                raise ApiError(422, Reason.INVALID, "spec.user: Invalid value: \"\": at least one of user or group must be specified")
        else:
            subject = user
        attrs = Attributes.from_review(spec)
        if kind == "lsar":
            match = _LOCAL_REVIEW.match(path)
            assert match is not None
            if attrs.namespace != match.group(1):
                raise ApiError(400, Reason.BAD_REQUEST,
                               f"spec.resourceAttributes.namespace must match namespace: {match.group(1)}")
        status: JsonObject
        deny = extra(subject, attrs) if extra is not None else None
        if deny is not None and deny.denied:
            status = {"allowed": False, "denied": True, "reason": deny.reason}
        elif not self.enabled:
            status = {"allowed": True}
        else:
            decision = self.rbac.authorize(subject, attrs, record=False)
            status = {"allowed": decision.allowed}
            if decision.reason:
                status["reason"] = decision.reason
        kinds = {"ssar": "SelfSubjectAccessReview", "sar": "SubjectAccessReview", "lsar": "LocalSubjectAccessReview"}
        return {**_review_shell(review, kinds[kind]), "status": status}


def _review_shell(review: JsonObject, kind: str) -> JsonObject:
    return {
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None, **(review.get("metadata") or {})},
        "spec": review.get("spec") or {},
    }


def granted_by(docs: Iterable[JsonObject], user: UserInfo) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) granted to ``user`` by the roles and bindings among ``docs``
    (manifests, not the store), with ``*`` left as written."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs
             if d.get("kind") in ("Role", "ClusterRole")}
    out: set[tuple[str, str, str]] = set()
    for d in docs:
        if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bns = d["metadata"].get("namespace", "") if d["kind"] == "RoleBinding" else ""
        if not any(applies_to(s, user, bns) for s in d.get("subjects") or []):
            continue
        ref = d["roleRef"]
        role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else "", ref["name"]))
        for rule in (role or {}).get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((group, resource, verb))
    return out
