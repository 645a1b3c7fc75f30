"""The controller's telemetry sources over real loopback HTTP: scrape, every address, Prometheus."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from usher.engine.backends.http_server import HttpServer, Request, Response
from usher.engine.backends.telemetry.poller import SourceKind, TelemetryPoller, parse_source
from usher.engine.backends.telemetry.prometheus_api import QUERY
from usher.engine.telemetry import Metric, TelemetryStore

DCGM_PAGE = (Path(__file__).parent / "dcgm-exporter.txt").read_text()
INTERVAL = 10.0


class Clock:
    """A hand-moved clock for the poller's scheduling (no real waiting in these tests)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Endpoint:
    """A loopback HTTP server whose answer the test sets, counting requests."""

    def __init__(self, body: str = DCGM_PAGE, status: int = 200) -> None:
        self.body, self.status = body, status
        self.requests: list[Request] = []
        self.server = HttpServer(self.handle)
        self.port = 0

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        return Response(self.status, {"content-type": "text/plain; version=0.0.4"}, self.body.encode())

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.port = await self.server.start(host, port)
        return self.port

    async def stop(self) -> None:
        await self.server.stop()


def poller_for(*urls: str, clock: Clock | None = None, **options) -> tuple[TelemetryPoller, TelemetryStore, Clock]:
    clock = clock or Clock()
    store = TelemetryStore()
    poller = TelemetryPoller([parse_source(u) for u in urls], store, clock=clock, monotonic=clock, interval=INTERVAL, timeout=2.0, **options)
    return poller, store, clock


# --- configuring sources -------------------------------------------------------------------------


def test_source_urls_say_how_they_are_read():
    plain = parse_source("http://10.0.0.5:9400")
    assert plain.kind is SourceKind.SCRAPE and plain.url == "http://10.0.0.5:9400/metrics"
    every = parse_source("dns+http://usher-agent.usher-system.svc:9401/metrics")
    assert every.kind is SourceKind.SCRAPE_EVERY_ADDRESS and every.url == "http://usher-agent.usher-system.svc:9401/metrics"
    prom = parse_source("prometheus+https://prom.example.com/prometheus/")
    assert prom.kind is SourceKind.PROMETHEUS and prom.url == "https://prom.example.com/prometheus/api/v1/query"
    assert prom.name == "prometheus+https://prom.example.com/prometheus/"


@pytest.mark.parametrize(
    "text, says",
    [("10.0.0.5:9400", "expected an http(s) URL"), ("ftp://x/metrics", "expected an http(s) URL"),
     ("http:///metrics", "names no host"), ("http://host:99999/metrics", "port")],
)
def test_a_bad_source_url_says_what_is_wrong(text: str, says: str):
    with pytest.raises(ValueError) as info:
        parse_source(text)
    assert says in str(info.value) and repr(text) in str(info.value)


# --- scraping ----------------------------------------------------------------------------------


async def test_a_scraped_dcgm_exporter_fills_the_store_stamped_on_arrival():
    endpoint = Endpoint()
    port = await endpoint.start()
    poller, store, clock = poller_for(f"http://127.0.0.1:{port}/metrics")
    try:
        await poller.poll_due()
    finally:
        await poller.aclose()
        await endpoint.stop()
    assert [r.path for r in endpoint.requests] == ["/metrics"]
    assert store.value("gpu-node-01", 0, Metric.UTILIZATION, clock.t) == 0.87
    assert store.latest("gpu-node-01", 1).time == clock.t
    assert store.source_errors() == {}


async def test_a_source_is_read_again_after_the_interval_not_before():
    endpoint = Endpoint()
    port = await endpoint.start()
    poller, store, clock = poller_for(f"http://127.0.0.1:{port}/metrics")
    try:
        await poller.poll_due()
        clock.t += INTERVAL / 2
        await poller.poll_due()
        assert len(endpoint.requests) == 1
        clock.t += INTERVAL / 2
        await poller.poll_due()
        assert len(endpoint.requests) == 2
    finally:
        await poller.aclose()
        await endpoint.stop()
    assert len(store.history("gpu-node-01", 0, Metric.UTILIZATION)) == 2


