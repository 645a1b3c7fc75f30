"""The names usher reads and writes on Kubernetes objects: its scheduler name, labels, annotations.

They are the vocabulary every part of the kube backend shares (``objects`` parses pods and nodes
by them, ``owners`` finds gangs by them, the agent writes node annotations), so they live in a
module that imports nothing: any module may read them without importing another's logic, and
no two modules of the backend import each other for a constant. ``objects`` re-exports them for
the callers that have always found them there. The user-facing meaning of each is documented in
``objects``' module docstring and the annotations reference.
"""

from __future__ import annotations

from enum import StrEnum

SCHEDULER_NAME = "usher"
GPU_RESOURCE = "nvidia.com/gpu"


class Label(StrEnum):
    QUEUE = "usher/queue"
    KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
    GANG = "usher/gang"
    GANG_SIZE = "usher/gang-size"
    POD_GROUP = "scheduling.x-k8s.io/pod-group"
    GPU_PRODUCT = "nvidia.com/gpu.product"
    GPU_MEMORY = "nvidia.com/gpu.memory"


class Annotation(StrEnum):
    GPU_FRACTION = "usher/gpu-fraction"
    GPU_MODEL = "usher/gpu-model"
    GPUS = "usher/gpus"
    TOPOLOGY_REQUIRED = "usher/topology-required"
    TOPOLOGY_PREFERRED = "usher/topology-preferred"
    ESTIMATE = "usher/estimate"
    CHECKPOINT_EVERY = "usher/checkpoint-every"
    PREEMPTIBLE = "usher/preemptible"
    MOVABLE = "usher/movable"
    APPROVED = "usher/approved"
    HOLD = "usher/hold"
    NVLINK = "usher/nvlink"
    GPU_HEALTH = "usher/gpu-health"
    #: the node agent's memory of critical XIDs over its restarts (``format_gpu_xids``)
    GPU_XIDS = "usher/gpu-xids"
    #: the sandbox's kubelet stand-in: how long the pod runs before it succeeds
    DURATION = "usher/duration"
