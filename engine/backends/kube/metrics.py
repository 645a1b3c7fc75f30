"""The controller's Prometheus metrics: what an operator graphs and alerts on.

`ControllerMetrics` owns its own `prometheus_client.CollectorRegistry` (never the process-wide
default registry), so every controller, and every test, has an independent set. The controller
calls the methods below as things happen; `render()` is the body of ``GET /metrics`` (served by
`health.py`) in the Prometheus text format, `CONTENT_TYPE` its content type.

Series (``observe_state`` sets the per-queue ones from the engine's state after every cycle, and
drops every series of a queue that has left the config, counters and histograms included):

- ``usher_queue_nominal{queue,resource}``, ``usher_queue_used{queue,resource}``,
  ``usher_queue_borrowed{queue,resource}``: a queue's nominal quota, what its running jobs are
  charged, and the part of that above its nominal quota (borrowed from its cohort; never
  negative). ``resource`` is ``gpu`` (in GPUs: shares count as fractions), ``cpu`` (in cores) or
  ``memory`` (in bytes). A resource the queue sets no quota for has no ``nominal`` series, and
  never borrows.
- ``usher_queue_pending_jobs{queue}``, ``usher_queue_admitted_jobs{queue}``: jobs waiting in
  the queue, and jobs admitted and running (holding resources).
- ``usher_queue_oldest_pending_seconds{queue}``: how long the queue's longest-waiting job has
  waited (since it was submitted, or put back by a preemption); 0 when nothing waits.
- ``usher_pending_jobs{reason}``: pending jobs by the reason they wait, every `PendingReason`
  (0 when none waits for it) plus ``Unevaluated`` (`UNEVALUATED`: not yet looked at by a cycle;
  a standby replica runs none), including the jobs held out of the queues (`observe_state`'s
  ``waiting``: a gang short of pods, an unknown queue, an invalid pod).
- ``usher_job_wait_seconds{queue}``: a histogram of how long each job waited before it started
  (`WAIT_BUCKETS`: a second to a week).
- ``usher_gpus_allocated``, ``usher_gpus_schedulable``: GPUs held by running pods (shares count
  as fractions) and GPUs on nodes that can take work (not cordoned, not failed).
- ``usher_leader``: 1 on the replica that holds the Lease, else 0.
- ``usher_config_valid``: 1 while the last queue config read was valid, else 0 (the controller
  keeps the last valid one meanwhile); ``usher_config_errors_total`` counts rejected configs.
- ``usher_jobs_admitted_total{queue}``, ``usher_preemptions_total{queue}`` (the queue of the
  preempted job), ``usher_evictions_total{reason}``, ``usher_bind_errors_total``;
  ``usher_bind_refusals_total{reason}``: pods usher bound that their node's kubelet refused at
  admission, by the kubelet's reason (``OutOf<resource>``, ``NodePorts``, ``NodeAffinity``, ...;
  ``Other`` for one it does not know): usher's view of that node was wrong;
  ``usher_jobs_moved_total{queue}`` (consolidation) and ``usher_gpus_kept_for_moved_jobs`` (the
  room held for them until their pods come back).
- ``usher_controller_errors_total{kind}``: errors the controller caught, logged and carried on
  from, by `ErrorKind` (every kind exported from 0); a refused bind and a rejected queue config
  count here too (``bind_failed``, ``config_loaded(False)``).
- ``usher_cycle_duration_seconds``: time per scheduling cycle, buckets from 1 ms to 10 s.
- ``process_*``: the process's CPU, memory and open files (Linux).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from ...enums import EndReason, PendingReason
from ...state import INF, MILLI, RESOURCE_NAMES

if TYPE_CHECKING:
    from ...state import ClusterState, Job

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of `ControllerMetrics.render()`: the classic text format, which
``generate_latest`` writes by default and every Prometheus version reads (prometheus_client's
own server sends the same for it)."""

CYCLE_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Histogram buckets (seconds) for a cycle: 1 ms on a quiet cluster up to 10 s on a huge one."""

WAIT_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 12 * 3600,
    86400, 2 * 86400, 4 * 86400, 7 * 86400,
)
"""Histogram buckets (seconds) for a job's wait: a second (an idle cluster) to a week (a big job
on a busy one)."""

RESOURCE_SCALE: dict[str, float] = {"gpu": 1 / MILLI, "cpu": 1 / 1000, "memory": 1.0}
"""From the engine's units (milli-GPUs, millicores, bytes) to the exported ones (GPUs, cores, bytes)."""

UNEVALUATED = "Unevaluated"
"""The ``reason`` of a pending job no scheduling cycle has looked at yet."""


