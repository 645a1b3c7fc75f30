"""The controller's metrics and its /metrics, /healthz and /readyz endpoints.

Metrics are read back the way Prometheus reads them (the text format, through prometheus_client's
own parser); the endpoints are exercised over real loopback HTTP with httpx (raw sockets where the
server's limits are the point). Readiness runs on a fake clock the tests move by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from usher.engine.backends.kube.health import (
    API_GRACE,
    CYCLE_BOUND,
    KEEPALIVE_TIMEOUT,
    MAX_CONNECTIONS,
    NOT_SYNCED,
    READ_TIMEOUT,
    HealthServer,
)
from usher.engine.backends.kube.metrics import (
    CONTENT_TYPE,
    CYCLE_BUCKETS,
    EVICTION_REASONS,
    UNEVALUATED,
    WAIT_BUCKETS,
    ControllerMetrics,
    ErrorKind,
    queued_since,
)
from usher.engine.build import build_state
from usher.engine.core import Engine
from usher.engine.enums import EndReason, PendingReason
from usher.engine.scenario import parse_scenario

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
Served = tuple[HealthServer, ControllerMetrics, httpx.AsyncClient]


def samples(text: str) -> Samples:
    """Every sample in a scrape, by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: Samples, name: str, **labels: str) -> float:
    return scrape[(name, tuple(sorted(labels.items())))]


def queues_in(scrape: Samples) -> set[str]:
    """Every queue any series of the scrape is labelled with."""
    return {v for _, labels in scrape for k, v in labels if k == "queue"}


GIB = 1024**3

SCENARIO = """
name: metrics
nodes: [{name: n1, gpus: 8, cpu: 64, memory: 512Gi}]
queues:
  - {name: vision, namespaceSelector: {}, cohort: lab, quota: {gpu: 2, cpu: 16, memory: 64Gi}}
  - {name: language, namespaceSelector: {}, cohort: lab, quota: {gpu: 6}}
  - {name: heroes, approval: manual}
jobs:
  - {name: big, queue: vision, submit: 0, duration: 100, pods: [{gpu: 4, cpu: 8, memory: 32Gi}]}
  - {name: bigger, queue: vision, submit: 0, duration: 100, pods: [{gpu: 8}]}
  - {name: share, queue: language, submit: 5, duration: 100, pods: [{gpu: 0.5}]}
  - {name: hero, queue: heroes, submit: 5, duration: 50, pods: [{gpu: 1}]}
"""


def engine_of(text: str = SCENARIO, cycle_at: float | None = 10.0) -> Engine:
    """The scenario's jobs submitted (at their submit times) and, unless None, one cycle run."""
    state = build_state(parse_scenario(text))
    engine = Engine(state)
    for job in state.jobs:
        engine.submit(job, job.submit)
    if cycle_at is not None:
        engine.cycle(cycle_at)
    return engine


def scrape_of(metrics: ControllerMetrics) -> Samples:
    return samples(metrics.render().decode())


def test_metrics_render_with_their_names_labels_and_values() -> None:
    metrics = ControllerMetrics()
    metrics.set_queue("research", pending=3, running=2)
    metrics.set_queue("interactive", pending=0, running=5)
    metrics.job_admitted("research")
    metrics.job_admitted("research")
    metrics.job_preempted("interactive")
    metrics.job_evicted(EndReason.DRAINED)
    metrics.bind_failed()
    metrics.set_gpus(allocated=12.5, schedulable=64)
    metrics.set_leader(True)
    metrics.observe_cycle(0.02)

    scrape = samples(metrics.render().decode())
    assert value(scrape, "usher_queue_pending_jobs", queue="research") == 3
    assert value(scrape, "usher_queue_admitted_jobs", queue="research") == 2
    assert value(scrape, "usher_queue_admitted_jobs", queue="interactive") == 5
    assert value(scrape, "usher_jobs_admitted_total", queue="research") == 2
    assert value(scrape, "usher_jobs_admitted_total", queue="interactive") == 0
    assert value(scrape, "usher_preemptions_total", queue="interactive") == 1
    assert value(scrape, "usher_preemptions_total", queue="research") == 0
    assert value(scrape, "usher_evictions_total", reason="Drained") == 1
    assert value(scrape, "usher_bind_errors_total") == 1
    assert value(scrape, "usher_gpus_allocated") == 12.5
    assert value(scrape, "usher_gpus_schedulable") == 64
    assert value(scrape, "usher_leader") == 1
    assert value(scrape, "usher_cycle_duration_seconds_count") == 1
    assert value(scrape, "usher_cycle_duration_seconds_sum") == pytest.approx(0.02)


