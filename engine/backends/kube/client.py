"""The Kubernetes API client of usher's kube backend.

Everything usher says to a cluster goes through :class:`KubeClient` over HTTP/1.1 with kept-alive
connections, through aiohttp's client: requests on a pool of ``pool_size`` (16) connections, at
most one request in flight on each (the rest wait their turn in the client, in order); watches on
a pool of their own (``WATCH_CONNECTIONS``), each holding one connection for as long as it
streams. (aiohttp rather than httpx because a request's CPU cost is most of a bind's; the
measurements are in docs/benchmarks.md, "Kubernetes backend".) The server's address,
its TLS material (CA, client certificate, ``insecure-skip-tls-verify``, ``tls-server-name`` for
SNI) and the proxy (the kubeconfig's ``proxy-url``, else ``HTTPS_PROXY``/``HTTP_PROXY``/
``ALL_PROXY`` unless ``NO_PROXY`` names the server) are read from the credentials.

Credentials come from ``kubernetes.config`` (:class:`Credentials`): an explicit kubeconfig
path, else ``$KUBECONFIG`` or ``~/.kube/config``, else the in-cluster service account. The
library fills a ``kubernetes.client.Configuration``; the address and TLS material build the
HTTP sessions, and the ``Authorization`` header is read through ``Configuration.auth_settings()``
before every request, because that call runs the library's refresh hook (an exec plugin whose
token has expired runs again; the in-cluster token file is re-read every minute). The hook may
run a subprocess, so it runs in a worker thread, one at a time. A static token (a kubeconfig
user with ``token`` or ``tokenFile`` and neither ``exec`` nor ``auth-provider``: the library
sets a hook for it too, but the hook never changes it) is read once a minute instead. A 401 reloads the credentials
once (rebuilding the HTTP sessions if the address, TLS identity or proxy changed) and repeats the request.
Anything that means "there is no usable cluster" is a :class:`ClusterAccessError` whose message is
one line for the user; when :meth:`KubeClient.connect` finds no usable cluster, it ends with a
pointer to ``usher demo``. A server whose certificate does not verify (a kubeconfig without the
cluster's CA, or a server that is not the one it names) is :class:`ServerNotTrusted`, at once.

Failures the server reports arrive as Kubernetes ``Status`` bodies and become :class:`ApiError`
(code, reason, message, retry_after), with subclasses for the codes callers act on.

Retries (:class:`RetryPolicy`, bounded attempts):

- 429 is retried for every verb (the server refused the request before doing anything),
  waiting ``Retry-After`` when the server gives one; except an eviction refused by a
  PodDisruptionBudget, which is raised at once as :class:`DisruptionBudgetBlocked`.
- A connection that was never made is retried for every verb.
- 5xx, timeouts and broken connections are ambiguous (the server may have acted), so they are
  retried with capped exponential backoff and jitter only for requests that are safe to repeat:
  GET, PUT (its resourceVersion precondition turns a repeat into a 409), DELETE, merge and
  strategic-merge PATCH, and the POSTs whose repeat is recognisable: a binding (409 "already
  assigned" to the node we asked for is success), an eviction, an event, an access review.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import random
import ssl
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from http import HTTPStatus
from typing import Any, Self
from urllib.parse import SplitResult, urlsplit

import aiohttp
from kubernetes.client import Configuration
from kubernetes.config import (
    ConfigException,
    list_kube_config_contexts,
    load_incluster_config,
    load_kube_config,
)
from kubernetes.config.kube_config import KubeConfigMerger

log = logging.getLogger(__name__)

Obj = dict[str, Any]
"""A Kubernetes object (or list, or Status) as decoded JSON."""
Objs = list[Obj]

COMPONENT = "usher"
DEMO_HINT = "or run `usher demo` to try usher on a simulated cluster"
WATCH_READ_GRACE = 30.0
#: connections for watches, apart from the requests' pool (usher runs a dozen or so informers)
WATCH_CONNECTIONS = 32
#: how long an idle kept-alive connection is kept
KEEPALIVE = 60.0
#: how long an Authorization header is used before it is read again (client-go re-reads a
#: projected service-account token every minute too)
AUTH_REFRESH = 60.0
"""Seconds past a watch's ``timeoutSeconds`` after which a silent stream counts as hung."""


MaySend = Callable[[], bool]
"""Asked before each attempt of a write (``KubeClient._call``): False stops it (:class:`NotSent`)."""

ContactListener = Callable[[bool, str | None], None]
"""Told of each exchange with the API server (:meth:`KubeClient.add_contact_listener`)."""