class ErrorKind(StrEnum):
    """What failed, for ``usher_controller_errors_total{kind}``."""

    BIND = "bind"
    """A pod binding the API server refused (counted by ``bind_failed``)."""
    EVICTION = "eviction"
    """An eviction that failed other than by a PodDisruptionBudget's refusal."""
    STATUS_WRITE = "status_write"
    """Writing a pod's PodScheduled condition or usher's annotations."""
    EVENT = "event"
    """Recording an Event."""
    COMMAND = "command"
    """An operator command that failed against the API (not one rejected as invalid)."""
    CONFIG = "config"
    """A queue config rejected as invalid (counted by ``config_loaded(False)``)."""
    WATCH = "watch"
    """A list or watch that failed and is being retried."""
    CYCLE = "cycle"
    """A scheduling cycle (or a step of the loop around it) that raised."""


EVICTION_REASONS: tuple[EndReason, ...] = tuple(
    reason for reason in EndReason if reason not in (EndReason.FINISHED, EndReason.RUNNING)
)
"""The `EndReason`s that are evictions: all but a run that finished by itself (or still runs)."""


def queued_since(job: Job) -> float:
    """When ``job`` last joined its queue: its submission, or the end of its last run."""
    ended = [run.end for run in job.runs if run.end is not None]
    return max(ended) if ended else job.submit


