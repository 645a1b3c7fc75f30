"""The controller's metrics and its /metrics, /healthz and /readyz endpoints.

Metrics are read back the way Prometheus reads them (the text format, through prometheus_client's
own parser); the endpoints are exercised over real loopback HTTP with httpx.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from usher.engine.backends.kube.health import NOT_SYNCED, HealthServer
from usher.engine.backends.kube.metrics import CONTENT_TYPE, CYCLE_BUCKETS, EVICTION_REASONS, ControllerMetrics
from usher.engine.enums import EndReason

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
    assert value(scrape, "usher_queue_running_jobs", queue="research") == 2
    assert value(scrape, "usher_queue_running_jobs", queue="interactive") == 5
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


def test_a_queue_removed_from_the_config_leaves_the_gauges() -> None:
    metrics = ControllerMetrics()
    metrics.set_queue("old", pending=1, running=1)
    metrics.job_admitted("old")
    metrics.remove_queue("old")
    metrics.remove_queue("never-seen")
    scrape = samples(metrics.render().decode())
    assert ("usher_queue_pending_jobs", (("queue", "old"),)) not in scrape
    assert ("usher_queue_running_jobs", (("queue", "old"),)) not in scrape
    assert value(scrape, "usher_jobs_admitted_total", queue="old") == 1, "counters never go back"


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