def test_every_eviction_reason_is_exported_from_zero_and_only_those() -> None:
    metrics = ControllerMetrics()
    scrape = samples(metrics.render().decode())
    for reason in EVICTION_REASONS:
        assert value(scrape, "usher_evictions_total", reason=reason) == 0
    with pytest.raises(ValueError, match="not an eviction reason"):
        metrics.job_evicted(EndReason.FINISHED)


def test_config_validity_and_rejections() -> None:
    metrics = ControllerMetrics()
    assert value(samples(metrics.render().decode()), "usher_config_valid") == 0, "no config read yet"
    metrics.config_loaded(valid=True)
    metrics.config_loaded(valid=False)
    scrape = samples(metrics.render().decode())
    assert value(scrape, "usher_config_valid") == 0
    assert value(scrape, "usher_config_errors_total") == 1
    metrics.config_loaded(valid=True)
    scrape = samples(metrics.render().decode())
    assert value(scrape, "usher_config_valid") == 1
    assert value(scrape, "usher_config_errors_total") == 1


def test_cycle_histogram_spans_a_millisecond_to_ten_seconds() -> None:
    metrics = ControllerMetrics()
    for seconds in (0.0004, 0.003, 0.7, 30.0):
        metrics.observe_cycle(seconds)
    scrape = samples(metrics.render().decode())
    bounds = sorted(
        float(dict(labels)["le"]) for name, labels in scrape if name == "usher_cycle_duration_seconds_bucket"
    )
    assert bounds == [*CYCLE_BUCKETS, math.inf]
    assert bounds[0] == 0.001 and bounds[-2] == 10.0

    def bucket(le: str) -> float:
        return value(scrape, "usher_cycle_duration_seconds_bucket", le=le)

    assert (bucket("0.001"), bucket("0.005"), bucket("1.0"), bucket("10.0"), bucket("+Inf")) == (1, 2, 3, 3, 4)


def test_remove_queue_drops_every_series_of_the_queue() -> None:
    metrics = ControllerMetrics()
    metrics.set_queue("old", pending=1, running=1)
    metrics.job_admitted("old")
    metrics.job_started("old", 30)
    metrics.set_queue("kept", pending=0, running=0)
    metrics.remove_queue("old")
    metrics.remove_queue("never-seen")
    scrape = samples(metrics.render().decode())
    assert queues_in(scrape) == {"kept"}


