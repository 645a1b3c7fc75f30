"""Every size limit on the input usher reads: YAML documents, and the counts inside a scenario.

A YAML document can ask for far more than its size suggests: aliases (`&a` ... `*a`) repeat a
subtree, so 400 bytes of nested aliases ("billion laughs") name a billion values, and a few
kilobytes of `[[[[...` nest deeper than Python's recursion allows. A count such as
`count: 1e12` sizes an allocation the same way. usher refuses all of these with a message
naming the file, line, limit and value, before doing the work, so one hostile or mistaken
file (a scenario, the queue ConfigMap, a keymap or a theme) cannot exhaust memory or hang
`usher check`, a replay or the controller.

The limits are far above what real files use (see each constant); the YAML ones are checked
while the document is composed (`yamltree.compose_bounded`, and by `yamltree.read_plain` on
the loader's fast path, at the same events), the counts by the schema
(`models.py`) and, for totals, by `size_problems` before nodes or pods are generated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import PathSegment, Problem

if TYPE_CHECKING:  # the models import this module for their bounds
    from .models import Scenario
    from .traces import TraceImport

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on one YAML document, checked before any value is built from it."""

    max_bytes: int
    """The document's size in bytes (UTF-8)."""
    max_depth: int
    """Mappings and lists inside one another, counting those an alias brings in."""
    max_values: int
    """Values (scalars, mappings, lists, keys included) once every alias is expanded."""
    max_alias_values: int
    """Values that aliases bring in (the copies, not the anchored originals)."""


MAX_DEPTH = 64
"""Nesting depth of any YAML usher reads; a scenario nests 6 deep, a Kubernetes object ~20."""

SCENARIO_LIMITS = YamlLimits(
    max_bytes=32 * MIB,
    max_depth=MAX_DEPTH,
    max_values=5_000_000,
    max_alias_values=1_000_000,
)
"""Scenario files (`usher check/replay/sandbox`). The largest scenarios usher's own tools write
are 16 MiB with 2.5M values (`usher generate --nodes 5000`, a week) and 8 MiB with 1.5M values
(bench B3: 5,000 nodes, 100,000 jobs); twice the larger still loads. Reading costs about 500
bytes of memory per value, so the worst document allowed needs ~2.5 GB, no more than a legit
one of that size. Aliases in real scenarios bring in a few values per job, far below 1M."""

CONFIG_LIMITS = YamlLimits(
    max_bytes=1 * MIB,
    max_depth=MAX_DEPTH,
    max_values=200_000,
    max_alias_values=100_000,
)
"""The queue ConfigMap (Kubernetes caps a ConfigMap at 1 MiB), keymap and theme files: a real
one holds a few hundred to a few thousand values."""

API_BODY_LIMITS = YamlLimits(
    max_bytes=3 * MIB,
    max_depth=MAX_DEPTH,
    max_values=1_000_000,
    max_alias_values=100_000,
)
"""YAML request bodies in the sandbox's API server (a real one refuses bodies over 3 MiB)."""


# --- counts inside a scenario (and the queue ConfigMap) --------------------------------------

MAX_NODES = 100_000
"""Cluster nodes in a scenario: explicit, from node groups and from traces together (the
largest clusters run ~10,000-20,000 GPU nodes; bench B3 has 5,000)."""

MAX_GPUS_PER_NODE = 256
"""GPUs on one node, and so GPUs one pod can ask for (servers hold 4-16)."""

MAX_GPUS = 2_000_000
"""GPUs of all nodes together (100,000 nodes of 8 GPUs are 800,000)."""

MAX_JOBS = 1_000_000
"""Jobs in a scenario, explicit and from traces (bench B3 has 100,000)."""

MAX_PODS_PER_JOB = 100_000
"""Pods in one job (`count` of a pod group, the job's groups together, `minCount`)."""

MAX_PODS = 2_000_000
"""Pods of all jobs together (bench B3 has 166,000)."""

MAX_QUEUES = 10_000
"""Queues in a scenario or the queue ConfigMap."""

MAX_EVENTS = 1_000_000
"""Scheduled events in a scenario."""


def too_large(value: object, most: int) -> str:
    """`must be at most 100,000 (got 1,000,000,000,000); usher refuses larger values`."""
    if isinstance(value, float):
        shown = f"{value:,.0f}" if value.is_integer() and value < 1e21 else f"{value:g}"
    elif isinstance(value, int):
        shown = f"{value:,}" if value < 10**21 else f"{value:.3g}"
    else:
        shown = str(value)
    return f"must be at most {most:,} (got {shown}); usher refuses larger values"


def size_problems(
    scenario: Scenario,
    imported: TraceImport | None,
    problem: Callable[[tuple[PathSegment, ...], str], Problem],
) -> list[Problem]:
    """Totals over the whole scenario that are past a limit, checked before nodes are generated.

    `problem(path, message)` makes a `Problem` at a YAML path (a `Locator.problem`).
    """
    found: list[Problem] = []
    trace_nodes = len(imported.nodes) if imported is not None else 0
    trace_jobs = imported.jobs if imported is not None else []
    nodes = len(scenario.nodes) + sum(group.count for group in scenario.node_groups) + trace_nodes
    if nodes > MAX_NODES:
        where = ("nodeGroups",) if scenario.node_groups else ("nodes",) if scenario.nodes else ("traces",)
        found.append(problem(where, f"{nodes:,} nodes in all; usher refuses scenarios with more than {MAX_NODES:,}"))
    gpus = (
        sum(node.gpus for node in scenario.nodes)
        + sum(group.count * group.template.gpus for group in scenario.node_groups)
        + (sum(node.gpus for node in imported.nodes) if imported is not None else 0)
    )
    if gpus > MAX_GPUS:
        where = ("nodeGroups",) if scenario.node_groups else ("nodes",) if scenario.nodes else ("traces",)
        found.append(problem(where, f"{gpus:,} GPUs in all; usher refuses scenarios with more than {MAX_GPUS:,}"))
    jobs = len(scenario.jobs) + len(trace_jobs)
    if jobs > MAX_JOBS:
        found.append(problem(("jobs",), f"{jobs:,} jobs in all; usher refuses scenarios with more than {MAX_JOBS:,}"))
    for index, job in enumerate(scenario.jobs):
        if job.pod_count > MAX_PODS_PER_JOB:
            found.append(
                problem(
                    ("jobs", index),
                    f"{job.pod_count:,} pods in one job; usher refuses jobs with more than {MAX_PODS_PER_JOB:,}",
                )
            )
    pods = sum(job.pod_count for job in scenario.jobs) + sum(job.pod_count for job in trace_jobs)
    if pods > MAX_PODS:
        found.append(problem(("jobs",), f"{pods:,} pods in all; usher refuses scenarios with more than {MAX_PODS:,}"))
    if len(scenario.queues) > MAX_QUEUES:
        found.append(problem(("queues",), f"{len(scenario.queues):,} queues; usher refuses more than {MAX_QUEUES:,}"))
    if len(scenario.events) > MAX_EVENTS:
        found.append(problem(("events",), f"{len(scenario.events):,} events; usher refuses more than {MAX_EVENTS:,}"))
    return found
