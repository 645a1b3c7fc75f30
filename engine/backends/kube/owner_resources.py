"""The kinds of object usher reads to size gangs, and the pod labels and annotations that group pods.

One ``OwnerResource`` per kind and served version (its API group, version and plural, so its
collection's path): the controller keeps one optional read-only list and watch per entry of
``OWNER_RESOURCES`` (a CRD may be absent), keyed by group and kind, so both MPIJob versions feed
one cache. ``owners.infer_group`` walks these caches; ``owner_sizes`` reads each kind's spec. Kept
apart from both so that the table a reader looks for (which versions usher speaks) is one page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import owner_workload
from .names import Annotation


class Kind(StrEnum):
    """What a ``GroupSpec`` groups by: a Kubernetes kind, or one of the label conventions."""

    POD = "Pod"
    #: usher's ``usher/gang`` label
    GANG = "Gang"
    #: Kueue's ``kueue.x-k8s.io/pod-group-name`` label (no object behind it)
    KUEUE_POD_GROUP = "KueuePodGroup"
    POD_GROUP = "PodGroup"
    JOB = "Job"
    STATEFUL_SET = "StatefulSet"
    JOB_SET = "JobSet"
    PYTORCH_JOB = "PyTorchJob"
    MPI_JOB = "MPIJob"
    TF_JOB = "TFJob"
    TRAIN_JOB = "TrainJob"
    RAY_CLUSTER = "RayCluster"
    RAY_JOB = "RayJob"
    LEADER_WORKER_SET = "LeaderWorkerSet"
    #: Kubernetes' Workload API (``owner_workload``)
    WORKLOAD = "Workload"
    #: a runtime PodGroup of Kubernetes' Workload API, 1.36 on (``owner_workload``)
    SCHEDULING_GROUP = owner_workload.SCHEDULING_GROUP_KIND


class GroupLabel(StrEnum):
    """Pod labels, besides usher's own, that say which group a pod is in."""

    KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
    LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
    LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
    JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


class GroupAnnotation(StrEnum):
    """Pod annotations that say which group a pod is in, or how large it is."""

    VOLCANO_GROUP = "scheduling.k8s.io/group-name"
    KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"


#: usher annotations a top owner sets for its whole gang (``usher/gpus`` is usher's per-pod bind
#: record and ``usher/gpu-fraction`` a pod's own request: neither is taken from an owner)
GANG_ANNOTATIONS: tuple[str, ...] = (
    Annotation.ESTIMATE,
    Annotation.CHECKPOINT_EVERY,
    Annotation.TOPOLOGY_REQUIRED,
    Annotation.TOPOLOGY_PREFERRED,
    Annotation.PREEMPTIBLE,
    Annotation.GPU_MODEL,
    Annotation.APPROVED,
    Annotation.HOLD,
)


@dataclass(frozen=True, slots=True)
class OwnerResource:
    """One kind of object usher reads to size gangs, and where the API server serves it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def key(self) -> str:
        """The cache key for this kind (``batch/Job``): group and kind, whatever the version."""
        return f"{self.group}/{self.kind}" if self.group else self.kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The collection to list and watch: ``/apis/batch/v1/jobs``, ``/api/v1/...`` for core."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/{self.plural}"


JOB = OwnerResource("batch", "v1", "jobs", Kind.JOB)
JOB_SET = OwnerResource("jobset.x-k8s.io", "v1alpha2", "jobsets", Kind.JOB_SET)
PYTORCH_JOB = OwnerResource("kubeflow.org", "v1", "pytorchjobs", Kind.PYTORCH_JOB)
MPI_JOB = OwnerResource("kubeflow.org", "v1", "mpijobs", Kind.MPI_JOB)
#: the MPI Operator's MPIJob: the same objects (same cache key) as ``MPI_JOB``, one is served
MPI_JOB_V2 = OwnerResource("kubeflow.org", "v2beta1", "mpijobs", Kind.MPI_JOB)
TF_JOB = OwnerResource("kubeflow.org", "v1", "tfjobs", Kind.TF_JOB)
TRAIN_JOB = OwnerResource("trainer.kubeflow.org", "v1alpha1", "trainjobs", Kind.TRAIN_JOB)
RAY_CLUSTER = OwnerResource("ray.io", "v1", "rayclusters", Kind.RAY_CLUSTER)
RAY_JOB = OwnerResource("ray.io", "v1", "rayjobs", Kind.RAY_JOB)
LEADER_WORKER_SET = OwnerResource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", Kind.LEADER_WORKER_SET)
VOLCANO_POD_GROUP = OwnerResource("scheduling.volcano.sh", "v1beta1", "podgroups", Kind.POD_GROUP)
POD_GROUP = OwnerResource("scheduling.x-k8s.io", "v1alpha1", "podgroups", Kind.POD_GROUP)
WORKLOAD = OwnerResource(owner_workload.GROUP, owner_workload.VERSION, owner_workload.PLURAL, Kind.WORKLOAD)
#: the runtime PodGroups of 1.36 and 1.37: one resource (one cache), whichever version is served
SCHEDULING_POD_GROUPS = tuple(
    OwnerResource(owner_workload.GROUP, v, owner_workload.POD_GROUP_PLURAL, Kind.SCHEDULING_GROUP)
    for v in owner_workload.POD_GROUP_VERSIONS
)

#: Every kind usher reads to size gangs: one optional read-only list+watch each (a CRD may be
#: absent). Caches are keyed by ``OwnerResource.key``; both MPIJob versions feed one cache.
OWNER_RESOURCES: tuple[OwnerResource, ...] = (
    JOB,
    JOB_SET,
    PYTORCH_JOB,
    MPI_JOB,
    MPI_JOB_V2,
    TF_JOB,
    TRAIN_JOB,
    RAY_CLUSTER,
    RAY_JOB,
    LEADER_WORKER_SET,
    VOLCANO_POD_GROUP,
    POD_GROUP,
    WORKLOAD,
    *SCHEDULING_POD_GROUPS,
)

#: (``OwnerResource.key``, namespace, name) -> the cached object, or None (not cached yet, or its
#: kind is not served)
OwnerLookup = Callable[[str, str, str], dict[str, Any] | None]
#: (``OwnerResource.key``, namespace, name) of one object
OwnerKey = tuple[str, str, str]

KUBEFLOW_SPECS: dict[str, str] = {
    PYTORCH_JOB.key: "pytorchReplicaSpecs",
    MPI_JOB.key: "mpiReplicaSpecs",
    TF_JOB.key: "tfReplicaSpecs",
}
RESOURCE_OF: dict[str, OwnerResource] = {r.key: r for r in OWNER_RESOURCES}