def test_observe_state_exports_quota_use_and_borrowing_per_queue_and_resource() -> None:
    state = engine_of().state
    assert {state.jobs[j].name for j in state.running} == {"big", "share"}, "the scenario as the test expects it"
    metrics = ControllerMetrics()
    metrics.observe_state(state, now=70.0)
    scrape = scrape_of(metrics)

    def q(name: str, queue: str, resource: str) -> float:
        return value(scrape, name, queue=queue, resource=resource)

    # vision: 2 GPUs, 16 cores and 64 GiB nominal; "big" holds 4 GPUs, 8 cores and 32 GiB
    assert (q("usher_queue_nominal", "vision", "gpu"), q("usher_queue_used", "vision", "gpu")) == (2, 4)
    assert q("usher_queue_borrowed", "vision", "gpu") == 2, "2 GPUs above nominal, lent by the cohort"
    assert (q("usher_queue_nominal", "vision", "cpu"), q("usher_queue_used", "vision", "cpu")) == (16, 8), "cores"
    assert q("usher_queue_borrowed", "vision", "cpu") == 0
    assert q("usher_queue_nominal", "vision", "memory") == 64 * GIB and q("usher_queue_used", "vision", "memory") == 32 * GIB
    # language: a half GPU of its 6, nothing borrowed (never negative); no CPU quota: no nominal series
    assert q("usher_queue_used", "language", "gpu") == 0.5
    assert q("usher_queue_borrowed", "language", "gpu") == 0
    assert ("usher_queue_nominal", (("queue", "language"), ("resource", "cpu"))) not in scrape
    assert q("usher_queue_used", "language", "cpu") == 0 and q("usher_queue_borrowed", "language", "cpu") == 0
    # heroes: no quota at all
    assert not [key for key in scrape if key[0] == "usher_queue_nominal" and ("queue", "heroes") in key[1]]
    # jobs per queue, and the oldest wait (submitted at 0 and 5, now is 70)
    assert value(scrape, "usher_queue_pending_jobs", queue="vision") == 1
    assert value(scrape, "usher_queue_admitted_jobs", queue="vision") == 1
    assert value(scrape, "usher_queue_pending_jobs", queue="language") == 0
    assert value(scrape, "usher_queue_admitted_jobs", queue="language") == 1
    assert value(scrape, "usher_queue_oldest_pending_seconds", queue="vision") == 70
    assert value(scrape, "usher_queue_oldest_pending_seconds", queue="heroes") == 65
    assert value(scrape, "usher_queue_oldest_pending_seconds", queue="language") == 0, "nothing waits"
    assert value(scrape, "usher_gpus_allocated") == 4.5 and value(scrape, "usher_gpus_schedulable") == 8
    assert value(scrape, "usher_jobs_admitted_total", queue="heroes") == 0, "counters start at 0 with the queue"


def test_pending_jobs_by_reason_every_reason_exported_and_back_to_zero() -> None:
    engine = engine_of()
    metrics = ControllerMetrics()
    held_out = [PendingReason.WAITING_FOR_GANG, PendingReason.WAITING_FOR_GANG, PendingReason.UNKNOWN_QUEUE]
    metrics.observe_state(engine.state, now=20.0, waiting=held_out)
    scrape = scrape_of(metrics)
    reasons = {dict(labels)["reason"]: v for name, labels in scrape if name == "usher_pending_jobs" for v in [scrape[(name, labels)]]}
    assert set(reasons) == {*map(str, PendingReason), UNEVALUATED}
    assert reasons["WaitingForQuota"] == 1, "bigger: vision is at its ceiling"
    assert reasons["AwaitingApproval"] == 1, "hero: a manual-approval queue"
    assert reasons["WaitingForGangMembers"] == 2 and reasons["UnknownQueue"] == 1, "held out of the queues"
    assert sum(reasons.values()) == 5
    # approved and admitted: the reason goes back to 0 (the series stays, for alerts and graphs)
    hero = engine.state.job("hero")
    engine.state.set_operator_flags(hero, approved=True)
    engine.cycle(30.0)
    metrics.observe_state(engine.state, now=30.0)
    scrape = scrape_of(metrics)
    assert value(scrape, "usher_pending_jobs", reason="AwaitingApproval") == 0
    assert value(scrape, "usher_pending_jobs", reason="WaitingForGangMembers") == 0
    assert value(scrape, "usher_queue_admitted_jobs", queue="heroes") == 1


def test_jobs_no_cycle_has_seen_are_unevaluated() -> None:
    """A standby runs no cycles: its pending jobs have no reason yet, and say so."""
    state = engine_of(cycle_at=None).state
    metrics = ControllerMetrics()
    metrics.observe_state(state, now=10.0)
    scrape = scrape_of(metrics)
    assert value(scrape, "usher_pending_jobs", reason=UNEVALUATED) == 4
    assert value(scrape, "usher_queue_pending_jobs", queue="vision") == 2


