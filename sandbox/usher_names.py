"""usher's interface as its users write it: the scheduler name, the labels and annotations a
tenant puts on pods, and the ConfigMaps an operator edits.

The sandbox serves a scenario's cluster the way a user of usher would build it (pods for
``schedulerName: usher`` with its gang labels, the queues ConfigMap, an operator's approvals),
so it needs these strings; it declares them here instead of importing usher's kube backend,
which holds usher's own reading of them (``usher.engine.backends.kube.names`` and ``rbac``).
The sandbox is the independent oracle for that backend and must not share its code; a test
(tests/kube/test_sandbox_usher_names.py) holds the two spellings to the same strings, as the
annotations reference (docs/) documents them for users.
"""

from __future__ import annotations

from enum import StrEnum

SCHEDULER_NAME = "usher"
GPU_RESOURCE = "nvidia.com/gpu"
"""NVIDIA's device plugin's extended resource."""

USHER_NAMESPACE = "usher-system"
QUEUES_CONFIGMAP = "usher-queues"
QUEUES_CONFIG_KEY = "queues.yaml"
DECISIONS_CONFIGMAP = "usher-decisions"
DECISIONS_CONFIG_KEY = "decisions.yaml"


class Label(StrEnum):
    """The labels of usher's that the sandbox writes on pods and nodes."""

    QUEUE = "usher/queue"
    GANG = "usher/gang"
    GANG_SIZE = "usher/gang-size"
    GPU_PRODUCT = "nvidia.com/gpu.product"
    GPU_MEMORY = "nvidia.com/gpu.memory"


class Annotation(StrEnum):
    """The annotations of usher's that the sandbox writes (a scenario's job as a user writes it)
    or reads (``usher/gpus``, set by usher's binder; ``usher/duration``, the kubelet stand-in's)."""

    GPU_FRACTION = "usher/gpu-fraction"
    GPU_MODEL = "usher/gpu-model"
    GPUS = "usher/gpus"
    TOPOLOGY_REQUIRED = "usher/topology-required"
    TOPOLOGY_PREFERRED = "usher/topology-preferred"
    ESTIMATE = "usher/estimate"
    CHECKPOINT_EVERY = "usher/checkpoint-every"
    PREEMPTIBLE = "usher/preemptible"
    MOVABLE = "usher/movable"
    NVLINK = "usher/nvlink"
    DURATION = "usher/duration"
    """How long the kubelet stand-in runs the pod before it succeeds."""
