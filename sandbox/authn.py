"""Who a request is: bearer-token authentication and the identities it yields, for the sandbox's API server.

The first of the real server's two steps before authorization (the second, impersonation, is
:mod:`.impersonation`); :mod:`.auth` holds what comes after (request attributes, RBAC, the reviews).

- The admin token (:attr:`Authenticator.admin_token`, the kubeconfig's) and the server's static
  ``tokens`` are the user ``kubernetes-admin`` in group ``system:masters``.
- ServiceAccount tokens, issued by :meth:`Authenticator.token_for` or the TokenRequest subresource
  (``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``, what ``kubectl create token``
  calls), are the user ``system:serviceaccount:<ns>:<name>`` in the groups
  ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and ``system:authenticated``; such a
  token stops working when it expires or when its ServiceAccount is deleted (or made again).
- No token is ``system:anonymous`` (group ``system:unauthenticated``), as with
  ``--anonymous-auth=true``; a token nobody issued is ``401 Unauthorized``.

Kept apart from :mod:`.auth` because identities are what both authorization and impersonation
read, and neither should have to import the other to know who a user is.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass

from .object_validation import dns_subdomain_errors
from .store import ApiError, JsonObject, Reason, Resource, Store, rfc3339
from .workload_api import dns_label_errors

ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"
DEFAULT_TOKEN_SECONDS = 3600


# --------------------------------------------------------------------------- identities


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a request is: a name and groups, as the authenticators hand them on."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``user.Info.GetExtra()``: for a pod's token, ``authentication.kubernetes.io/node-name`` and the like."""

    def to_json(self) -> JsonObject:
        extra = {"extra": {k: list(v) for k, v in self.extra}} if self.extra else {}
        return {"username": self.name, "uid": self.uid, "groups": list(self.groups), **extra}


ADMIN = UserInfo(ADMIN_USER, (MASTERS, AUTHENTICATED))
ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))