# --- errors -----------------------------------------------------------------------------------


class KubeError(Exception):
    """Anything this package raises about talking to the Kubernetes API."""


class ClusterAccessError(KubeError):
    """usher cannot use a cluster at all; ``str(error)`` is one line meant for the user."""


class KubeConfigError(ClusterAccessError):
    """No usable credentials: missing kubeconfig, unknown context, bad TLS material."""


class ClusterUnreachable(ClusterAccessError):
    """The API server cannot be reached (after retries), or the connection broke."""


class ServerNotTrusted(ClusterUnreachable):
    """The API server's certificate does not verify against the CA usher was given (the
    kubeconfig's ``certificate-authority``/``-data``, else the system's) or not for its name:
    nothing was sent, and nothing is retried, since a repeat meets the same certificate."""


class NotSent(KubeError):
    """The caller's ``may_send`` said no before an attempt: the request (or its repeat) was not
    sent. An earlier attempt may still have reached the server."""


class ApiError(KubeError):
    """A request the API server answered with a failure ``Status``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        retry_after: float | None = None,
        causes: tuple[Obj, ...] = (),
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.causes = causes


class Unauthorized(ApiError):
    """401: the credentials were rejected (even after reloading them)."""


class Forbidden(ApiError):
    """403: the identity may not do this."""


class NotFound(ApiError):
    """404: no such object."""


class Conflict(ApiError):
    """409: a stale resourceVersion, or a pod already bound elsewhere."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found the name taken."""


class Gone(ApiError):
    """410: the resourceVersion (or list continue token) is too old; list again."""


class TooManyRequests(ApiError):
    """429: throttled; ``retry_after`` says when to come back."""


class DisruptionBudgetBlocked(TooManyRequests):
    """An eviction refused because it would violate a PodDisruptionBudget."""


_ERROR_BY_CODE: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: TooManyRequests,
}


def api_error(code: int, status: Obj | None, retry_after_header: str | None = None) -> ApiError:
    """The :class:`ApiError` for an HTTP code and the ``Status`` body that came with it."""
    status = status if isinstance(status, dict) else {}
    details = status.get("details") or {}
    reason = status.get("reason") or _phrase(code)
    message = status.get("message") or reason
    causes = tuple(details.get("causes") or ())
    retry_after = _seconds(retry_after_header)
    if retry_after is None:
        retry_after = _seconds(details.get("retryAfterSeconds"))
    if reason == "AlreadyExists":
        kind: type[ApiError] = AlreadyExists
    elif code == 429 and _blames_disruption_budget(message, causes):
        kind = DisruptionBudgetBlocked
    else:
        kind = _ERROR_BY_CODE.get(code, ApiError)
    return kind(code, reason, message, retry_after, causes)


def _phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _seconds(value: object) -> float | None:
    """A delay in seconds from a Retry-After header or retryAfterSeconds; None if absent or odd."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def _blames_disruption_budget(message: str, causes: tuple[Obj, ...]) -> bool:
    # metav1.StatusCause serialises its Type as "reason"
    if any(cause.get("reason") == "DisruptionBudget" for cause in causes):
        return True
    return "disruption budget" in message.lower()


@dataclass(frozen=True, slots=True)
class _Reply:
    """A response read whole: its status, headers and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    charset: str | None = None

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        """The body decoded by the charset the server named (UTF-8 if none or unknown), as httpx did."""
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _response_error(response: _Reply) -> ApiError:
    try:
        status = response.json()
    except ValueError:
        status = {"message": response.text[:200] or _phrase(response.status)}
    return api_error(response.status, status, response.headers.get("Retry-After"))


# --- small value types ------------------------------------------------------------------------


class PatchType(StrEnum):
    """How a PATCH body is interpreted (its Content-Type)."""

    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"