def test_a_queue_removed_from_the_config_loses_every_series_and_starts_afresh_if_it_returns() -> None:
    metrics = ControllerMetrics()
    metrics.observe_state(engine_of().state, now=10.0)
    metrics.job_admitted("language")
    metrics.job_started("language", 5.0)
    metrics.job_preempted("language")
    assert "language" in queues_in(scrape_of(metrics))
    # the config loses language (the controller rebuilds its engine from the new config)
    without = SCENARIO.replace("  - {name: language, namespaceSelector: {}, cohort: lab, quota: {gpu: 6}}\n", "").replace(
        "  - {name: share, queue: language, submit: 5, duration: 100, pods: [{gpu: 0.5}]}\n", ""
    )
    without = without.replace("cohort: lab, ", "")
    metrics.observe_state(engine_of(without).state, now=20.0)
    scrape = scrape_of(metrics)
    assert queues_in(scrape) == {"vision", "heroes"}, "gauges, counters and the wait histogram of language are gone"
    # a late call about the removed queue is dropped again at the next observation
    metrics.job_admitted("language")
    metrics.observe_state(engine_of(without).state, now=21.0)
    assert queues_in(scrape_of(metrics)) == {"vision", "heroes"}
    # it comes back: from zero
    metrics.observe_state(engine_of().state, now=30.0)
    scrape = scrape_of(metrics)
    assert value(scrape, "usher_jobs_admitted_total", queue="language") == 0
    assert value(scrape, "usher_job_wait_seconds_count", queue="language") == 0
    assert value(scrape, "usher_queue_nominal", queue="language", resource="gpu") == 6


def test_wait_histogram_spans_a_second_to_a_week_per_queue() -> None:
    metrics = ControllerMetrics()
    for waited in (0.2, 40.0, 5400.0, 3 * 86400.0, 30 * 86400.0):
        metrics.job_started("research", waited)
    scrape = scrape_of(metrics)
    bounds = sorted(
        float(dict(labels)["le"]) for name, labels in scrape if name == "usher_job_wait_seconds_bucket"
    )
    assert bounds == [*WAIT_BUCKETS, math.inf]
    assert bounds[0] == 1 and bounds[-2] == 7 * 86400

    def bucket(le: str) -> float:
        return value(scrape, "usher_job_wait_seconds_bucket", le=le, queue="research")

    assert (bucket("1.0"), bucket("60.0"), bucket("7200.0"), bucket("345600.0"), bucket("+Inf")) == (1, 2, 3, 4, 5)
    assert value(scrape, "usher_job_wait_seconds_count", queue="research") == 5


def test_a_preempted_job_waits_from_its_return_to_the_queue() -> None:
    engine = engine_of()
    big = engine.state.job("big")
    assert queued_since(big) == 0.0
    engine.stop(big, 50.0, EndReason.PREEMPTED, "someone", None)
    assert queued_since(big) == 50.0
    metrics = ControllerMetrics()
    metrics.observe_state(engine.state, now=80.0)
    assert value(scrape_of(metrics), "usher_queue_oldest_pending_seconds", queue="vision") == 80, "bigger, since 0"


def test_controller_errors_are_counted_by_kind_from_zero() -> None:
    metrics = ControllerMetrics()
    scrape = scrape_of(metrics)
    for kind in ErrorKind:
        assert value(scrape, "usher_controller_errors_total", kind=kind) == 0
    metrics.controller_error(ErrorKind.WATCH)
    metrics.controller_error(ErrorKind.WATCH)
    metrics.controller_error(ErrorKind.STATUS_WRITE)
    metrics.bind_failed()
    metrics.config_loaded(valid=False)
    scrape = scrape_of(metrics)
    assert value(scrape, "usher_controller_errors_total", kind="watch") == 2
    assert value(scrape, "usher_controller_errors_total", kind="status_write") == 1
    assert value(scrape, "usher_controller_errors_total", kind="bind") == 1, "bind_failed counts here too"
    assert value(scrape, "usher_controller_errors_total", kind="config") == 1, "a rejected config too"
    assert value(scrape, "usher_bind_errors_total") == 1
    with pytest.raises(ValueError):
        metrics.controller_error("typo")  # type: ignore[arg-type]


def test_each_instance_has_its_own_registry_and_the_global_one_is_untouched() -> None:
    first, second = ControllerMetrics(), ControllerMetrics()
    first.job_admitted("research")
    assert value(samples(first.render().decode()), "usher_jobs_admitted_total", queue="research") == 1
    assert ("usher_jobs_admitted_total", (("queue", "research"),)) not in samples(second.render().decode())
    global_names = {family.name for family in prometheus_client.REGISTRY.collect()}
    assert not [name for name in global_names if name.startswith("usher_")]