def service_account_user(
    namespace: str, name: str, uid: str = "", extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> UserInfo:
    return UserInfo(
        f"{SA_PREFIX}{namespace}:{name}", (SA_GROUP, f"{SA_GROUP}:{namespace}", AUTHENTICATED), uid, extra
    )


EXTRA_PREFIX = "authentication.kubernetes.io/"
"""The user-info extras a ServiceAccount token carries (kube-apiserver 1.30 and later): the
token's ``credential-id``, and for a token bound to a pod ``pod-name``, ``pod-uid`` and the
``node-name`` and ``node-uid`` of the node the pod runs on (what NodeRestriction-like policies
read)."""


def parse_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of a ServiceAccount user name, else ``None`` (``serviceaccount.SplitUsername``:
    exactly ``system:serviceaccount:<ns>:<name>`` with a valid namespace (a DNS label) and ServiceAccount
    name (a DNS subdomain); anything else is an ordinary user's name)."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX):].split(":")
    if len(parts) != 2 or dns_label_errors(parts[0]) or dns_subdomain_errors(parts[1]):
        return None
    return parts[0], parts[1]


@dataclass(slots=True)
class _IssuedToken:
    namespace: str
    name: str
    uid: str
    expires: float | None
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Authenticator:
    """Bearer tokens to users: the admin's, static ones, and ServiceAccount tokens."""

    def __init__(self, store: Store, admin_token: str, static_tokens: set[str] | None) -> None:
        self.store = store
        self.admin_token = admin_token
        self.static_tokens = static_tokens
        """The server's ``tokens`` option (the same set object): authenticated as the admin."""
        self._issued: dict[str, _IssuedToken] = {}
        self._serial = 0

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The user behind an ``Authorization`` header; ``401`` for a token nobody issued."""
        if not authorization:
            return ANONYMOUS_USER
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if token == self.admin_token or (self.static_tokens and token in self.static_tokens):
            return ADMIN
        issued = self._issued.get(token)
        if issued is None:
            raise unauthorized()
        if issued.expires is not None and self.store.clock() >= issued.expires:
            raise unauthorized()
        try:
            sa = self.store.get_stored(Resource.SERVICEACCOUNTS, issued.name, issued.namespace)
        except ApiError:
            raise unauthorized() from None
        if issued.uid and sa.obj["metadata"].get("uid") != issued.uid:
            raise unauthorized()  # the ServiceAccount was deleted and created again
        return service_account_user(issued.namespace, issued.name, issued.uid, issued.extra)

    def token_for(self, namespace: str, name: str, expiration_seconds: int | None = None, pod: str | None = None) -> str:
        """A token for an existing ServiceAccount (``None``: it never expires); ``404`` if there is none.
        ``pod``: bound to that pod of the namespace, as the kubelet's projected token is (its user
        info then names the pod and its node)."""
        bound = {"kind": "Pod", "name": pod} if pod is not None else None
        return self._issue(namespace, name, expiration_seconds, bound)[0]

    def _bound_extra(self, namespace: str, bound: JsonObject | None) -> list[tuple[str, tuple[str, ...]]]:
        """The extras of a token bound to a Pod (``404`` if the pod is not there, ``409`` if its uid differs)."""
        if not isinstance(bound, dict) or bound.get("kind") != "Pod":
            return []
        pod = self.store.get_stored(Resource.PODS, str(bound.get("name") or ""), namespace).obj
        meta = pod["metadata"]
        if bound.get("uid") and bound["uid"] != meta.get("uid"):
            raise ApiError(409, Reason.CONFLICT, f'the UID in the bound object reference ({bound["uid"]}) does not match the UID in record. The object might have been deleted and then recreated')
        extra = [(EXTRA_PREFIX + "pod-name", (meta["name"],)), (EXTRA_PREFIX + "pod-uid", (meta.get("uid", ""),))]
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            extra.append((EXTRA_PREFIX + "node-name", (node,)))
            if self.store.exists(Resource.NODES, node):
                extra.append((EXTRA_PREFIX + "node-uid", (self.store.get_stored(Resource.NODES, node).obj["metadata"].get("uid", ""),)))
        return extra

    def _issue(
        self, namespace: str, name: str, expiration_seconds: int | None, bound: JsonObject | None = None
    ) -> tuple[str, float | None]:
        sa = self.store.get_stored(Resource.SERVICEACCOUNTS, name, namespace)
        uid = sa.obj["metadata"].get("uid", "")
        now = self.store.clock()
        expires = None if expiration_seconds is None else now + expiration_seconds
        extra = self._bound_extra(namespace, bound)
        self._serial += 1
        extra.append((EXTRA_PREFIX + "credential-id", (f"JTI={self._serial}",)))
        claims = {
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": f"{SA_PREFIX}{namespace}:{name}",
            "aud": ["https://kubernetes.default.svc.cluster.local"],
            "iat": int(now),
            "jti": str(self._serial),
            **({"exp": int(expires)} if expires is not None else {}),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        }
        token = ".".join(
            _b64(part)
            for part in (
                json.dumps({"alg": "RS256", "kid": "usher-sandbox"}).encode(),
                json.dumps(claims, separators=(",", ":")).encode(),
                hashlib.sha256(f"{self._serial}/{namespace}/{name}/{uid}".encode()).digest(),
            )
        )
        self._issued[token] = _IssuedToken(namespace, name, uid, expires, tuple(sorted(extra)))
        return token, expires

    def token_request(self, namespace: str, name: str, body: JsonObject) -> JsonObject:
        """Answer a TokenRequest (``authentication.k8s.io/v1``) for ``namespace/name``."""
        spec = body.get("spec") or {}
        seconds = spec.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS
        if not isinstance(seconds, int) or seconds < 600:
            raise ApiError(
                422,
                Reason.INVALID,
                f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
                "Invalid value: may not specify a duration less than 10 minutes",
            )
        token, expires = self._issue(namespace, name, seconds, spec.get("boundObjectRef"))
        assert expires is not None
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {
                "audiences": spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"],
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef"),
            },
            "status": {"token": token, "expirationTimestamp": rfc3339(expires)},
        }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unauthorized() -> ApiError:
    return ApiError(401, Reason.UNAUTHORIZED, "Unauthorized")


def self_subject_review(user: UserInfo, now: float) -> JsonObject:
    """Answer a SelfSubjectReview (``authentication.k8s.io/v1``, what ``kubectl auth whoami`` asks):
    the user the request runs as, after impersonation; empty fields left out as the API's
    ``omitempty`` does."""
    info: JsonObject = {"username": user.name}
    if user.uid:
        info["uid"] = user.uid
    if user.groups:
        info["groups"] = list(user.groups)
    if user.extra:
        info["extra"] = {key: list(values) for key, values in user.extra}
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": rfc3339(now)},
        "status": {"userInfo": info},
    }
