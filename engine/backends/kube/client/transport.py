"""The Kubernetes API client's transport: connections, credentials on each request, retries.

:class:`Transport` is everything below the API's verbs: it talks HTTP/1.1 with kept-alive
connections through aiohttp's client, requests on a pool of ``pool_size`` (16) connections, at
most one request in flight on each (the rest wait their turn in the client, in order); watches on
a pool of their own (``WATCH_CONNECTIONS``), each holding one connection for as long as it
streams. (aiohttp rather than httpx because a request's CPU cost in the client is most of a
bind's, and aiohttp's is the lower; docs/benchmarks.md, "Kubernetes backend", measures it.)

Before every request it reads the ``Authorization`` header from :class:`~.credentials.Credentials`
(in a worker thread: the library's refresh hook may run a subprocess). A 401 reloads the
credentials once (rebuilding the HTTP sessions if the address, TLS identity or proxy changed) and
repeats the request. Failed attempts are repeated as :mod:`.retry` says; a caller's ``may_send``
guard is asked before each one. Anything that means "there is no usable cluster" is a
:class:`~.errors.ClusterAccessError` whose message is one line for the user; a server whose
certificate does not verify (a kubeconfig without the cluster's CA, or a server that is not the
one it names) is :class:`~.errors.ServerNotTrusted`, at once. Every exchange is reported to the
contact listeners (``/readyz`` follows them).

It is one class apart from :class:`~.api.KubeClient` (which inherits it) so that the typed calls
read as calls, and a new verb never touches connection handling.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Self

import aiohttp

from .credentials import Credentials, proxy_url, tls_context, transport_identity
from .errors import (
    DEMO_HINT,
    ApiError,
    ClusterUnreachable,
    KubeConfigError,
    NotSent,
    ServerNotTrusted,
    api_error,
    one_line,
    phrase,
)
from .retry import RetryPolicy
from .values import COMPONENT

log = logging.getLogger(__name__)

#: connections for watches, apart from the requests' pool (usher runs a dozen or so informers)
WATCH_CONNECTIONS = 32
#: how long an idle kept-alive connection is kept
KEEPALIVE = 60.0
#: how long an Authorization header is used before it is read again (client-go re-reads a
#: projected service-account token every minute too)
AUTH_REFRESH = 60.0

MaySend = Callable[[], bool]
"""Asked before each attempt of a write (``Transport._call``): False stops it (:class:`NotSent`)."""

ContactListener = Callable[[bool, str | None], None]
"""Told of each exchange with the API server (:meth:`Transport.add_contact_listener`)."""

#: what a failed exchange raises, below the HTTP answer: no connection, a broken or silent one
#: (aiohttp's timeouts are ``TimeoutError`` too), an unreadable answer
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
#: failures before the request left: no connection could be made (refused, no such host, TLS
#: handshake, proxy) or none in time; a POST may be repeated after these
NEVER_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
#: the server's certificate did not verify (one of the never-sent failures, but not worth a repeat)
UNTRUSTED = aiohttp.ClientConnectorCertificateError


@dataclass(frozen=True, slots=True)
class Reply:
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


def response_error(response: Reply) -> ApiError:
    """The :class:`~.errors.ApiError` of a failed answer (its ``Status`` body, else its text)."""
    try:
        status = response.json()
    except ValueError:
        status = {"message": response.text[:200] or phrase(response.status)}
    return api_error(response.status, status, response.headers.get("Retry-After"))


class Transport:
    """Requests and streams against one API server, with retries and credential refresh.

    ``sleep`` is how retries wait (injectable, so tests can see the delays). Use it as an async
    context manager or call :meth:`aclose`.
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        retry: RetryPolicy | None = None,
        pool_size: int = 16,
        timeout: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._credentials = credentials
        self._sleep = sleep
        self._retry = retry or RetryPolicy()
        self._pool_size = pool_size
        self._timeout = timeout
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

    async def open_stream(self, path: str, params: Mapping[str, str], read_timeout: float) -> aiohttp.ClientResponse:
        """A GET whose answer is read as it comes (a watch), on the watches' pool: a connection
        within the client's timeout, then at most ``read_timeout`` between two reads. The caller
        releases or closes the response. No answer: :class:`~.errors.ClusterUnreachable`."""
        # a connection from the watches' pool, or a new one, within the timeout (httpx's pool and
        # connect timeouts); then the read timeout between two reads
        timeout = aiohttp.ClientTimeout(total=None, connect=self._timeout, sock_connect=self._timeout, sock_read=read_timeout)
        try:
            return await self._send("GET", path, params=params, stream=True, timeout=timeout)
        except TRANSPORT_ERRORS as exc:
            raise self.unreachable(exc) from exc

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
            except TRANSPORT_ERRORS as exc:
                may_repeat = (retry_ambiguous or isinstance(exc, NEVER_SENT)) and not isinstance(exc, UNTRUSTED)
                if not may_repeat or attempt >= self._retry.attempts:
                    raise self.unreachable(exc) from exc
                delay = self._retry.backoff.delay(attempt)
                log.info("%s %s failed (%s); retrying in %.2fs", method, path, one_line(exc), delay)
            else:
                if response.is_success:
                    if as_text:
                        return response.text
                    return response.json() if response.body else {}
                error = response_error(response)
                delay = self._retry.delay_after(error, attempt, retry_ambiguous)
                if delay is None:
                    raise error
                log.info("%s %s: %s; retrying in %.2fs", method, path, error, delay)
            await self._sleep(delay)

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
        answer is read whole (a :class:`Reply`); a stream's is the open ``ClientResponse``,
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
                return Reply(response.status, response.headers, await response.read(), response.charset)

        async def answered() -> Any:
            try:
                response = await exchange()
            except TRANSPORT_ERRORS as exc:
                self._report_contact(False, one_line(exc))
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
            before = transport_identity(self._credentials.config)
            await asyncio.to_thread(self._credentials.load)
            self._auth = None
            if transport_identity(self._credentials.config) != before:
                session, streams = self._session, self._streams
                self._build_sessions()
                await session.close()
                await streams.close()

    def _build_sessions(self) -> None:
        """The requests' session (``pool_size`` connections) and the watches' one
        (``WATCH_CONNECTIONS``), from the credentials' address, TLS material and proxy."""
        config = self._credentials.config
        tls = tls_context(config)
        self._proxy = proxy_url(config)
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

    def unreachable(self, error: BaseException) -> ClusterUnreachable:
        if isinstance(error, UNTRUSTED):
            return self._untrusted(error)
        return ClusterUnreachable(
            f"cannot reach the Kubernetes API at {self.host} ({self._credentials.describe()}): {one_line(error)}"
        )

    def _untrusted(self, error: aiohttp.ClientConnectorCertificateError) -> ServerNotTrusted:
        cause = error.certificate_error
        why = (getattr(cause, "verify_message", None) or one_line(cause)).rstrip(".")
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
        except UNTRUSTED as exc:
            raise ServerNotTrusted(f"{self._untrusted(exc)}; {DEMO_HINT}") from exc
        except TRANSPORT_ERRORS as exc:
            raise ClusterUnreachable(f"{self.unreachable(exc)}; check the cluster and the network, {DEMO_HINT}") from exc
        if response.status == 401:
            raise KubeConfigError(
                f"the API server at {self.host} rejected the credentials of "
                f"{self._credentials.describe()}; {DEMO_HINT}"
            )
