"""Cross-checks of a schema-valid scenario: names that must exist, and work that can never fit.

Each finding is a `Problem` with the YAML path and line (or the trace file and row for
imported nodes and jobs). Errors stop the scenario; warnings (an event naming a job that is
not defined, a GPU model no node has) are kept on `Scenario.warnings`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import Locator, PathSegment, Problem
from .models import JOB_ACTIONS, NODE_ACTIONS, JobSpec, NodeSpec, PodSpec, Scenario
from .quantity import format_cpu, format_memory
from .traces import MAX_ROW_PROBLEMS, TraceImport, TraceOrigin

YamlPath = tuple[PathSegment, ...]


@dataclass
class CheckResult:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


class _Where(NamedTuple):
    """Where a node or job was defined: a YAML path, or a row of a trace file.

    A named tuple rather than a frozen dataclass: one is made per node and job (100,000+).
    """

    path: YamlPath = ()
    trace: TraceOrigin | None = None


@dataclass(frozen=True)
class _Capacity:
    """What the cluster offers, for checks of requests that can never be met."""

    max_gpus: int
    total_gpus: int
    max_cpu: float
    max_memory: float
    shapes: frozenset[tuple[int, float, float]]

    @classmethod
    def of(cls, nodes: Sequence[NodeSpec]) -> _Capacity:
        shapes = frozenset(
            (n.gpus, math.inf if n.cpu is None else n.cpu, math.inf if n.memory is None else n.memory) for n in nodes
        )
        return cls(
            max_gpus=max((s[0] for s in shapes), default=0),
            total_gpus=sum(n.gpus for n in nodes),
            max_cpu=max((s[1] for s in shapes), default=0),
            max_memory=max((s[2] for s in shapes), default=0),
            shapes=shapes,
        )


class _Checker:
    def __init__(self, scenario: Scenario, imported: TraceImport, locator: Locator) -> None:
        self.scenario = scenario
        self.imported = imported
        self.locator = locator
        self.result = CheckResult()
        self.trace_problems: dict[str, int] = {}
        self.fit_cache: dict[tuple[float, int, int], bool] = {}

    # --- reporting ---------------------------------------------------------------------

    def error(self, where: _Where, message: str, field_path: YamlPath = ()) -> None:
        if where.trace is None:
            self.result.errors.append(self.locator.problem((*where.path, *field_path), message))
            return
        origin = where.trace
        count = self.trace_problems.get(origin.file, 0) + 1
        self.trace_problems[origin.file] = count
        if count <= MAX_ROW_PROBLEMS:
            self.result.errors.append(Problem(origin.file, "", origin.line, message))

    def warn(self, path: YamlPath, message: str) -> None:
        self.result.warnings.append(self.locator.problem(path, message))

    def describe(self, where: _Where) -> str:
        if where.trace is not None:
            return f"{where.trace.file} line {where.trace.line}"
        line = self.locator.line_of(where.path)
        shown = self.locator.problem(where.path, "").path
        return f"{shown} (line {line})" if line is not None else shown

    def finish(self) -> CheckResult:
        for file, count in self.trace_problems.items():
            if count > MAX_ROW_PROBLEMS:
                self.result.errors.append(
                    Problem(file, "", None, f"... and {count - MAX_ROW_PROBLEMS} more rows with problems")
                )
        return self.result

    # --- checks --------------------------------------------------------------------------

    def run(self) -> CheckResult:
        nodes = self.node_sources()
        jobs = self.job_sources()
        node_names = self.unique("node", ((n.name, w) for n, w in nodes))
        queue_names = self.unique(
            "queue", ((q.name, _Where(("queues", i, "name"))) for i, q in enumerate(self.scenario.queues))
        )
        job_names = self.unique("job", ((j.name, w) for j, w in jobs))
        capacity = _Capacity.of([n for n, _ in nodes])
        gpu_models = {n.gpu_model for n, _ in nodes if n.gpu_model is not None and n.gpus > 0}
        for job, where in jobs:
            self.check_job(job, where, queue_names, capacity, gpu_models)
        self.check_events(node_names, job_names, queue_names)
        self.check_layouts()
        for i, queue in enumerate(self.scenario.queues):
            if queue.namespaces and (self.scenario.nodes or self.scenario.node_groups or self.scenario.jobs):
                self.warn(("queues", i, "namespaces"), "used on a cluster only (pods without a queue label); a replay's jobs name their queue")
        for i, trace in enumerate(self.scenario.traces):
            if trace.queue is not None and trace.pods is not None and trace.queue not in queue_names:
                self.error(_Where(("traces", i, "queue")), _unknown("queue", trace.queue, queue_names))
        return self.finish()

    def node_sources(self) -> list[tuple[NodeSpec, _Where]]:
        sources = [(node, _Where(("nodes", i))) for i, node in enumerate(self.scenario.nodes)]
        for g, group in enumerate(self.scenario.node_groups):
            sources.extend((node, _Where(("nodeGroups", g))) for node in group.nodes())
        origins = (_Where(trace=origin) for origin in self.imported.node_origins)
        sources.extend(zip(self.imported.nodes, origins, strict=True))
        return sources

    def job_sources(self) -> list[tuple[JobSpec, _Where]]:
        sources = [(job, _Where(("jobs", i))) for i, job in enumerate(self.scenario.jobs)]
        origins = (_Where(trace=origin) for origin in self.imported.job_origins)
        sources.extend(zip(self.imported.jobs, origins, strict=True))
        return sources

    def unique(self, kind: str, named: Iterable[tuple[str, _Where]]) -> set[str]:
        first: dict[str, _Where] = {}
        for name, where in named:
            if name in first:
                field_path: YamlPath = ("name",) if where.path and where.path[0] in ("nodes", "jobs") else ()
                if where.path[:1] == ("nodeGroups",):
                    field_path = ("prefix",)
                self.error(where, f"duplicate {kind} name {name!r} (also {self.describe(first[name])})", field_path)
            else:
                first[name] = where
        return set(first)

    def check_job(
        self, job: JobSpec, where: _Where, queues: set[str], capacity: _Capacity, gpu_models: set[str]
    ) -> None:
        scenario = self.scenario
        if job.queue not in queues and where.trace is None:  # trace jobs: reported at traces[i].queue
            self.error(where, _unknown("queue", job.queue, queues), ("queue",))
        if isinstance(job.priority, str) and job.priority not in scenario.priority_classes:
            self.error(where, _unknown("priority class", job.priority, set(scenario.priority_classes)), ("priority",))
        pod_names: set[str] = set()
        every_pod_fits = True
        for j, pod in enumerate(job.pods):
            pod_where = _Where((*where.path, "pods", j), where.trace)
            if pod.name in pod_names:
                self.error(pod_where, f"duplicate pod name {pod.name!r} in job {job.name!r}", ("name",))
            pod_names.add(pod.name)
            self.check_pod_topology(pod, pod_where)
            every_pod_fits = self.check_pod_fits(pod, pod_where, capacity) and every_pod_fits
            if pod.gpu_model and pod.gpu > 0 and where.trace is None and not set(pod.gpu_model) & gpu_models:
                self.warn(
                    (*pod_where.path, "gpuModel"),
                    f"no node has GPU model {' or '.join(pod.gpu_model)}; the job will stay pending",
                )
        if job.min_count is not None and job.min_count > job.pod_count:
            self.error(where, f"minCount {job.min_count} is more than the job's {job.pod_count} pods", ("minCount",))
            return
        if not every_pod_fits:
            return
        per_pod = sorted(pod.whole_gpus for pod in job.pods for _ in range(pod.count))
        needed = sum(per_pod[: job.gang_size])
        if needed > capacity.total_gpus:
            if job.min_count is not None:
                gang = f"minCount {job.min_count} of {job.pod_count} pods"
            else:
                gang = "1 pod" if job.pod_count == 1 else f"all {job.pod_count} pods"
            self.error(
                where,
                f"needs {needed} whole GPUs at once ({gang}), but the cluster has {capacity.total_gpus}",
            )

    def check_pod_topology(self, pod: PodSpec, where: _Where) -> None:
        if pod.topology is None:
            return
        levels = self.scenario.topology.levels
        if not levels:
            self.error(where, "topology levels are not defined (set topology.levels first)", ("topology",))
        elif pod.topology.level not in levels:
            self.error(
                where,
                _unknown("topology level", pod.topology.level, set(levels), ordered=levels),
                ("topology", pod.topology.mode.value),
            )

    def check_layouts(self) -> None:
        """A node group's ``layout`` labels its nodes by topology domain: each key must be a level.

        A key no level names (``usher/rak`` for ``usher/rack``) labels the nodes with something
        placement never reads, and leaves them without the level a gang may require.
        """
        levels = self.scenario.topology.levels
        for g, group in enumerate(self.scenario.node_groups):
            for key in group.layout:
                if key in levels:
                    continue
                path = ("nodeGroups", g, "layout", key)
                if not levels:
                    self.error(_Where(path), f"{key!r} is not a topology level: topology levels are not defined "
                                             "(set topology.levels first)")
                else:
                    self.error(_Where(path), _unknown("topology level", key, set(levels), ordered=levels)
                               + "; a layout labels nodes by topology level")

    def check_pod_fits(self, pod: PodSpec, where: _Where, capacity: _Capacity) -> bool:
        """Whether one pod fits on some node when the cluster is empty (reports why not)."""
        fits_alone = True
        gpus = pod.whole_gpus
        if gpus > capacity.max_gpus:
            fits_alone = False
            self.error(where, f"asks for {gpus} GPUs per pod, but the largest node has {capacity.max_gpus}", ("gpu",))
        elif pod.is_shared and capacity.max_gpus == 0:
            fits_alone = False
            self.error(where, "asks for a share of a GPU, but no node has a GPU", ("gpu",))
        if pod.cpu > capacity.max_cpu:
            fits_alone = False
            self.error(
                where,
                f"asks for {format_cpu(pod.cpu)} CPU per pod, but the largest node has "
                f"{format_cpu(int(capacity.max_cpu))}",
                ("cpu",),
            )
        if pod.memory > capacity.max_memory:
            fits_alone = False
            self.error(
                where,
                f"asks for {format_memory(pod.memory)} memory per pod, but the largest node has "
                f"{format_memory(int(capacity.max_memory))}",
                ("memory",),
            )
        if fits_alone and not self.fits_some_node(pod, capacity):
            wanted = [f"{gpus} GPUs"] if gpus else ["a GPU"] if pod.is_shared else []
            if pod.cpu:
                wanted.append(f"{format_cpu(pod.cpu)} CPU")
            if pod.memory:
                wanted.append(f"{format_memory(pod.memory)} memory")
            self.error(where, f"no single node has {' and '.join(wanted)} for one pod")
            return False
        return fits_alone

    def fits_some_node(self, pod: PodSpec, capacity: _Capacity) -> bool:
        need = 1.0 if pod.is_shared else pod.gpu
        key = (need, pod.cpu, pod.memory)
        fits = self.fit_cache.get(key)
        if fits is None:
            fits = any(g >= need and c >= pod.cpu and m >= pod.memory for g, c, m in capacity.shapes)
            self.fit_cache[key] = fits
        return fits

    def check_events(self, nodes: set[str], jobs: set[str], queues: set[str]) -> None:
        for k, event in enumerate(self.scenario.events):
            where = _Where(("events", k))
            if event.action in NODE_ACTIONS and event.node is not None and event.node not in nodes:
                self.error(where, _unknown("node", event.node, nodes), ("node",))
            elif event.action in JOB_ACTIONS and event.job is not None and event.job not in jobs:
                self.warn(
                    ("events", k, "job"),
                    f"no job named {event.job!r} in this scenario; the {event.action} does nothing",
                )
            elif event.queue is not None and event.queue not in queues:
                self.error(where, _unknown("queue", event.queue, queues), ("queue",))


def check_scenario(scenario: Scenario, imported: TraceImport, locator: Locator) -> CheckResult:
    """Every cross-check; errors and warnings in the order found."""
    return _Checker(scenario, imported, locator).run()


def _unknown(kind: str, name: str, known: set[str], ordered: Sequence[str] | None = None) -> str:
    if not known:
        return f"unknown {kind} {name!r} (none are defined)"
    close = difflib.get_close_matches(name, list(known), n=1) if len(known) < 5000 else []
    if close:
        return f"unknown {kind} {name!r} (did you mean {close[0]!r}?)"
    names = list(ordered) if ordered is not None else sorted(known)
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"unknown {kind} {name!r} (known: {shown})"