class ControllerMetrics:
    """The controller's metrics, in a registry of their own."""

    def __init__(self) -> None:
        #: brings the state gauges up to date; called on each scrape rather than on each
        #: scheduling tick (a scrape comes every few seconds, ticks many times a second)
        self.before_render: Callable[[], None] | None = None
        self.registry = CollectorRegistry()
        registry = self.registry
        queue_resource = ["queue", "resource"]
        self._nominal = Gauge(
            "usher_queue_nominal",
            "Nominal quota of the queue (gpu: GPUs, cpu: cores, memory: bytes); absent when unlimited.",
            queue_resource,
            registry=registry,
        )
        self._used = Gauge(
            "usher_queue_used",
            "Resources charged to the queue's running jobs (gpu: GPUs, cpu: cores, memory: bytes).",
            queue_resource,
            registry=registry,
        )
        self._borrowed = Gauge(
            "usher_queue_borrowed",
            "Resources the queue uses above its nominal quota, borrowed from its cohort.",
            queue_resource,
            registry=registry,
        )
        self._pending = Gauge(
            "usher_queue_pending_jobs", "Jobs waiting in the queue.", ["queue"], registry=registry
        )
        self._running = Gauge(
            "usher_queue_admitted_jobs", "Jobs of the queue admitted and holding resources.", ["queue"], registry=registry
        )
        self._oldest = Gauge(
            "usher_queue_oldest_pending_seconds",
            "How long the queue's longest-waiting job has waited; 0 when none waits.",
            ["queue"],
            registry=registry,
        )
        self._pending_by_reason = Gauge(
            "usher_pending_jobs", "Pending jobs by the reason they wait.", ["reason"], registry=registry
        )
        self._wait = Histogram(
            "usher_job_wait_seconds",
            "How long jobs waited in their queue before they started.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=registry,
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
        self._moves = Counter(
            "usher_jobs_moved", "Jobs moved (evicted, room kept for them) to make room for a gang, by queue.", ["queue"], registry=registry
        )
        self._kept = Gauge(
            "usher_gpus_kept_for_moved_jobs", "GPUs held for moved jobs until their pods come back.", registry=registry
        )
        self._bind_errors = Counter("usher_bind_errors", "Pod bindings the API server refused.", registry=registry)
        self._bind_refusals = Counter(
            "usher_bind_refusals", "Pods usher bound that the node's kubelet refused at admission, by the kubelet's reason.",
            ["reason"], registry=registry,
        )
        self._config_errors = Counter("usher_config_errors", "Queue configs rejected as invalid.", registry=registry)
        self._errors = Counter(
            "usher_controller_errors",
            "Errors the controller caught, logged and carried on from, by kind.",
            ["kind"],
            registry=registry,
        )
        self._cycle = Histogram(
            "usher_cycle_duration_seconds", "Time per scheduling cycle.", buckets=CYCLE_BUCKETS, registry=registry
        )
        ProcessCollector(registry=registry)
        for reason in EVICTION_REASONS:
            self._evictions.labels(reason=reason.value)
        for kind in ErrorKind:
            self._errors.labels(kind=kind.value)
        for why in (*PendingReason, UNEVALUATED):
            self._pending_by_reason.labels(reason=str(why)).set(0)
        #: every queue some series is labelled with, to drop them all when the queue goes
        self._queues: set[str] = set()

    # --- what the controller sees ---------------------------------------------------------

    def observe_state(self, state: ClusterState, now: float, waiting: Iterable[PendingReason] = ()) -> None:
        """Set every per-queue gauge and the pending-by-reason counts from the engine's state.

        ``now`` is on the clock of the jobs' submit times (the controller's clock). ``waiting``
        gives the reason of each job held out of the engine's queues (a gang short of pods, a
        pod naming an unknown queue, an invalid pod): they count as pending by their reason.
        Every series of a queue that is no longer in ``state.queues`` is dropped.
        """
        by_reason: dict[str, int] = dict.fromkeys((*PendingReason, UNEVALUATED), 0)
        for why in waiting:
            by_reason[str(why)] = by_reason.get(str(why), 0) + 1
        for name, queue in state.queues.items():
            self._touch(name)
            oldest = now
            for key in queue.pending:
                job = state.jobs[key[-1]]
                why = str(job.pending_reason) if job.pending_reason is not None else UNEVALUATED
                by_reason[why] = by_reason.get(why, 0) + 1
                oldest = min(oldest, queued_since(job))
            self._pending.labels(queue=name).set(len(queue.pending))
            self._running.labels(queue=name).set(len(state.running_by_queue.get(name, ())))
            self._oldest.labels(queue=name).set(max(0.0, now - oldest))
            for r, resource in enumerate(RESOURCE_NAMES):
                scale = RESOURCE_SCALE[resource]
                used = queue.usage[r]
                nominal = queue.nominal[r]
                self._used.labels(queue=name, resource=resource).set(used * scale)
                if nominal == INF:
                    self._nominal.remove(name, resource)
                    self._borrowed.labels(queue=name, resource=resource).set(0)
                else:
                    self._nominal.labels(queue=name, resource=resource).set(nominal * scale)
                    self._borrowed.labels(queue=name, resource=resource).set(max(0.0, used - nominal) * scale)
        for why, count in by_reason.items():
            self._pending_by_reason.labels(reason=why).set(count)
        for gone in self._queues - state.queues.keys():
            self.remove_queue(gone)
        self.set_gpus(state.schedulable_used_milli / MILLI, state.schedulable_gpu_count)
        self._kept.set(sum(p.gpu_milli for room in state.kept_rooms.values() for p in room.placements) / MILLI)

    def set_queue(self, queue: str, pending: int, running: int) -> None:
        """The queue's pending and running jobs now; also starts its counters at 0.

        `observe_state` sets these and everything else per queue; this is for callers without
        an engine state.
        """
        self._touch(queue)
        self._pending.labels(queue=queue).set(pending)
        self._running.labels(queue=queue).set(running)

    def remove_queue(self, queue: str) -> None:
        """Drop every series of a queue that left the config: gauges, counters and histograms."""
        self._queues.discard(queue)
        for metric in (self._pending, self._running, self._oldest, self._admitted, self._preemptions, self._moves, self._wait):
            metric.remove(queue)
        for metric in (self._nominal, self._used, self._borrowed):
            for resource in RESOURCE_NAMES:
                metric.remove(queue, resource)

    def _touch(self, queue: str) -> None:
        """Start the queue's counters at 0 (so rates work from its first job), once."""
        if queue not in self._queues:
            self._queues.add(queue)
            self._admitted.labels(queue=queue)
            self._preemptions.labels(queue=queue)
            self._moves.labels(queue=queue)
            self._wait.labels(queue=queue)

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
            self._errors.labels(kind=ErrorKind.CONFIG.value).inc()

    def observe_cycle(self, seconds: float) -> None:
        """One scheduling cycle took ``seconds``."""
        self._cycle.observe(seconds)

    # --- what the controller did ----------------------------------------------------------

    def job_admitted(self, queue: str) -> None:
        self._touch(queue)
        self._admitted.labels(queue=queue).inc()

    def job_started(self, queue: str, waited_seconds: float) -> None:
        """A job of ``queue`` started after waiting ``waited_seconds`` (see `queued_since`)."""
        self._touch(queue)
        self._wait.labels(queue=queue).observe(max(0.0, waited_seconds))

    def job_preempted(self, queue: str) -> None:
        """A job of ``queue`` was preempted (by the scheduler for another job)."""
        self._touch(queue)
        self._preemptions.labels(queue=queue).inc()

    def job_moved(self, queue: str) -> None:
        """A job of ``queue`` was moved to make room for a gang (its room is kept)."""
        self._touch(queue)
        self._moves.labels(queue=queue).inc()

    def job_evicted(self, reason: EndReason) -> None:
        """A job was evicted; ``reason`` is one of `EVICTION_REASONS`."""
        if reason not in EVICTION_REASONS:
            raise ValueError(f"{reason} is not an eviction reason (one of {', '.join(EVICTION_REASONS)})")
        self._evictions.labels(reason=reason.value).inc()

    def bind_failed(self) -> None:
        """The API server refused a binding (also a ``bind`` controller error)."""
        self._bind_errors.inc()
        self._errors.labels(kind=ErrorKind.BIND.value).inc()

    def bind_refused(self, reason: str) -> None:
        """The kubelet refused a pod usher bound (``reason``: ``OutOfnvidia.com/gpu``, ``NodePorts``,
        ... or ``Other``: ``refusals.Refusal.label``, a bounded set)."""
        self._bind_refusals.labels(reason=reason).inc()

    def controller_error(self, kind: ErrorKind) -> None:
        """The controller caught an error of ``kind``, logged it and carried on."""
        self._errors.labels(kind=ErrorKind(kind).value).inc()

    def render(self) -> bytes:
        """Every series in the Prometheus text exposition format (``before_render`` first)."""
        if self.before_render is not None:
            self.before_render()
        return generate_latest(self.registry)