# --- the HTTP endpoints ---------------------------------------------------------------------


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    metrics = ControllerMetrics()
    server = HealthServer(metrics)
    port = await server.start("127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        yield server, metrics, client
    await server.stop()


async def test_healthz_answers_ok_while_the_process_lives(served: Served) -> None:
    _, _, client = served
    response = await client.get("/healthz")
    assert (response.status_code, response.text) == (200, "ok")


async def test_readyz_is_503_with_the_reason_until_the_informers_have_synced(served: Served) -> None:
    server, _, client = served
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert NOT_SYNCED in response.text
    server.set_ready()
    response = await client.get("/readyz")
    assert (response.status_code, response.text) == (200, "ok")
    server.set_not_ready("the pod watch failed 5 times")
    response = await client.get("/readyz")
    assert response.status_code == 503 and "the pod watch failed 5 times" in response.text
    assert (await client.get("/healthz")).status_code == 200, "not ready is still alive"


async def test_metrics_scrape_parses_and_follows_the_controller(served: Served) -> None:
    _, metrics, client = served
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert value(samples(response.text), "usher_leader") == 0
    metrics.set_leader(True)
    metrics.set_queue("research", pending=4, running=1)
    scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "usher_leader") == 1
    assert value(scrape, "usher_queue_pending_jobs", queue="research") == 4


async def test_other_paths_and_methods_are_refused(served: Served) -> None:
    _, _, client = served
    assert (await client.get("/")).status_code == 404
    assert (await client.get("/metrics/extra")).status_code == 404
    response = await client.post("/readyz")
    assert response.status_code == 405 and response.headers["allow"] == "GET"


async def test_a_stopped_server_no_longer_answers() -> None:
    server = HealthServer(ControllerMetrics())
    port = await server.start("127.0.0.1", 0)
    await server.stop()
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/healthz")


# --- /readyz tells the truth ----------------------------------------------------------------


class FakeClock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


Probed = tuple[HealthServer, FakeClock, httpx.AsyncClient]


