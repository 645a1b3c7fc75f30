"""The controller's Prometheus metrics: what an operator graphs and alerts on.

`ControllerMetrics` owns its own `prometheus_client.CollectorRegistry` (never the process-wide
default registry), so every controller, and every test, has an independent set. The controller
calls the methods below as things happen; `render()` is the body of ``GET /metrics`` (served by
`health.py`) in the Prometheus text format, `CONTENT_TYPE` its content type.

Series:

- ``usher_queue_pending_jobs{queue}``, ``usher_queue_running_jobs{queue}``: jobs per queue now.
- ``usher_gpus_allocated``, ``usher_gpus_schedulable``: GPUs held by running pods (shares count
  as fractions) and GPUs on nodes that can take work (not cordoned, not failed).
- ``usher_leader``: 1 on the replica that holds the Lease, else 0.
- ``usher_config_valid``: 1 while the last queue config read was valid, else 0 (the controller
  keeps the last valid one meanwhile); ``usher_config_errors_total`` counts rejected configs.
- ``usher_jobs_admitted_total{queue}``, ``usher_preemptions_total{queue}`` (the queue of the
  preempted job), ``usher_evictions_total{reason}``, ``usher_bind_errors_total``.
- ``usher_cycle_duration_seconds``: time per scheduling cycle, buckets from 1 ms to 10 s.
- ``process_*``: the process's CPU, memory and open files (Linux).
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from ...enums import EndReason

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of `ControllerMetrics.render()`: the classic text format, which
``generate_latest`` writes by default and every Prometheus version reads (prometheus_client's
own server sends the same for it)."""

CYCLE_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Histogram buckets (seconds) for a cycle: 1 ms on a quiet cluster up to 10 s on a huge one."""

EVICTION_REASONS: tuple[EndReason, ...] = (
    EndReason.PREEMPTED,
    EndReason.DRAINED,
    EndReason.NODE_FAILED,
    EndReason.OPERATOR_PREEMPTED,
)
"""The `EndReason`s that are evictions (every other run ends by itself)."""


class ControllerMetrics:
    """The controller's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self._pending = Gauge(
            "usher_queue_pending_jobs", "Jobs waiting in the queue.", ["queue"], registry=registry
        )
        self._running = Gauge(
            "usher_queue_running_jobs", "Jobs of the queue holding resources.", ["queue"], registry=registry
        )
        self._gpus_allocated = Gauge(
            "usher_gpus_allocated", "GPUs held by running pods (shares count as fractions).", registry=registry
        )
        self._gpus_schedulable = Gauge(
            "usher_gpus_schedulable", "GPUs on nodes that can take work (not cordoned, not failed).", registry=registry
        )
        self._leader = Gauge("usher_leader", "1 if this replica holds the leader Lease, else 0.", registry=registry)
        self._config_valid = Gauge(
            "usher_config_valid", "1 if the last queue config read was valid, else 0.", registry=registry
        )
        self._admitted = Counter("usher_jobs_admitted", "Jobs admitted (bound).", ["queue"], registry=registry)
        self._preemptions = Counter(
            "usher_preemptions", "Jobs preempted, by the queue of the preempted job.", ["queue"], registry=registry
        )
        self._evictions = Counter("usher_evictions", "Jobs evicted, by reason.", ["reason"], registry=registry)
        self._bind_errors = Counter("usher_bind_errors", "Pod bindings the API server refused.", registry=registry)
        self._config_errors = Counter("usher_config_errors", "Queue configs rejected as invalid.", registry=registry)
        self._cycle = Histogram(
            "usher_cycle_duration_seconds", "Time per scheduling cycle.", buckets=CYCLE_BUCKETS, registry=registry
        )
        ProcessCollector(registry=registry)
        for reason in EVICTION_REASONS:
            self._evictions.labels(reason=reason.value)

    # --- what the controller sees ---------------------------------------------------------

    def set_queue(self, queue: str, pending: int, running: int) -> None:
        """The queue's pending and running jobs now; also starts its counters at 0."""
        self._pending.labels(queue=queue).set(pending)
        self._running.labels(queue=queue).set(running)
        self._admitted.labels(queue=queue)
        self._preemptions.labels(queue=queue)

    def remove_queue(self, queue: str) -> None:
        """Drop a queue that left the config from the gauges (its counters stay, as counters do)."""
        self._pending.remove(queue)
        self._running.remove(queue)

    def set_gpus(self, allocated: float, schedulable: float) -> None:
        """GPUs held by running pods, and GPUs on nodes that can take work."""
        self._gpus_allocated.set(allocated)
        self._gpus_schedulable.set(schedulable)

    def set_leader(self, leading: bool) -> None:
        self._leader.set(1 if leading else 0)

    def config_loaded(self, valid: bool) -> None:
        """A queue config was read: valid, or rejected (counted; the last valid one stays)."""
        self._config_valid.set(1 if valid else 0)
        if not valid:
            self._config_errors.inc()

    def observe_cycle(self, seconds: float) -> None:
        """One scheduling cycle took ``seconds``."""
        self._cycle.observe(seconds)

    # --- what the controller did ----------------------------------------------------------

    def job_admitted(self, queue: str) -> None:
        self._admitted.labels(queue=queue).inc()

    def job_preempted(self, queue: str) -> None:
        """A job of ``queue`` was preempted (by the scheduler for another job)."""
        self._preemptions.labels(queue=queue).inc()

    def job_evicted(self, reason: EndReason) -> None:
        """A job was evicted; ``reason`` is one of `EVICTION_REASONS`."""
        if reason not in EVICTION_REASONS:
            raise ValueError(f"{reason} is not an eviction reason (one of {', '.join(EVICTION_REASONS)})")
        self._evictions.labels(reason=reason.value).inc()

    def bind_failed(self) -> None:
        self._bind_errors.inc()

    def render(self) -> bytes:
        """Every series in the Prometheus text exposition format."""
        return generate_latest(self.registry)
