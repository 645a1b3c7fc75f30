"""User impersonation (the ``Impersonate-*`` headers) for the sandbox's API server, as kube-apiserver's filter does it.

``kubectl --as=NAME --as-group=G --as-uid=U`` sends ``Impersonate-User``, one ``Impersonate-Group``
per group, ``Impersonate-Uid`` and ``Impersonate-Extra-<key>`` headers. The real server reads them
after authentication and before authorization, and so does the sandbox:

- Each thing asked for is one check of the verb ``impersonate`` by the authenticated caller, in
  this order: the user (resource ``users`` in the core group, or for a name of the form
  ``system:serviceaccount:<ns>:<name>`` the ServiceAccount: ``serviceaccounts`` named ``<name>``
  in namespace ``<ns>``), each group (``groups``), each extra value (``userextras/<key>`` in
  ``authentication.k8s.io``), the uid (``uids`` in ``authentication.k8s.io``). The first one denied
  answers ``403`` with the real message, e.g. ``users "alice" is forbidden: User "…" cannot
  impersonate resource "users" in API group "" at the cluster scope``.
- Groups, extras or a uid without a user are refused before any check, with the real server's
  plain-text ``500`` (``requested [...] without impersonating a user``).
- The request then runs as the impersonated user: its groups are those asked for, or for a
  ServiceAccount asked for without groups ``system:serviceaccounts`` and
  ``system:serviceaccounts:<ns>``; ``system:authenticated`` is added unless
  ``system:authenticated`` or ``system:unauthenticated`` is among them (``system:anonymous`` gets
  ``system:unauthenticated`` instead). Nothing of the caller's identity is kept.

With authorization off (no ``--rbac``: the real server's ``AlwaysAllow``) every impersonation is
allowed. A module of its own because it is a step of the request's identity between
authentication (:mod:`.authn`) and authorization (:mod:`.auth`), and it needs both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import unquote, urlencode

from usher.engine.backends.http_server import Request

from .auth import Attributes
from .authn import ANONYMOUS, AUTHENTICATED, SA_GROUP, SA_PREFIX, UNAUTHENTICATED, UserInfo, parse_service_account

USER_HEADER = "impersonate-user"
GROUP_HEADER = "impersonate-group"
UID_HEADER = "impersonate-uid"
EXTRA_PREFIX = "impersonate-extra-"
AUTHENTICATION_GROUP = "authentication.k8s.io"
VERB = "impersonate"


class Target(StrEnum):
    """What one impersonation request asks to act as: the resource its ``impersonate`` check names."""

    USER = "users"
    SERVICE_ACCOUNT = "serviceaccounts"
    GROUP = "groups"
    USER_EXTRA = "userextras"
    UID = "uids"


_KINDS = {Target.USER: "User", Target.SERVICE_ACCOUNT: "ServiceAccount", Target.GROUP: "Group",
          Target.USER_EXTRA: "UserExtra", Target.UID: "UID"}


@dataclass(frozen=True, slots=True)
class Impersonation:
    """One thing a request asks to impersonate (upstream's ObjectReference per header value)."""

    target: Target
    name: str
    namespace: str = ""
    extra_key: str = ""

    def attributes(self) -> Attributes:
        """The ``impersonate`` check the caller must pass for this."""
        group = AUTHENTICATION_GROUP if self.target in (Target.USER_EXTRA, Target.UID) else ""
        return Attributes(VERB, True, group, "v1", str(self.target), self.extra_key, self.name, self.namespace)

    def go_text(self) -> str:
        """As Go's ``%v`` prints the ObjectReference (Kind, Namespace, Name, UID, APIVersion,
        ResourceVersion, FieldPath), which the real server's error message shows."""
        version = f"{AUTHENTICATION_GROUP}/v1" if self.target in (Target.USER_EXTRA, Target.UID) else ""
        return "{" + " ".join((_KINDS[self.target], self.namespace, self.name, "", version, "", self.extra_key)) + "}"


class ImpersonationError(Exception):
    """Groups, extras or a uid asked for without a user: the real server's plain-text ``500``."""

    def __init__(self, requests: list[Impersonation]) -> None:
        super().__init__("requested [" + " ".join(r.go_text() for r in requests) + "] without impersonating a user")

    def body(self, request: Request) -> str:
        """``responsewriters.InternalError``'s text for ``request`` (its URI quoted, ``&<>`` escaped)."""
        uri = request.path + ("?" + urlencode(request.query, doseq=True) if request.query else "")
        text = f"Internal Server Error: {json.dumps(uri)}: {self}"
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") + "\n"


_BAD_ESCAPE = re.compile(r"%(?![0-9a-fA-F]{2})")


def _extra_key(encoded: str) -> str:
    """``unescapeExtraKey``: %-decoded, or kept as sent when it is not a valid escape."""
    return encoded if _BAD_ESCAPE.search(encoded) else unquote(encoded)


def requested(request: Request) -> list[Impersonation]:
    """What ``request``'s headers ask to impersonate, in the filter's order (``buildImpersonationRequests``)."""
    out: list[Impersonation] = []
    user = (request.header_values(USER_HEADER) or [""])[0]
    if user:
        sa = parse_service_account(user)
        out.append(Impersonation(Target.SERVICE_ACCOUNT, sa[1], sa[0]) if sa else Impersonation(Target.USER, user))
    out.extend(Impersonation(Target.GROUP, group) for group in request.header_values(GROUP_HEADER))
    extras = sorted(name for name in request.headers if name.startswith(EXTRA_PREFIX))
    for name in extras:
        key = _extra_key(name[len(EXTRA_PREFIX):])
        out.extend(Impersonation(Target.USER_EXTRA, value, extra_key=key) for value in request.header_values(name))
    uid = (request.header_values(UID_HEADER) or [""])[0]
    if uid:
        out.append(Impersonation(Target.UID, uid))
    if out and not user:
        raise ImpersonationError(out)
    return out


Authorize = Callable[[UserInfo, Attributes], None]
"""Raises the ``403`` when the user may not do what the attributes say."""


def acting_user(requester: UserInfo, request: Request, authorize: Authorize | None) -> UserInfo:
    """Who ``request`` runs as: ``requester``, or whom its headers impersonate once ``authorize``
    (``None``: authorization is off) has allowed each of them."""
    wanted = requested(request)
    if not wanted:
        return requester
    groups_given = any(w.target is Target.GROUP for w in wanted)
    name, uid = "", ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for want in wanted:
        if authorize is not None:
            authorize(requester, want.attributes())
        match want.target:
            case Target.SERVICE_ACCOUNT:
                name = f"{SA_PREFIX}{want.namespace}:{want.name}"
                if not groups_given:
                    groups = [SA_GROUP, f"{SA_GROUP}:{want.namespace}"]
            case Target.USER:
                name = want.name
            case Target.GROUP:
                groups.append(want.name)
            case Target.USER_EXTRA:
                extra.setdefault(want.extra_key, []).append(want.name)
            case Target.UID:
                uid = want.name
    if name != ANONYMOUS:
        if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(name, tuple(groups), uid, tuple((k, tuple(v)) for k, v in sorted(extra.items())))