async def test_a_failing_source_is_reported_once_backs_off_and_is_reported_again_when_back(caplog):
    endpoint = Endpoint()
    port = await endpoint.start()
    await endpoint.stop()  # the port is known and nothing listens there
    name = f"http://127.0.0.1:{port}/metrics"
    poller, store, clock = poller_for(name)
    source = poller.sources[0]
    caplog.set_level(logging.INFO, logger="usher.telemetry")
    try:
        waits = []
        for _ in range(4):
            await poller.poll_due()
            waits.append(poller.next_attempt_in(source))
            clock.t += waits[-1]
        assert "cannot connect" in store.source_errors()[name]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and name in warnings[0].getMessage()
        assert waits[0] <= INTERVAL and waits[3] >= 4 * INTERVAL, waits  # capped doubling with jitter

        await endpoint.start(port=port)
        await poller.poll_due()
    finally:
        await poller.aclose()
        await endpoint.stop()
    assert store.source_errors() == {}
    assert store.value("gpu-node-01", 0, Metric.UTILIZATION, clock.t) == 0.87
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [f"telemetry source {name} works again"]
    assert poller.next_attempt_in(source) == INTERVAL


@pytest.mark.parametrize(
    "status, body, says",
    [
        (500, "boom", "HTTP 500 Internal Server Error"),
        (200, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} lots\n', "not the Prometheus text format: line 1: "),
        (200, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 40\n', "says which node and GPU it is"),
    ],
)
async def test_a_bad_answer_is_an_error_that_says_what_was_wrong(status: int, body: str, says: str):
    endpoint = Endpoint(body, status)
    port = await endpoint.start()
    name = f"http://127.0.0.1:{port}/metrics"
    poller, store, _ = poller_for(name)
    try:
        await poller.poll_due()
    finally:
        await poller.aclose()
        await endpoint.stop()
    assert says in store.source_errors()[name]
    assert store.gpus() == []


async def test_every_address_of_a_name_is_scraped_and_a_partial_failure_is_reported():
    first, second = Endpoint(), Endpoint(DCGM_PAGE.replace("gpu-node-01", "gpu-node-02"))
    port = await first.start("127.0.0.1")
    await second.start("127.0.0.2", port)
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["127.0.0.1", "127.0.0.2"]

    name = f"dns+http://usher-agent.usher-system.svc:{port}/metrics"
    poller, store, clock = poller_for(name, resolve=resolve)
    try:
        await poller.poll_due()
        assert asked == [("usher-agent.usher-system.svc", port)]
        assert {node for node, _ in store.gpus()} == {"gpu-node-01", "gpu-node-02"}
        assert store.source_errors() == {}

        await second.stop()
        clock.t += INTERVAL
        await poller.poll_due()
        assert "1 of 2 addresses of usher-agent.usher-system.svc failed" in store.source_errors()[name]
        assert not store.is_stale("gpu-node-01", 0, clock.t)
        assert store.latest("gpu-node-02", 0).time < clock.t
        assert poller.next_attempt_in(poller.sources[0]) == INTERVAL, "some answered: no backoff"
    finally:
        await poller.aclose()
        await first.stop()
        await second.stop()


async def test_a_name_that_does_not_resolve_is_an_error():
    async def resolve(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    name = "dns+http://nowhere.invalid:9401/metrics"
    poller, store, _ = poller_for(name, resolve=resolve)
    await poller.poll_due()
    await poller.aclose()
    assert store.source_errors()[name].startswith("cannot resolve nowhere.invalid")


# --- a Prometheus server ----------------------------------------------------------------------------


async def test_a_prometheus_server_is_asked_one_query_for_every_series():
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "2", "Hostname": "dgx-3", "instance": "10.1.0.9:9400"}, "value": [1.0, "55"]},
                {"metric": {"__name__": "usher_gpu_healthy", "gpu": "2", "node": "dgx-3"}, "value": [1.0, "0"]},
            ],
        },
    }
    endpoint = Endpoint(json.dumps(answer))
    port = await endpoint.start()
    poller, store, clock = poller_for(f"prometheus+http://127.0.0.1:{port}")
    try:
        await poller.poll_due()
    finally:
        await poller.aclose()
        await endpoint.stop()
    [request] = endpoint.requests
    assert request.path == "/api/v1/query" and request.param("query") == QUERY
    sample = store.latest("dgx-3", 2)
    assert sample is not None and sample.utilization == 55.0 and sample.healthy is False
    assert sample.time == clock.t


async def test_a_prometheus_error_answer_is_reported_with_its_reason():
    endpoint = Endpoint(json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}), 503)
    port = await endpoint.start()
    name = f"prometheus+http://127.0.0.1:{port}"
    poller, store, _ = poller_for(name)
    try:
        await poller.poll_due()
    finally:
        await poller.aclose()
        await endpoint.stop()
    assert store.source_errors()[name] == "HTTP 503: timeout: query timed out in expression evaluation"
