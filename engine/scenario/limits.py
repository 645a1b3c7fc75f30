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
(`models.py`) and, for totals, by `loader.size_problems` before nodes or pods are generated.
This module imports nothing of usher: the models, traces and loader import it for their bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

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
