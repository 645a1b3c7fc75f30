"""Polls the telemetry sources given with ``--telemetry`` into the controller's ``TelemetryStore``.

A source is a URL; its prefix says how it is read (``parse_source``):

- ``http://host:9400/metrics``: scrape one Prometheus text endpoint: a DCGM exporter, or an
  ``usher agent`` (its ``/metrics``). Without a path, ``/metrics`` is meant.
- ``dns+http://usher-agent.usher-system.svc:9401/metrics``: resolve the name and scrape every
  address it resolves to: a headless Service in front of a DaemonSet gives one per node.
- ``prometheus+http://prometheus.monitoring:9090``: one instant query to a Prometheus server's
  HTTP API for every series telemetry reads (``prometheus_api.QUERY``).

Every ``interval`` seconds each source is read (concurrently, through one ``httpx.AsyncClient``)
and its samples are added to the store, stamped with the controller's clock at arrival. A source
that fails (cannot connect, times out, answers an HTTP error or a page that is not the format) is
retried with capped exponential backoff and jitter (``Backoff`` from the kube client), starting at
``interval`` and doubling up to ``MAX_BACKOFF``. Its error is reported once: one warning in the
log when it starts failing, the latest message in ``store.source_errors()`` for the console's
status line while it fails, and one line when it works again. A ``dns+`` source with only some
addresses failing keeps its pace and reports how many failed. A Prometheus answer for a large
cluster is megabytes of JSON, so it is decoded in a worker thread, off the event loop the console
and the scheduler share; scraped pages are small and parsed in place (see docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from urllib.parse import urlsplit, urlunsplit

import httpx

from ...telemetry import GpuSample, TelemetryStore
from ..kube.client import Backoff
from .exposition import ExpositionError, Series, parse_exposition
from .prometheus_api import QUERY, QUERY_PATH, PrometheusApiError, parse_query_response
from .series import WANTED, to_samples

log = logging.getLogger("usher.telemetry")

DEFAULT_INTERVAL = 15.0
"""Seconds between two reads of a working source."""
DEFAULT_TIMEOUT = 5.0
"""Seconds a read may take before it counts as failed."""
MAX_BACKOFF = 300.0
"""The longest wait before retrying a failing source."""
MAX_CONCURRENT = 32
"""Requests in flight at once (a ``dns+`` source over a large cluster resolves to many)."""
DEFAULT_PATH = "/metrics"

Resolver = Callable[[str, int], Awaitable[list[str]]]


class SourceKind(StrEnum):
    SCRAPE = "scrape"
    SCRAPE_EVERY_ADDRESS = "dns"
    PROMETHEUS = "prometheus"


_PREFIXES = {"dns+": SourceKind.SCRAPE_EVERY_ADDRESS, "prometheus+": SourceKind.PROMETHEUS}


@dataclass(frozen=True, slots=True)
class TelemetrySource:
    """One configured source: how to read it, the plain http(s) URL, and its name as given."""

    kind: SourceKind
    url: str
    name: str


def parse_source(text: str) -> TelemetrySource:
    """A ``--telemetry`` value as a source; raises ``ValueError`` saying what is wrong with it."""
    kind, url = SourceKind.SCRAPE, text.strip()
    for prefix, prefixed_kind in _PREFIXES.items():
        if url.startswith(prefix):
            kind, url = prefixed_kind, url[len(prefix):]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"{text!r}: expected an http(s) URL, optionally prefixed dns+ (every address of a name) "
            "or prometheus+ (a Prometheus server's API)"
        )
    if not parts.hostname:
        raise ValueError(f"{text!r}: the URL names no host")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"{text!r}: the port is not a number from 0 to 65535") from None
    if kind is SourceKind.PROMETHEUS:
        path = parts.path.rstrip("/")
        if not path.endswith(QUERY_PATH):
            path += QUERY_PATH
    else:
        path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    return TelemetrySource(kind, urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")), text)


def _status_line(response: httpx.Response) -> str:
    """``HTTP 503 Service Unavailable``, with the standard phrase when the server sent none."""
    phrase = response.reason_phrase
    if not phrase:
        try:
            phrase = HTTPStatus(response.status_code).phrase
        except ValueError:
            phrase = ""
    return f"HTTP {response.status_code} {phrase}".rstrip()


class SourceError(Exception):
    """A read that failed; ``str()`` is one line for the log and the console."""


@dataclass(slots=True)
class _Progress:
    """How one source is doing."""

    source: TelemetrySource
    next_at: float = 0.0
    failures: int = 0
    failing: bool = False


@dataclass(slots=True)
class _Outcome:
    samples: list[GpuSample] = field(default_factory=list)
    partial_error: str | None = None


async def resolve_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class TelemetryPoller:
    """Reads every source each ``interval`` into ``store``; see the module docstring."""

    def __init__(
        self,
        sources: Sequence[TelemetrySource],
        store: TelemetryStore,
        *,
        clock: Callable[[], float] = time.time,
        interval: float = DEFAULT_INTERVAL,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        resolve: Resolver = resolve_addresses,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.clock = clock
        self.interval = interval
        self.timeout = timeout
        self.backoff = Backoff(base=interval, cap=MAX_BACKOFF)
        self._progress = [_Progress(s) for s in sources]
        self._transport = transport
        self._resolve = resolve
        self._monotonic = monotonic
        self._sleep = sleep
        self._http: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)

    @property
    def sources(self) -> list[TelemetrySource]:
        return [p.source for p in self._progress]

    async def run(self) -> None:
        """Poll until cancelled."""
        if not self._progress:
            return
        try:
            while True:
                await self.poll_due()
                wake = min(p.next_at for p in self._progress)
                await self._sleep(max(0.0, wake - self._monotonic()))
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def poll_due(self) -> None:
        """Read every source whose time has come (all of them the first time)."""
        now = self._monotonic()
        due = [p for p in self._progress if p.next_at <= now]
        await asyncio.gather(*(self._poll(p) for p in due))

    def next_attempt_in(self, source: TelemetrySource) -> float:
        """Seconds until ``source`` is read again."""
        progress = next(p for p in self._progress if p.source == source)
        return max(0.0, progress.next_at - self._monotonic())

    # -- one source ----------------------------------------------------------------------------

    async def _poll(self, progress: _Progress) -> None:
        name = progress.source.name
        try:
            outcome = await self._read(progress.source)
        except SourceError as exc:
            progress.failures += 1
            delay = self.backoff.delay(progress.failures)
            progress.next_at = self._monotonic() + delay
            self._failing(progress, str(exc))
            return
        progress.failures = 0
        progress.next_at = self._monotonic() + self.interval
        if outcome.samples:
            self.store.add(outcome.samples)
        if outcome.partial_error is not None:
            self._failing(progress, outcome.partial_error)
        elif progress.failing:
            progress.failing = False
            self.store.clear_error(name)
            log.info("telemetry source %s works again", name)

    def _failing(self, progress: _Progress, message: str) -> None:
        self.store.report_error(progress.source.name, message)
        if not progress.failing:
            progress.failing = True
            log.warning("telemetry source %s: %s (retrying with backoff; reported again only when it works)", progress.source.name, message)
        else:
            log.debug("telemetry source %s still failing: %s", progress.source.name, message)

    async def _read(self, source: TelemetrySource) -> _Outcome:
        if source.kind is SourceKind.PROMETHEUS:
            return _Outcome(await self._query(source.url))
        if source.kind is SourceKind.SCRAPE:
            return _Outcome(await self._scrape(source.url))
        return await self._scrape_every_address(source.url)

    async def _scrape_every_address(self, url: str) -> _Outcome:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise SourceError(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise SourceError(f"{host} resolves to no address")
        urls = [urlunsplit((parts.scheme, f"[{a}]:{port}" if ":" in a else f"{a}:{port}", parts.path, parts.query, "")) for a in addresses]
        results = await asyncio.gather(*(self._scrape(u) for u in urls), return_exceptions=True)
        samples: list[GpuSample] = []
        errors: list[str] = []
        for u, result in zip(urls, results):
            if isinstance(result, SourceError):
                errors.append(f"{urlsplit(u).netloc}: {result}")
            elif isinstance(result, BaseException):
                raise result
            else:
                samples.extend(result)
        if len(errors) == len(urls):
            raise SourceError(f"all {len(urls)} addresses of {host} failed; first: {errors[0]}")
        partial = f"{len(errors)} of {len(urls)} addresses of {host} failed; first: {errors[0]}" if errors else None
        return _Outcome(samples, partial)

    async def _scrape(self, url: str) -> list[GpuSample]:
        response = await self._get(url)
        if response.status_code != 200:
            raise SourceError(_status_line(response))
        try:
            series = parse_exposition(response.text, WANTED)
        except ExpositionError as exc:
            raise SourceError(f"not the Prometheus text format: {exc}") from None
        return self._samples(series)

    async def _query(self, url: str) -> list[GpuSample]:
        response = await self._get(url, params={"query": QUERY})
        status = "" if response.status_code == 200 else f"HTTP {response.status_code}: "

        def samples() -> list[GpuSample]:
            try:
                series = parse_query_response(response.content)
            except PrometheusApiError as exc:
                raise SourceError(f"{status}{exc}") from None
            return self._samples(series)

        # a large cluster's answer is megabytes of JSON: decode it off the event loop
        return await asyncio.to_thread(samples)

    def _samples(self, series: list[Series]) -> list[GpuSample]:
        conversion = to_samples(series, self.clock())
        if not conversion.samples and conversion.unplaced:
            raise SourceError(
                f"none of its {conversion.unplaced} GPU series says which node and GPU it is "
                "(labels node or Hostname, and gpu)"
            )
        return conversion.samples

    async def _get(self, url: str, params: dict[str, str] | None = None) -> httpx.Response:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout, transport=self._transport, follow_redirects=True)
        try:
            async with self._slots:
                return await self._http.get(url, params=params)
        except httpx.TimeoutException:
            raise SourceError(f"no answer within {self.timeout:g}s") from None
        except httpx.ConnectError as exc:
            raise SourceError(f"cannot connect: {exc}") from None
        except httpx.HTTPError as exc:
            raise SourceError(f"{type(exc).__name__}: {exc}") from None