class WatchEventType(StrEnum):
    """The ``type`` of one watch event."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    ERROR = "ERROR"


class EventType(StrEnum):
    """The ``type`` of a core v1 Event."""

    NORMAL = "Normal"
    WARNING = "Warning"


class ConditionStatus(StrEnum):
    """The ``status`` of a pod condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change from a watch stream (ADDED, MODIFIED, DELETED or BOOKMARK)."""

    type: WatchEventType
    object: Obj

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of a (possibly paginated) list and the resourceVersion to watch from."""

    items: Objs
    resource_version: str


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about (its ``involvedObject``). Give the ``uid``: ``kubectl describe``
    lists an object's Events by ``involvedObject.uid``, so an Event without it is in no
    ``describe``; the ``resourceVersion`` says which version of the object it is about, as
    client-go's ``reference.GetReference`` sets it."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def to(cls, obj: Obj, kind: str, api_version: str = "v1") -> ObjectRef:
        """The reference to ``obj`` as it is now (its kind and apiVersion given: a watched or
        listed item may not carry them)."""
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("kind") or kind), str(meta.get("name", "")), str(meta.get("namespace", "")), str(meta.get("uid", "")),
                   str(obj.get("apiVersion") or api_version), str(meta.get("resourceVersion", "")))

    def as_dict(self) -> Obj:
        ref: Obj = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        if self.resource_version:
            ref["resourceVersion"] = self.resource_version
        return ref


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource type and the URL paths of its collections, objects and subresources."""

    api_version: str
    plural: str

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """``/api/v1/namespaces/ns/pods/name/binding`` and the like (unset parts left out)."""
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [root]
        if namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


PODS = Resource("v1", "pods")
NODES = Resource("v1", "nodes")
EVENTS = Resource("v1", "events")
LEASES = Resource("coordination.k8s.io/v1", "leases")
SELF_SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io/v1", "selfsubjectaccessreviews")


def format_time(moment: datetime) -> str:
    """A ``metav1.Time``: RFC 3339 in UTC with whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds (``2006-01-02T15:04:05.000000Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with jitter: try n waits between half and all of
    ``min(cap, base * 2**(n-1))`` seconds, so that many clients do not retry in step."""

    base: float = 0.2
    cap: float = 10.0

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(attempt - 1, 32))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long requests are retried; ``Retry-After`` waits are capped too."""

    attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    max_retry_after: float = 30.0


# --- credentials ------------------------------------------------------------------------------


class Credentials:
    """Where the cluster is and who usher is there, loaded through ``kubernetes.config``.

    Resolution order: the explicit kubeconfig path; else ``$KUBECONFIG`` (a path list, as
    kubectl reads it) or ``~/.kube/config``; else the in-cluster service account. ``load`` and
    ``authorization`` block (files, exec plugins): call them from a worker thread.
    """

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.config = Configuration()
        self.generation = 0
        self.refreshes = True
        """Whether the token may change without a reload (an ``exec`` plugin or an ``auth-provider``
        in the kubeconfig's user, or the in-cluster token file): then it is asked for every request."""
        self._source = "the in-cluster service account"

    def load(self) -> None:
        """(Re)read the credentials; raises :class:`KubeConfigError` with a one-line message."""
        config = Configuration()
        path = self._kubeconfig_path()
        try:
            if path is None:
                self._source = "the in-cluster service account"
                load_incluster_config(client_configuration=config)
                refreshes = True
            else:
                self._source = f"kubeconfig {path}"
                self._check_context(path)
                load_kube_config(
                    config_file=path,
                    context=self.context,
                    client_configuration=config,
                    persist_config=False,
                )
                refreshes = _user_refreshes(path, self.context)
        except ConfigException as exc:
            raise KubeConfigError(f"cannot use {self._source}: {_one_line(exc)}; {DEMO_HINT}") from exc
        self.config = config
        self.refreshes = refreshes
        self.generation += 1

    def describe(self) -> str:
        context = f" (context {self.context})" if self.context else ""
        return f"{self._source}{context}"

    def authorization(self) -> str | None:
        """The Authorization header value, refreshed by the library's hook when it is due."""
        setting = self.config.auth_settings().get("BearerToken")
        return setting["value"] if setting else None

    def _kubeconfig_path(self) -> str | None:
        """The kubeconfig (or ``$KUBECONFIG`` path list) to read; None for in-cluster."""
        if self.kubeconfig:
            path = os.path.expanduser(self.kubeconfig)
            if not os.path.isfile(path):
                raise KubeConfigError(f"kubeconfig {path} does not exist; pass another --kubeconfig, {DEMO_HINT}")
            return path
        listed = os.environ.get("KUBECONFIG", "")
        if listed:
            if any(os.path.isfile(os.path.expanduser(p)) for p in listed.split(os.pathsep) if p):
                return listed
            raise KubeConfigError(f"$KUBECONFIG ({listed}) names no existing file; {DEMO_HINT}")
        default = os.path.expanduser("~/.kube/config")
        if os.path.isfile(default):
            return default
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return None
        raise KubeConfigError(
            f"no kubeconfig (~/.kube/config, $KUBECONFIG) and not running in a cluster; "
            f"pass --kubeconfig, {DEMO_HINT}"
        )

    def _check_context(self, path: str) -> None:
        if not self.context:
            return
        contexts, _ = list_kube_config_contexts(config_file=path)
        names = [context["name"] for context in contexts]
        if self.context not in names:
            raise KubeConfigError(
                f"kubeconfig {path} has no context {self.context!r} "
                f"(it has: {', '.join(names) or 'none'}); {DEMO_HINT}"
            )


def _user_refreshes(path: str, context: str | None) -> bool:
    """Whether the kubeconfig user of ``context`` (None: the current context) gets its token from
    something that hands out new ones (``exec``, ``auth-provider``). False for a static
    ``token``/``tokenFile``, a client certificate or basic auth; True when in doubt."""
    try:
        contexts, current = list_kube_config_contexts(config_file=path)
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        user_name = ((chosen or {}).get("context") or {}).get("user")
        if not user_name:
            return False  # no user: no token at all
        user = KubeConfigMerger(path).config["users"].get_with_name(user_name, safe=True)
        entry = (user.value.get("user") if user is not None else None) or {}
    except (ConfigException, KeyError, TypeError, AttributeError, OSError):
        return True
    return "exec" in entry or "auth-provider" in entry


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _transport_identity(config: Configuration) -> tuple[object, ...]:
    """What the HTTP sessions are built from; when it changes they must be rebuilt."""
    return (
        config.host,
        config.ssl_ca_cert,
        config.cert_file,
        config.key_file,
        config.verify_ssl,
        config.proxy,
        getattr(config, "no_proxy", None),
        getattr(config, "tls_server_name", None),
    )


def _tls_context(config: Configuration) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _proxy(config: Configuration) -> str | None:
    """The proxy for the API server, as ``kubernetes.client`` resolves it: the kubeconfig's
    ``proxy-url``, else ``HTTPS_PROXY``/``HTTP_PROXY`` for the server's scheme or ``ALL_PROXY``
    (recent versions of the library fill ``config.proxy`` from them; older ones leave it to the
    HTTP client, as httpx did), and none when ``NO_PROXY`` names the server. A proxy must speak
    HTTP or HTTPS (aiohttp has no SOCKS)."""
    proxies = urllib.request.getproxies_environment()
    server = urlsplit(str(config.host))
    proxy = config.proxy or proxies.get(server.scheme) or proxies.get("all") or None
    if proxy is None:
        return None
    no_proxy = getattr(config, "no_proxy", None)
    if _bypasses_proxy(server, proxies.get("no", "") if no_proxy is None else no_proxy):
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    if urlsplit(proxy).scheme not in ("http", "https"):
        raise KubeConfigError(f"proxy {proxy} is not an HTTP or HTTPS proxy; {DEMO_HINT}")
    return proxy


def _bypasses_proxy(server: SplitResult, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` (``*``, host names and their subdomains, ``host:port``, addresses and
    networks) names the server, by the rules of ``kubernetes.client``."""
    host = (server.hostname or "").lower()
    if not host:
        return True
    netloc = server.netloc.lower().rpartition("@")[2]
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (entry.strip().lower() for entry in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        entry = entry.lstrip(".")
        if entry in (host, netloc) or host.endswith("." + entry) or netloc.endswith("." + entry):
            return True
    return False


# --- the client -------------------------------------------------------------------------------

#: what a failed exchange raises, below the HTTP answer: no connection, a broken or silent one
#: (aiohttp's timeouts are ``TimeoutError`` too), an unreadable answer
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
#: failures before the request left: no connection could be made (refused, no such host, TLS
#: handshake, proxy) or none in time; a POST may be repeated after these
_NEVER_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
#: the server's certificate did not verify (one of the never-sent failures, but not worth a repeat)
_UNTRUSTED = aiohttp.ClientConnectorCertificateError


class KubeClient:
    """Requests and watches against one API server, with retries and credential refresh.

    Build it with :meth:`connect` (loads credentials and checks the server answers), use it as
    an async context manager or call :meth:`aclose`. ``sleep`` is how retries wait (injectable,
    so tests can see the delays).
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        retry: RetryPolicy | None = None,
        pool_size: int = 16,
        timeout: float = 30.0,
        review_ttl: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._credentials = credentials
        self._sleep = sleep
        self._retry = retry or RetryPolicy()
        self._pool_size = pool_size
        self._timeout = timeout
        self._review_ttl = review_ttl
        self._reviews: dict[tuple[str, ...], tuple[float, bool]] = {}
        self._auth_lock = asyncio.Lock()
        #: the Authorization header as last read, its credentials' generation and when (monotonic)
        self._auth: tuple[str | None, int, float] | None = None
        #: requests in flight on the requests' pool, at most one per connection: the rest wait
        #: here, in order (thousands of Events may be queued at once)
        self._slots = asyncio.Semaphore(pool_size)
        self._requests_timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout, sock_read=timeout)
        self._contact_listeners: list[ContactListener] = []
        self._build_sessions()

    @property
    def pool_size(self) -> int:
        """How many requests (not watches) may be in flight at once."""
        return self._pool_size

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, **options: Any
    ) -> KubeClient:
        """Load credentials, build the client and make sure the API server answers."""
        credentials = Credentials(kubeconfig, context)
        await asyncio.to_thread(credentials.load)
        try:
            client = cls(credentials, **options)
        except OSError as exc:  # unreadable CA or client certificate files (ssl.SSLError too)
            raise KubeConfigError(
                f"bad TLS material in {credentials.describe()}: {_one_line(exc)}; {DEMO_HINT}"
            ) from exc
        try:
            await client._probe()
        except BaseException:
            await client.aclose()
            raise
        return client

    @property
    def host(self) -> str:
        return str(self._credentials.config.host)

    async def aclose(self) -> None:
        await self._session.close()
        await self._streams.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- generic operations ---

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> Obj:
        return await self._call("GET", path, params=params)

    async def get_text(self, path: str, *, params: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is plain text (a pod's ``log``), with the same retries and errors."""
        return await self._call("GET", path, params=params, as_text=True)

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ObjectList:
        """All objects under a collection path, fetched ``limit`` at a time."""
        params = _selectors(label_selector, field_selector) | {"limit": str(limit)}
        items: Objs = []
        while True:
            page = await self._call("GET", path, params=params)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return ObjectList(items, str(metadata.get("resourceVersion", "")))
            params = params | {"continue": token}

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes under a collection path after ``resource_version``, bookmarks included.

        The iterator ends when the server closes the stream (resume from the last
        resourceVersion seen); a broken or silent connection raises :class:`ClusterUnreachable`;
        a resourceVersion too old to resume from raises :class:`Gone`, whether the server says
        so with HTTP 410 or with an ERROR event. Close the iterator (``contextlib.aclosing``)
        to stop watching early. ``on_open`` is called once the server has accepted the watch
        (its response began), which on a quiet collection may be long before the first event.
        """
        params = _selectors(label_selector, field_selector) | {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        # a connection from the watches' pool, or a new one, within the timeout (httpx's pool and
        # connect timeouts); then at most timeout_seconds and a grace between two reads
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self._timeout, sock_connect=self._timeout, sock_read=timeout_seconds + WATCH_READ_GRACE
        )
        try:
            response = await self._send("GET", path, params=params, stream=True, timeout=timeout)
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        ended = False
        try:
            if not 200 <= response.status < 300:
                body = await response.read()
                raise _response_error(_Reply(response.status, response.headers, body, response.charset))
            if on_open is not None:
                on_open()
            # lines of any length (aiohttp's readline refuses lines past its buffer's limit)
            rest = b""
            async for chunk in response.content.iter_any():
                lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        yield _watch_event(line.decode("utf-8", errors="replace"))
            if rest.strip():
                yield _watch_event(rest.decode("utf-8", errors="replace"))
            ended = True
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        finally:
            if ended:
                response.release()  # read to its end: the connection may serve another watch
            else:
                response.close()

    async def create(self, path: str, obj: Obj, *, retry_ambiguous: bool = False) -> Obj:
        """POST ``obj`` to a collection. Set ``retry_ambiguous`` only if a repeat is harmless."""
        return await self._call("POST", path, body=obj, retry_ambiguous=retry_ambiguous)

    async def replace(self, path: str, obj: Obj) -> Obj:
        """PUT ``obj``; its ``metadata.resourceVersion`` is the precondition (stale: Conflict)."""
        if not obj.get("metadata", {}).get("resourceVersion"):
            raise ValueError(f"replace {path}: the object carries no metadata.resourceVersion")
        return await self._call("PUT", path, body=obj)

    async def patch(
        self, path: str, patch: Obj | Objs, *, patch_type: PatchType = PatchType.MERGE, may_send: MaySend | None = None
    ) -> Obj:
        return await self._call(
            "PATCH",
            path,
            body=patch,
            content_type=patch_type,
            retry_ambiguous=patch_type is not PatchType.JSON,
            may_send=may_send,
        )

    async def delete(self, path: str, *, resource_version: str | None = None) -> Obj:
        """DELETE, optionally only if the object is still at ``resource_version``."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        return await self._call("DELETE", path, body=options)

    # --- helpers for the scheduler ---

    async def bind(
        self, namespace: str, pod: str, node: str, annotations: Mapping[str, str] | None = None, uid: str | None = None,
        may_send: MaySend | None = None,
    ) -> None:
        """Bind a pod to a node. Already bound to that node (a repeat) is success; already
        bound elsewhere raises :class:`Conflict`. With ``uid`` (as kube-scheduler sends it), only
        that incarnation of the pod is bound: one created again under the name is a Conflict.
        ``may_send`` is asked before each attempt (:class:`NotSent` when it says no)."""
        metadata: Obj = {"name": pod, "namespace": namespace, "annotations": dict(annotations or {})}
        if uid:
            metadata["uid"] = uid
        binding: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self._call("POST", PODS.path(namespace, pod, "binding"), body=binding, retry_ambiguous=True, may_send=may_send)
        except Conflict:
            current = await self.get(PODS.path(namespace, pod))
            same = not uid or current.get("metadata", {}).get("uid") == uid
            if current.get("spec", {}).get("nodeName") != node or not same:
                raise

    async def evict(self, namespace: str, pod: str, uid: str | None = None, dry_run: bool = False,
                    may_send: MaySend | None = None) -> bool:
        """Evict a pod through the Eviction API: True if accepted, False if the pod is gone.

        With ``uid``, only that incarnation of the pod is evicted (a precondition): a pod created
        again under the same name is left alone, and counts as gone. A PodDisruptionBudget that
        forbids it raises :class:`DisruptionBudgetBlocked` at once. With ``dry_run`` the server
        only checks (``dryRun=All``): the pod stays. ``may_send`` is asked before each attempt
        (:class:`NotSent` when it says no).
        """
        eviction: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        if uid:
            eviction["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            params = {"dryRun": "All"} if dry_run else None
            await self._call("POST", PODS.path(namespace, pod, "eviction"), params=params, body=eviction, retry_ambiguous=True,
                             may_send=may_send)
        except NotFound:
            return False
        except Conflict:
            if uid:
                return False  # the precondition failed: the pod we meant is gone
            raise
        return True

    async def set_unschedulable(self, node: str, unschedulable: bool) -> Obj:
        """Cordon (True) or uncordon (False) a node."""
        return await self.patch(NODES.path(name=node), {"spec": {"unschedulable": unschedulable}})

    async def patch_pod_condition(
        self,
        namespace: str,
        pod: str,
        type: str,
        status: ConditionStatus,
        reason: str,
        message: str,
        may_send: MaySend | None = None,
    ) -> Obj:
        """Set one condition on a pod's status (others are kept: strategic merge by ``type``).

        ``status`` is ``True``, ``False`` or ``Unknown`` (a plain string is checked)."""
        condition = {
            "type": type,
            "status": str(ConditionStatus(status)),
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(utcnow()),
        }
        return await self.patch(
            PODS.path(namespace, pod, "status"),
            {"status": {"conditions": [condition]}},
            patch_type=PatchType.STRATEGIC,
            may_send=may_send,
        )

    async def create_event(
        self, about: ObjectRef, reason: str, message: str, type: EventType = EventType.NORMAL
    ) -> Obj:
        """Record a core v1 Event from usher about an object (cluster-scoped ones: ``default``)."""
        namespace = about.namespace or "default"
        now = format_time(utcnow())
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{about.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": about.as_dict(),
            "reason": reason,
            "message": message,
            "type": str(EventType(type)),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
        }
        try:
            return await self.create(EVENTS.path(namespace), event, retry_ambiguous=True)
        except AlreadyExists:
            return event

    async def access_review(
        self, verb: str, resource: str, namespace: str = "", subresource: str = "", group: str = "", name: str = ""
    ) -> bool:
        """May usher's identity do this (to the object ``name``, if given)? Asked with a
        SelfSubjectAccessReview, answers cached. RBAC grants restricted by ``resourceNames`` allow
        a review only when it names the object."""
        key = (verb, group, resource, subresource, namespace, name)
        cached = self._reviews.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespace:
            attributes["namespace"] = namespace
        if subresource:
            attributes["subresource"] = subresource
        if name:
            attributes["name"] = name
        review: Obj = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await self.create(SELF_SUBJECT_ACCESS_REVIEWS.path(), review, retry_ambiguous=True)
        allowed = bool(answer.get("status", {}).get("allowed"))
        self._reviews[key] = (time.monotonic() + self._review_ttl, allowed)
        return allowed

    # --- plumbing ---

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        retry_ambiguous: bool | None = None,
        as_text: bool = False,
        may_send: MaySend | None = None,
    ) -> Any:
        """One API call with retries; returns the decoded response body (``as_text``: the text).

        ``may_send`` is asked before every attempt, the first and each repeat (a repeat can
        come 30 s later, after a ``Retry-After``): when it says no, :class:`NotSent` is raised
        instead. A leader's writes pass its lease check, so none leaves after the lease lapsed."""
        if retry_ambiguous is None:
            retry_ambiguous = method != "POST"
        attempt = 0
        while True:
            attempt += 1
            if may_send is not None and not may_send():
                raise NotSent(f"{method} {path}: not sent{' again' if attempt > 1 else ''}: the caller may no longer write")
            try:
                response = await self._send(method, path, params=params, body=body, content_type=content_type)
            except _TRANSPORT_ERRORS as exc:
                may_repeat = (retry_ambiguous or isinstance(exc, _NEVER_SENT)) and not isinstance(exc, _UNTRUSTED)
                if not may_repeat or attempt >= self._retry.attempts:
                    raise self._unreachable(exc) from exc
                delay = self._retry.backoff.delay(attempt)
                log.info("%s %s failed (%s); retrying in %.2fs", method, path, _one_line(exc), delay)
            else:
                if response.is_success:
                    if as_text:
                        return response.text
                    return response.json() if response.body else {}
                error = _response_error(response)
                delay = self._retry_delay(error, attempt, retry_ambiguous)
                if delay is None:
                    raise error
                log.info("%s %s: %s; retrying in %.2fs", method, path, error, delay)
            await self._sleep(delay)

    def _retry_delay(self, error: ApiError, attempt: int, retry_ambiguous: bool) -> float | None:
        """How long to wait before repeating a failed request, or None to give up."""
        if attempt >= self._retry.attempts or isinstance(error, DisruptionBudgetBlocked):
            return None
        if not (isinstance(error, TooManyRequests) or (error.code >= 500 and retry_ambiguous)):
            return None
        if error.retry_after is not None:
            return min(error.retry_after, self._retry.max_retry_after)
        return self._retry.backoff.delay(attempt)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> Any:
        """One HTTP exchange; a 401 reloads the credentials once and repeats it. A request's
        answer is read whole (a :class:`_Reply`); a stream's is the open ``ClientResponse``,
        which the caller releases or closes."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if content is not None:
            headers["Content-Type"] = content_type

        async def exchange() -> Any:
            authorization = await self._authorization()
            options: dict[str, Any] = {
                "params": params,
                "data": content,
                "headers": (headers | {"Authorization": authorization}) if authorization else headers,
                "allow_redirects": False,  # as httpx: a redirect is an answer, not followed
                "proxy": self._proxy,
                "server_hostname": self._server_name,
            }
            url = self._base + path
            if stream:
                return await self._streams.request(method, url, timeout=timeout or self._requests_timeout, **options)
            async with self._slots, self._session.request(method, url, timeout=timeout or self._requests_timeout, **options) as response:
                return _Reply(response.status, response.headers, await response.read(), response.charset)

        async def answered() -> Any:
            try:
                response = await exchange()
            except _TRANSPORT_ERRORS as exc:
                self._report_contact(False, _one_line(exc))
                raise
            failed = response.status >= HTTPStatus.INTERNAL_SERVER_ERROR
            self._report_contact(not failed, f"{method} {path}: HTTP {response.status}" if failed else None)
            return response

        generation = self._credentials.generation
        response = await answered()
        if response.status != 401:
            return response
        if stream:
            response.close()
        log.info("%s %s: 401; reloading credentials from %s", method, path, self._credentials.describe())
        await self._reload(generation)
        return await answered()

    def add_contact_listener(self, listener: ContactListener) -> None:
        """Call ``listener`` on every exchange with the API server: ``(True, None)`` when an answer
        came back (any status below 500: a 4xx is an answer too; a watch counts when the server
        accepts it), ``(False, why)`` on a timeout, a broken or refused connection or a 5xx. The
        events of a watch already open do not count: an open socket is not an API server that
        answers (a frozen one keeps its sockets open and simply says nothing)."""
        self._contact_listeners.append(listener)

    def _report_contact(self, answered: bool, why: str | None) -> None:
        for listener in self._contact_listeners:
            listener(answered, why)

    async def _authorization(self) -> str | None:
        """The Authorization header. A static token is read again (in a worker thread) at most
        every ``AUTH_REFRESH`` seconds or when the credentials were reloaded, not once per
        request; credentials that refresh (exec plugins, auth providers, the in-cluster token
        file: :attr:`Credentials.refreshes`) are asked each time, so a rotated token is used
        before the old one is refused."""
        cached = self._auth
        generation = self._credentials.generation
        if not self._credentials.refreshes and cached is not None and cached[1] == generation and time.monotonic() - cached[2] < AUTH_REFRESH:
            return cached[0]  # a static token: no need to ask again (a hook, as exec plugins have, is asked each time)
        async with self._auth_lock:
            value = await asyncio.to_thread(self._credentials.authorization)
            self._auth = (value, generation, time.monotonic())
            return value

    async def _reload(self, generation: int) -> None:
        """Reload the credentials unless another request already did since ``generation``."""
        async with self._auth_lock:
            if self._credentials.generation != generation:
                return
            before = _transport_identity(self._credentials.config)
            await asyncio.to_thread(self._credentials.load)
            self._auth = None
            if _transport_identity(self._credentials.config) != before:
                session, streams = self._session, self._streams
                self._build_sessions()
                await session.close()
                await streams.close()

    def _build_sessions(self) -> None:
        """The requests' session (``pool_size`` connections) and the watches' one
        (``WATCH_CONNECTIONS``), from the credentials' address, TLS material and proxy."""
        config = self._credentials.config
        tls = _tls_context(config)
        self._proxy = _proxy(config)
        self._base = str(config.host).rstrip("/")
        server_name = getattr(config, "tls_server_name", None)
        self._server_name: str | None = server_name or None
        self._session = self._build_session(self._pool_size, tls)
        self._streams = self._build_session(WATCH_CONNECTIONS, tls)

    def _build_session(self, pool_size: int, tls: ssl.SSLContext) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=pool_size, limit_per_host=0, ssl=tls, keepalive_timeout=KEEPALIVE)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._requests_timeout,
            headers={"User-Agent": f"{COMPONENT}/kube-backend"},
            trust_env=False,  # the proxy from the environment is read once, by _proxy
        )
        # aiohttp sends a GET, PUT or DELETE a second time by itself when the connection broke
        # before the answer (RFC 9112, 9.3.1); the retry policy alone decides repeats here, with
        # its backoff and bounded attempts (aiohttp's own test client turns it off the same way)
        if hasattr(session, "_retry_connection"):
            session._retry_connection = False
        return session

    def _unreachable(self, error: BaseException) -> ClusterUnreachable:
        if isinstance(error, _UNTRUSTED):
            return self._untrusted(error)
        return ClusterUnreachable(
            f"cannot reach the Kubernetes API at {self.host} ({self._credentials.describe()}): {_one_line(error)}"
        )

    def _untrusted(self, error: aiohttp.ClientConnectorCertificateError) -> ServerNotTrusted:
        cause = error.certificate_error
        why = (getattr(cause, "verify_message", None) or _one_line(cause)).rstrip(".")
        source = self._credentials.describe()
        against = f"the CA of {source}" if self._credentials.config.ssl_ca_cert else f"the system's CAs ({source} gives no CA)"
        return ServerNotTrusted(
            f"the API server at {self.host} presented a certificate that does not verify: {why} "
            f"(checked with {against}); give the cluster's CA in the kubeconfig (certificate-authority-data "
            "or certificate-authority, and tls-server-name if the server is known by another name)"
        )

    async def _probe(self) -> None:
        """Check, with a single request, that the server answers and accepts the credentials."""
        try:
            response = await self._send("GET", "/version")
        except _UNTRUSTED as exc:
            raise ServerNotTrusted(f"{self._untrusted(exc)}; {DEMO_HINT}") from exc
        except _TRANSPORT_ERRORS as exc:
            raise ClusterUnreachable(f"{self._unreachable(exc)}; check the cluster and the network, {DEMO_HINT}") from exc
        if response.status == 401:
            raise KubeConfigError(
                f"the API server at {self.host} rejected the credentials of "
                f"{self._credentials.describe()}; {DEMO_HINT}"
            )


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _watch_event(line: str) -> WatchEvent:
    """Decode one line of a watch stream; an ERROR event raises its Status as an ApiError."""
    try:
        data = json.loads(line)
        kind = WatchEventType(data["type"])
        obj = data["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ApiError(500, "BadWatchEvent", f"undecodable watch event: {line[:200]}") from exc
    if kind is WatchEventType.ERROR:
        raise api_error(int(obj.get("code") or 500), obj)
    return WatchEvent(kind, obj)