@pytest.fixture
async def probed() -> AsyncIterator[Probed]:
    clock = FakeClock()
    server = HealthServer(ControllerMetrics(), clock=clock)
    port = await server.start("127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        yield server, clock, client
    await server.stop()


async def readyz(client: httpx.AsyncClient) -> tuple[int, list[str]]:
    response = await client.get("/readyz")
    return response.status_code, response.text.splitlines()


async def test_a_synced_standby_is_ready_and_says_so(probed: Probed) -> None:
    server, clock, client = probed
    server.set_role(leader=False)
    status, lines = await readyz(client)
    assert status == 503 and lines[0] == f"not ready: {NOT_SYNCED}"
    server.set_ready()
    clock.advance(2.5)
    status, lines = await readyz(client)
    assert status == 200 and lines[0] == "ok"
    assert "role: standby" in lines
    assert "last good cycle: none yet" in lines
    # a standby runs no cycles that matter: it stays ready however long it waits
    clock.advance(10 * CYCLE_BOUND)
    assert (await readyz(client))[0] == 200


async def test_informers_that_never_synced_keep_it_unready_whatever_else_holds(probed: Probed) -> None:
    server, clock, client = probed
    server.set_role(leader=True)
    server.cycle_done()
    clock.advance(3600)
    status, lines = await readyz(client)
    assert status == 503 and lines == [
        f"not ready: {NOT_SYNCED}",
        "role: leader",
        "last good cycle: 3600.0s ago",
    ]


async def test_a_leader_without_a_good_cycle_for_too_long_is_unready(probed: Probed) -> None:
    server, clock, client = probed
    server.set_ready()
    server.set_role(leader=True)
    clock.advance(CYCLE_BOUND - 1)
    status, lines = await readyz(client)
    assert status == 200 and "last good cycle: none yet" in lines, "the bound counts from taking the lead"
    clock.advance(2)
    status, lines = await readyz(client)
    assert status == 503
    assert lines[0] == f"not ready: leader with no scheduling cycle yet for {CYCLE_BOUND + 1:.0f}s (bound {CYCLE_BOUND:.0f}s)"
    server.cycle_done()
    clock.advance(5)
    status, lines = await readyz(client)
    assert status == 200 and "last good cycle: 5.0s ago" in lines and "role: leader" in lines
    clock.advance(CYCLE_BOUND)
    status, lines = await readyz(client)
    assert status == 503 and lines[0].startswith("not ready: leader with no good scheduling cycle for 65s")
    # it loses the lead: a standby is not held to the bound
    server.set_role(leader=False)
    assert (await readyz(client))[0] == 200


async def test_a_standby_taking_the_lead_is_judged_from_then(probed: Probed) -> None:
    server, clock, client = probed
    server.set_ready()
    server.set_role(leader=False)
    server.cycle_done()
    clock.advance(10 * CYCLE_BOUND)
    server.set_role(leader=True)
    assert (await readyz(client))[0] == 200, "its last cycle is old, but it has led for no time at all"
    clock.advance(CYCLE_BOUND + 1)
    assert (await readyz(client))[0] == 503


async def test_several_problems_are_all_named(probed: Probed) -> None:
    server, clock, client = probed
    server.set_ready()
    server.set_role(leader=True)
    server.expect_api()  # and it never answers
    clock.advance(max(API_GRACE, CYCLE_BOUND) + 1)
    status, lines = await readyz(client)
    assert status == 503
    assert "the API server has not answered for" in lines[0] and "leader with no scheduling cycle yet" in lines[0]
    assert server.not_ready_reason is not None and server.not_ready_reason in lines[0]


# --- the server's limits ------------------------------------------------------------------------


def test_the_health_server_has_tight_timeouts_and_a_connection_cap() -> None:
    http = HealthServer(ControllerMetrics()).server
    assert (http.read_timeout, http.keepalive_timeout, http.max_connections) == (
        READ_TIMEOUT,
        KEEPALIVE_TIMEOUT,
        MAX_CONNECTIONS,
    )
    assert 0 < READ_TIMEOUT <= 30 and 0 < KEEPALIVE_TIMEOUT <= 120 and 0 < MAX_CONNECTIONS <= 256


async def _read_until_closed(reader: asyncio.StreamReader) -> bytes:
    data = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            data += chunk
    return bytes(data)


async def test_a_slow_loris_is_cut_off_and_the_probes_still_answer() -> None:
    server = HealthServer(ControllerMetrics(), read_timeout=0.3)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: usher\r\nUser-Agent: slo")
        await writer.drain()
        assert await _read_until_closed(reader) == b"", "half a header, then silence: closed with no answer"
        writer.close()
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/healthz")).text == "ok"
    finally:
        await server.stop()


async def test_connections_past_the_cap_are_refused_and_the_open_ones_still_answer() -> None:
    server = HealthServer(ControllerMetrics(), max_connections=2)
    port = await server.start("127.0.0.1", 0)
    opened = []
    try:
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: usher\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), 10)
            assert head.startswith(b"HTTP/1.1 200")
            opened.append((reader, writer))
        assert server.server.connections == 2
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        refused = await _read_until_closed(reader)
        assert refused == b"" or refused.startswith(b"HTTP/1.1 503 "), refused
        writer.close()
        reader, writer = opened[0]
        writer.write(b"GET /readyz HTTP/1.1\r\nHost: usher\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).startswith(b"HTTP/1.1 503"), "not synced"
    finally:
        for _, writer in opened:
            writer.close()
        await server.stop()


def test_gpus_kept_for_moved_jobs_are_a_gauge_while_their_pods_are_away() -> None:
    """On a cluster a move holds the movers' new room until their pods come back: operators see
    how many GPUs that is (the consolidation fixture: two 4-GPU jobs moved)."""
    from pathlib import Path

    from usher.engine.controller import Controller
    from usher.engine.enums import MoveMode

    text = (Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "consolidation.yaml").read_text()
    ctrl = Controller(parse_scenario(text, file="scattered.yaml"), until=700.0)
    ctrl.engine.moves = MoveMode.ON_RETURN
    ctrl.run_to_end()
    metrics = ControllerMetrics()
    metrics.observe_state(ctrl.state, 700.0)
    assert value(scrape_of(metrics), "usher_gpus_kept_for_moved_jobs") == 8
    for job_id in list(ctrl.state.kept_rooms):
        ctrl.state.give_back_room(job_id, 700.0)
    metrics.observe_state(ctrl.state, 700.0)
    assert value(scrape_of(metrics), "usher_gpus_kept_for_moved_jobs") == 0


async def test_failed_watches_are_counted_as_controller_errors(tmp_path) -> None:
    from harness import OPS_SCENARIO, Cluster, scenario_of
    from usher.sandbox.apiserver import FaultKind

    c = Cluster(scenario_of(OPS_SCENARIO), tmp_path)
    await c.start()
    try:
        refused = c.server.inject(FaultKind.ERROR, path="/api/v1/nodes", watch=True, status=500, times=2)
        ctrl = await c.controller()

        def watch_errors() -> list[float]:
            families = {f.name: f for f in text_string_to_metric_families(ctrl.metrics.render().decode())}
            return [s.value for s in families["usher_controller_errors"].samples
                    if s.name == "usher_controller_errors_total" and s.labels.get("kind") == "watch"]

        # The fault fires when the server answers; the informer counts it a moment later, when it
        # reads the answer, so wait for the count rather than for the fault.
        for _ in range(200):
            if refused.fired == 2 and watch_errors() == [2.0]:
                break
            await asyncio.sleep(0.05)
        assert refused.fired == 2 and watch_errors() == [2.0]
    finally:
        await c.stop()


async def test_a_controller_stopping_says_so_on_readyz(tmp_path) -> None:
    """On SIGTERM a Service stops sending to a replica whose /readyz fails; its standby is the one to ask."""
    from harness import OPS_SCENARIO, Cluster, scenario_of

    c = Cluster(scenario_of(OPS_SCENARIO), tmp_path)
    await c.start()
    try:
        health = HealthServer(ControllerMetrics())
        health.set_ready()
        ctrl = await c.controller(health=health)
        assert health.ready
        task = c.tasks[-1]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not health.ready and "stopping" in (health.not_ready_reason or "")
        assert ctrl.done
    finally:
        await c.stop()


async def test_a_frozen_api_server_makes_readyz_fail_though_the_watches_stay_open(tmp_path) -> None:
    """The API server stops answering (every request hangs) while the watches it already serves
    stay open: /readyz must say the API does not answer once nothing has answered for the grace
    period, and be ready again once it answers. (Open watches were taken for contact: /readyz
    said ``api: reachable`` through a 40 s freeze while the Lease renewals timed out.)"""
    from harness import OPS_SCENARIO, Cluster, scenario_of
    from usher.engine.backends.kube.client import KubeClient
    from usher.engine.backends.kube.controller import KubeController
    from usher.sandbox.apiserver import FaultKind

    grace = 1.0  # the grace period, short for the test (API_GRACE on a cluster)
    c = Cluster(scenario_of(OPS_SCENARIO), tmp_path)
    await c.start()
    health = HealthServer(ControllerMetrics(), api_grace=grace)
    port = await health.start("127.0.0.1", 0)
    client = await KubeClient.connect(str(c.kubeconfig), timeout=1.0)
    ctrl = KubeController(client, identity="usher-0", clock=c.clock.now, elect=True, lease_duration=2.0, health=health)
    task = asyncio.create_task(ctrl.run())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as probe:

            async def until(status: int, what: str) -> list[str]:
                for _ in range(600):  # a generous deadline, not a timing
                    code, lines = await readyz(probe)
                    if code == status:
                        return lines
                    await asyncio.sleep(0.05)
                raise AssertionError(f"never {what}: {code} {lines}")

            await asyncio.wait_for(ctrl.synced.wait(), 10)
            health.set_ready()
            lines = await until(200, "ready")
            assert any(line.startswith("api: reachable, last answer ") for line in lines), lines

            frozen = c.server.inject(FaultKind.HANG, watch=False)  # every request hangs; the watches stay
            lines = await until(503, "unready while the API server is frozen")
            assert lines[0].startswith("not ready: the API server has not answered for "), lines
            assert any(line.startswith("api: no answer for ") for line in lines), lines
            assert frozen.fired > 0 and ctrl.connection.live, "the watches were still open: not what readiness goes by"

            c.server.clear_faults()
            lines = await until(200, "ready again once the API server answers")
            assert any(line.startswith("api: reachable, last answer ") for line in lines), lines
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        await health.stop()
        await c.stop()
