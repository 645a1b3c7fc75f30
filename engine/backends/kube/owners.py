"""Which gang a pod belongs to, found from the workload that made it: no relabelling needed.

A batch Job with parallelism 4, a JobSet, a Kubeflow PyTorchJob, a RayCluster or a
LeaderWorkerSet makes pods that only work together. ``infer_group`` says, for one pod, which gang
it is part of, how many pods that gang has and how few of them may start, by reading (through an
``OwnerLookup``, never the API server) the objects above the pod, as NVIDIA KAI's pod grouper does
with the pod's top owner. It is pure: the lead keeps one read-only cache per ``OWNER_RESOURCES``
entry and passes a lookup into them.

Rules, first match wins:

1. usher's labels: ``usher/gang`` + ``usher/gang-size`` (key ``<ns>/<gang>``, as ever). A
   ``usher/gang`` without a size takes the size of the pod's owner (rule 6); with no owner that
   sizes gangs, the ``problem`` names ``usher/gang-size``. With a size, no owner is read for
   the gang (whatever the rule, a batch Job that made the pod is read for whether an eviction
   would end it: ``GroupSpec.survives_eviction``).
2. The Workload API (Kubernetes 1.35, ``scheduling.k8s.io/v1alpha1``): a pod's ``spec.workloadRef``
   names a Workload and one of its pod groups; a ``gang`` group's ``minCount`` is the gang, each
   ``podGroupReplicaKey`` a gang of its own, a ``basic`` group's pods are each alone; from 1.36
   a pod's ``spec.schedulingGroup.podGroupName`` names a runtime ``scheduling.k8s.io`` PodGroup
   (``v1alpha2``, ``v1beta1``) whose ``minCount`` is the gang (rules and keys in ``owner_workload``).
3. Volcano: the pod annotation ``scheduling.k8s.io/group-name`` names a
   ``scheduling.volcano.sh/v1beta1`` PodGroup. Volcano's ``spec.minMember`` is the gang
   threshold: the job may run once that many pods are placed; pods past it (a Volcano Job whose
   ``minAvailable`` is below its replicas) are placed as they fit. The PodGroup holds no total, so
   usher's gang is the ``minMember`` pods, as it is for the coscheduling plugin. Key
   ``<ns>/PodGroup/<name>``.
4. scheduler-plugins coscheduling: the label ``scheduling.x-k8s.io/pod-group`` names a
   ``scheduling.x-k8s.io/v1alpha1`` PodGroup whose ``spec.minMember`` is the size (key
   ``<ns>/<name>``, as ever).
5. Kueue pod groups: label ``kueue.x-k8s.io/pod-group-name``, size from the annotation
   ``kueue.x-k8s.io/pod-group-total-count`` (key ``<ns>/KueuePodGroup/<name>``). Kueue also puts
   these on the pods of the StatefulSets and LeaderWorkerSets it manages.
6. The owner chain (``metadata.ownerReferences`` with ``controller: true``), key
   ``<ns>/<Kind>/<top owner name>``:

   - batch Job: one run of the Job is a gang of ``spec.parallelism`` (default 1) pods, capped by
     the completions still to do (``spec.completions`` less ``status.succeeded``) when
     ``spec.completions`` is set, indexed or not: a Job with parallelism 4 and completions 2 runs
     2 pods at once, and the last wave of a longer Job runs fewer than its parallelism. The key has
     no uid: a Job deleted and recreated under its name gets new pods (with new uids) and its old
     pods are being deleted; a pod whose ownerReference uid is not the cached Job's waits instead.
     A Job owned by a kind usher does not read (a CronJob, a RayJob's submitter) is its own gang.
   - JobSet (Job -> JobSet): all its pods, the sum over ``spec.replicatedJobs[]`` of ``replicas``
     (default 1) times the template's parallelism (default 1, capped by completions). A JobSet
     that starts its replicated jobs one after another (``spec.startupPolicy.startupPolicyOrder:
     InOrder``, or a ``dependsOn``) never has them all at once: there each replicated job is its
     own gang, keyed ``<ns>/JobSet/<name>/<replicated job>`` (from the Job's or the pod's label
     ``jobset.sigs.k8s.io/replicatedjob-name``).
   - TrainJob (Pod -> Job -> JobSet -> TrainJob): the TrainJob is the gang (its key and usher
     annotations), its size is the JobSet's, as above. The JobSet is what makes the pods: it counts
     the launcher or initializers a runtime adds, which ``spec.trainer.numNodes`` does not.
   - PyTorchJob, MPIJob, TFJob: the sum of ``replicas`` (default 1) over
     ``spec.pytorchReplicaSpecs`` / ``spec.mpiReplicaSpecs`` / ``spec.tfReplicaSpecs``. Minimum:
     a PyTorchJob's ``spec.elasticPolicy.minReplicas`` counts Workers only (the training operator
     scales ``pytorchReplicaSpecs.Worker.replicas`` between minReplicas and maxReplicas: it is
     the CRD's scale subresource), so the minimum is the other replicas (Master) plus minReplicas;
     an MPIJob with ``spec.launcherCreationPolicy: WaitForWorkersReady`` creates its launcher
     after the workers, so its minimum leaves the launcher out;
     ``spec.runPolicy.schedulingPolicy.minAvailable`` (the training operator's own gang minimum,
     over all replicas) wins over both.
   - RayCluster: the head (1) plus each worker group's replicas times ``numOfHosts`` (default 1),
     replicas clamped to [minReplicas, maxReplicas] and a suspended group counting 0, as KubeRay
     creates them. The minimum is 1 + the sum of ``minReplicas`` x ``numOfHosts`` only when
     ``spec.enableInTreeAutoscaling`` is true: without the autoscaler nothing scales a group, so
     all its pods are expected (KubeRay's own Volcano integration does the same). A RayJob owning
     the RayCluster is the gang (key and annotations), sized by its RayCluster.
   - LeaderWorkerSet: one gang per group. The leader pod is owned by the LWS's StatefulSet, the
     workers by a StatefulSet owned by the leader Pod, so the walk cannot reach the LWS from a
     worker: a pod whose controller is a StatefulSet and that carries
     ``leaderworkerset.sigs.k8s.io/name`` is read by its labels (``.../name`` and
     ``.../group-index``, both set by the LWS controller and webhook on leaders and workers). Size
     ``spec.leaderWorkerTemplate.size`` (leader included, default 1), key
     ``<ns>/LeaderWorkerSet/<name>/<group index>``. With ``spec.startupPolicy: LeaderReady`` the
     workers are only created once the leader is ready, so the minimum is 1.
   - anything else (Deployment, ReplicaSet, StatefulSet, DaemonSet, a bare pod): one pod, one job,
     key ``<ns>/<pod name>``, size 1. ReplicaSets and StatefulSets are not read.

An owner usher reads that is not cached yet gives a ``problem`` with ``waiting`` set: the lead
shows the pod as waiting and re-runs ``infer_group`` when any object in ``depends`` changes. The
top owner's usher annotations (``GANG_ANNOTATIONS``) come back in ``annotations``, to win over
the pods' for the whole gang (an owner between the pod and the gang object, such as a JobSet's
Jobs, is not read for them: they could differ between the pods of one gang).

Modelled API versions (each checked against its project's documentation and types): batch/v1 Job;
jobset.x-k8s.io/v1alpha2 JobSet; kubeflow.org/v1 PyTorchJob, MPIJob and TFJob (Kubeflow Training
Operator v1) and kubeflow.org/v2beta1 MPIJob (the standalone MPI Operator; the same CRD name, so a
cluster serves one of the two); trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2);
ray.io/v1 RayCluster and RayJob (KubeRay 1.x); leaderworkerset.x-k8s.io/v1 LeaderWorkerSet;
scheduling.volcano.sh/v1beta1 PodGroup; scheduling.x-k8s.io/v1alpha1 PodGroup (scheduler-plugins);
scheduling.k8s.io/v1alpha1 Workload (Kubernetes 1.35).
Owner references are matched on group and kind, not version. The kinds, versions and paths are
in ``owner_resources``; how each kind counts its pods (the sizes above) in ``owner_sizes``; the
Workload API's rules in ``owner_workload``. This module keeps the walk and the rules' order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import owner_workload
from .names import Label
from .owner_resources import (
    GANG_ANNOTATIONS, JOB, JOB_SET, KUBEFLOW_SPECS, LEADER_WORKER_SET, MPI_JOB, MPI_JOB_V2, OWNER_RESOURCES, POD_GROUP,
    PYTORCH_JOB, RAY_CLUSTER, RAY_JOB, RESOURCE_OF, SCHEDULING_POD_GROUPS, TF_JOB, TRAIN_JOB, VOLCANO_POD_GROUP, WORKLOAD,
    GroupAnnotation, GroupLabel, Kind, OwnerKey, OwnerLookup, OwnerResource,
)
from .owner_sizes import (
    EVICTED_EXIT_CODES, INDEX_FAILURE_COUNT, InvalidOwner, int_at, job_pods, job_survives_eviction,
    jobset_pods, jobset_stage, kubeflow_counts, ray_counts,
)

__all__ = [  # the kinds and sizes live in owner_resources and owner_sizes; importers read them here
    "EVICTED_EXIT_CODES", "GANG_ANNOTATIONS", "INDEX_FAILURE_COUNT", "JOB", "JOB_SET", "LEADER_WORKER_SET", "MPI_JOB",
    "MPI_JOB_V2", "OWNER_RESOURCES", "POD_GROUP", "PYTORCH_JOB", "RAY_CLUSTER", "RAY_JOB", "SCHEDULING_POD_GROUPS",
    "TF_JOB", "TRAIN_JOB", "VOLCANO_POD_GROUP", "WORKLOAD", "GroupAnnotation", "GroupLabel", "GroupSpec", "Kind",
    "OwnerKey", "OwnerLookup", "OwnerResource", "controller_of", "infer_group", "job_survives_eviction", "resource_key",
]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The gang one pod belongs to, as far as its labels and owners tell."""

    #: the gang's key, unique per namespace (``research/PyTorchJob/llama-ft``)
    key: str
    #: what it groups by (``Kind``: ``PyTorchJob``, ``Job``, ``Gang``, ``Pod``...)
    kind: str
    #: the owner's (or label's, or pod's) name
    name: str
    #: pods in the whole gang; None when it cannot be told (see ``problem``)
    size: int | None
    #: the fewest pods that may start; None: all ``size`` of them
    minimum: int | None = None
    #: the owner makes the pods beyond ``minimum`` only once those run (a LeaderWorkerSet with
    #: ``startupPolicy: LeaderReady``, an MPIJob whose launcher waits for its workers): the gang
    #: starts once its minimum exists, and the rest join it as they come
    staged: bool = False
    #: why the size cannot be determined, naming the missing field or object
    problem: str | None = None
    #: the object whose change re-decides this group: the top owner (or PodGroup), or while
    #: ``waiting`` the owner not cached yet
    owner: OwnerKey | None = None
    #: the top owner's usher annotations (``GANG_ANNOTATIONS``), to win over the pods'
    annotations: dict[str, str] = field(default_factory=dict)
    #: the problem is only that an object is not cached yet: it may resolve by itself
    waiting: bool = False
    #: every object read (or looked for) to decide: re-run ``infer_group`` when one changes
    depends: tuple[OwnerKey, ...] = ()
    #: whether the owner makes the gang's pods anew once they are evicted (a batch Job: by its
    #: podFailurePolicy and backoffLimit, ``job_survives_eviction``); None: not known here
    survives_eviction: bool | None = None
    #: which incarnation of the gang this is: its top owner's (or PodGroup's) ``metadata.uid``, a
    #: lone pod's own uid; None for a gang of labels only (set by the intake, which holds the owners)
    uid: str | None = None


class _Missing(Exception):
    """An owner usher reads is not cached yet (or the cache holds another object of its name)."""

    def __init__(self, message: str, resource: OwnerResource, name: str) -> None:
        super().__init__(message)
        self.resource = resource
        self.name = name


@dataclass(slots=True)
class _Walk:
    """Reads owners through the lookup for one pod, remembering what it read."""

    lookup: OwnerLookup
    served: Collection[str] | None
    namespace: str
    depends: list[OwnerKey] = field(default_factory=list)

    def reads(self, resource: OwnerResource | None) -> bool:
        return resource is not None and (self.served is None or resource.key in self.served)

    def get(self, resource: OwnerResource, name: str, uid: str | None = None) -> dict[str, Any]:
        where = f"{self.namespace}/{name}"
        self.depends.append((resource.key, self.namespace, name))
        obj = self.lookup(resource.key, self.namespace, name)
        if obj is None:
            raise _Missing(f"the owner {resource.kind} {where} is not known yet", resource, name)
        cached = (obj.get("metadata") or {}).get("uid")
        if uid and cached and uid != cached:
            raise _Missing(
                f"the owner {resource.kind} {where} known to usher is another object than the pod's "
                f"(uid {cached}, the pod's owner has {uid}); waiting for the cache to catch up",
                resource,
                name,
            )
        return obj

    def parent(self, obj: dict[str, Any], *allowed: OwnerResource) -> tuple[OwnerResource, dict[str, Any]] | None:
        """The controller of ``obj`` if it is one of ``allowed`` and served, read; else None."""
        ref = controller_of(obj)
        if ref is None:
            return None
        resource = _resource_of(ref)
        if resource is None or resource not in allowed or not self.reads(resource):
            return None
        return resource, self.get(resource, ref["name"], ref.get("uid"))


def infer_group(pod: dict[str, Any], lookup: OwnerLookup, *, served: Collection[str] | None = None) -> GroupSpec:
    """The gang ``pod`` belongs to (rules in the module docstring).

    ``lookup`` reads the caches of ``OWNER_RESOURCES`` by ``OwnerResource.key``. ``served``, when
    given, is the keys whose caches exist: an owner of another kind is treated as one usher does
    not read (its pods fall to the next rule) instead of one not cached yet. Never raises for what
    users write; a pod without ``metadata.name`` is not a pod.
    """
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    name = meta["name"]
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    walk = _Walk(lookup, served, ns)

    gang = labels.get(Label.GANG)
    if gang:
        spec = _usher_gang(pod, ns, gang, labels.get(Label.GANG_SIZE), walk)
    elif (ref := owner_workload.workload_ref(pod)) is not None:
        spec = _workload(ref, name, walk)
    elif (group := owner_workload.scheduling_group(pod)) is not None:
        spec = _scheduling_group(group, name, walk)
    elif volcano := annotations.get(GroupAnnotation.VOLCANO_GROUP):
        spec = _pod_group(VOLCANO_POD_GROUP, f"{ns}/{Kind.POD_GROUP}/{volcano}", volcano, walk)
    elif coscheduling := labels.get(Label.POD_GROUP):
        spec = _pod_group(POD_GROUP, f"{ns}/{coscheduling}", coscheduling, walk)
    elif kueue := labels.get(GroupLabel.KUEUE_POD_GROUP):
        spec = _kueue_group(ns, kueue, annotations.get(GroupAnnotation.KUEUE_TOTAL_COUNT))
    else:
        spec = _from_owners(pod, walk) or _single(ns, name)
    return _with_eviction_outcome(spec, pod, walk)


def _with_eviction_outcome(spec: GroupSpec, pod: dict[str, Any], walk: _Walk) -> GroupSpec:
    """``spec`` with ``survives_eviction`` for a pod a batch Job made (alone, in a JobSet, or
    under a gang label or pod group): by that Job's failure rules (``job_survives_eviction``);
    the Job is then one of what the group depends on, so its status changes re-decide it."""
    ref = controller_of(pod)
    if ref is None or _resource_of(ref) != JOB or not walk.reads(JOB):
        return spec
    key = (JOB.key, walk.namespace, ref["name"])
    depends = spec.depends if key in spec.depends else (*spec.depends, key)
    try:
        job = walk.get(JOB, ref["name"], ref.get("uid"))
    except _Missing:
        return replace(spec, depends=depends)  # decided again once the Job is known
    try:
        pods = job_pods(job, "", remaining=True)
    except InvalidOwner:
        pods = 1
    return replace(spec, survives_eviction=job_survives_eviction(job, pods, pod), depends=depends)


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference of ``obj`` that has ``controller: true`` (with a kind and a name)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return ref
    return None


def resource_key(ref: Mapping[str, Any]) -> str:
    """The cache key an ownerReference points into (``batch/Job`` for ``batch/v1``, ``Job``)."""
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    kind = str(ref.get("kind") or "")
    return f"{group}/{kind}" if group else kind


def _resource_of(ref: Mapping[str, Any]) -> OwnerResource | None:
    return RESOURCE_OF.get(resource_key(ref))


def _single(ns: str, name: str) -> GroupSpec:
    return GroupSpec(key=f"{ns}/{name}", kind=Kind.POD, name=name, size=1)


# -- label conventions ----------------------------------------------------------------------


def _usher_gang(pod: dict[str, Any], ns: str, gang: str, size_text: str | None, walk: _Walk) -> GroupSpec:
    key = f"{ns}/{gang}"
    if size_text is not None:
        size = _positive(size_text)
        if size is None:
            problem = f"label {Label.GANG_SIZE}: {size_text!r} is not a positive whole number"
            return GroupSpec(key=key, kind=Kind.GANG, name=gang, size=None, problem=problem)
        return GroupSpec(key=key, kind=Kind.GANG, name=gang, size=size)
    found = _from_owners(pod, walk)
    if found is None:
        problem = (
            f"label {Label.GANG} has no {Label.GANG_SIZE} beside it, and the pod has no owner "
            "(a Job, JobSet, PyTorchJob, MPIJob, TFJob, TrainJob, RayCluster, RayJob or LeaderWorkerSet) "
            f"to size the gang from: add {Label.GANG_SIZE}"
        )
        return GroupSpec(key=key, kind=Kind.GANG, name=gang, size=None, problem=problem)
    return replace(found, key=key, kind=Kind.GANG, name=gang)


def _pod_group(resource: OwnerResource, key: str, name: str, walk: _Walk) -> GroupSpec:
    where = f"{walk.namespace}/{name}"
    owner = (resource.key, walk.namespace, name)
    if not walk.reads(resource):
        problem = f"the pod names PodGroup {where}, but usher cannot read {resource.api_version} PodGroups"
        return GroupSpec(key=key, kind=Kind.POD_GROUP, name=name, size=None, problem=problem, owner=owner)
    try:
        obj = walk.get(resource, name)
    except _Missing:
        return GroupSpec(
            key=key,
            kind=Kind.POD_GROUP,
            name=name,
            size=None,
            problem=f"PodGroup {where} is not known yet (its spec.minMember gives the gang's size)",
            owner=owner,
            waiting=True,
            depends=(owner,),
        )
    try:
        size = int_at(obj, ("spec", "minMember"), f"PodGroup {where}")
        if size < 1:
            raise InvalidOwner(f"PodGroup {where} has spec.minMember {size}; usher needs at least 1")
    except InvalidOwner as exc:
        return GroupSpec(key=key, kind=Kind.POD_GROUP, name=name, size=None, problem=str(exc), owner=owner, depends=(owner,))
    return GroupSpec(key=key, kind=Kind.POD_GROUP, name=name, size=size, owner=owner, depends=(owner,))


def _workload(ref: owner_workload.WorkloadRef, pod_name: str, walk: _Walk) -> GroupSpec:
    """The gang of a pod's ``spec.workloadRef`` (``owner_workload``); decided again when the
    Workload changes (or appears)."""
    owner = (WORKLOAD.key, walk.namespace, ref.name)
    found = owner_workload.workload_gang(
        ref, walk.namespace, lambda name: walk.lookup(WORKLOAD.key, walk.namespace, name), walk.reads(WORKLOAD)
    )
    if found.key is None:  # a basic group: each pod alone
        return replace(_single(walk.namespace, pod_name), depends=(owner,))
    return GroupSpec(
        key=found.key,
        kind=Kind.WORKLOAD,
        name=ref.name,
        size=found.size,
        problem=found.problem,
        owner=owner,
        waiting=found.waiting,
        depends=(owner,),
    )


def _scheduling_group(name: str, pod_name: str, walk: _Walk) -> GroupSpec:
    """The gang of a pod's ``spec.schedulingGroup`` (a runtime PodGroup, ``owner_workload``);
    decided again when the PodGroup changes (or appears)."""
    resource = SCHEDULING_POD_GROUPS[0]
    owner = (resource.key, walk.namespace, name)
    found = owner_workload.pod_group_gang(
        name, walk.namespace, lambda n: walk.lookup(resource.key, walk.namespace, n), walk.reads(resource)
    )
    if found.key is None:  # a basic group: each pod alone
        return replace(_single(walk.namespace, pod_name), depends=(owner,))
    return GroupSpec(key=found.key, kind=Kind.SCHEDULING_GROUP, name=name, size=found.size, problem=found.problem,
                     owner=owner, waiting=found.waiting, depends=(owner,))


def _kueue_group(ns: str, name: str, total: str | None) -> GroupSpec:
    key = f"{ns}/{Kind.KUEUE_POD_GROUP}/{name}"
    size = _positive(total) if total is not None else None
    problem = None
    if total is None:
        problem = f"label {GroupLabel.KUEUE_POD_GROUP} has no annotation {GroupAnnotation.KUEUE_TOTAL_COUNT} beside it"
    elif size is None:
        problem = f"annotation {GroupAnnotation.KUEUE_TOTAL_COUNT}: {total!r} is not a positive whole number"
    return GroupSpec(key=key, kind=Kind.KUEUE_POD_GROUP, name=name, size=size, problem=problem)


# -- owners ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Gang:
    """A gang found from owners, before it is sized."""

    resource: OwnerResource
    top: dict[str, Any]
    suffix: str | None = None

    @property
    def name(self) -> str:
        return self.top["metadata"]["name"]


def _from_owners(pod: dict[str, Any], walk: _Walk) -> GroupSpec | None:
    """The gang of ``pod``'s owners; None when no owner usher reads makes gangs."""
    ref = controller_of(pod)
    if ref is None:
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        if resource_key(ref) == f"apps/{Kind.STATEFUL_SET}" and labels.get(GroupLabel.LWS_NAME):
            if not walk.reads(LEADER_WORKER_SET):
                return None
            return _leader_worker_set(labels, walk)
        resource = _resource_of(ref)
        if resource is None or not walk.reads(resource):
            return None
        if resource == JOB:
            job = walk.get(JOB, ref["name"], ref.get("uid"))
            return _job_family(pod, job, walk)
        if resource == RAY_CLUSTER:
            cluster = walk.get(RAY_CLUSTER, ref["name"], ref.get("uid"))
            parent = walk.parent(cluster, RAY_JOB)
            gang = _Gang(*parent) if parent else _Gang(RAY_CLUSTER, cluster)
            # sized by the RayCluster, so a problem names the RayCluster's fields
            return _sized(gang, walk, lambda _: ray_counts(cluster, _what(RAY_CLUSTER, cluster, walk)), cluster)
        if resource.key in KUBEFLOW_SPECS:
            owner = walk.get(resource, ref["name"], ref.get("uid"))
            staged = resource.key == MPI_JOB.key and (owner.get("spec") or {}).get("launcherCreationPolicy") == "WaitForWorkersReady"
            return _sized(_Gang(resource, owner), walk, lambda what: kubeflow_counts(resource, owner, what), staged=staged)
        return None
    except _Missing as exc:
        owner = (exc.resource.key, walk.namespace, exc.name)
        return GroupSpec(
            key=f"{walk.namespace}/{exc.resource.kind}/{exc.name}",
            kind=exc.resource.kind,
            name=exc.name,
            size=None,
            problem=str(exc),
            owner=owner,
            waiting=True,
            depends=tuple(walk.depends),
        )


def _job_family(pod: dict[str, Any], job: dict[str, Any], walk: _Walk) -> GroupSpec:
    """A Job's pods: the Job's gang, or its JobSet's, or the TrainJob's above that."""
    parent = walk.parent(job, JOB_SET)
    if parent is None:
        return _sized(_Gang(JOB, job), walk, lambda what: (job_pods(job, what, remaining=True), None))
    _, jobset = parent
    top = walk.parent(jobset, TRAIN_JOB)
    gang = _Gang(*top) if top else _Gang(JOB_SET, jobset)
    staged, rjob = jobset_stage(jobset, job, pod)
    if staged:
        gang.suffix = rjob

    def counts(what: str) -> tuple[int, int | None]:
        if staged and rjob is None:
            raise InvalidOwner(
                f"{what} starts its replicated jobs one after another, and the pod's Job has no label "
                f"{GroupLabel.JOBSET_REPLICATED_JOB} to tell which one it belongs to"
            )
        return jobset_pods(jobset, _what(JOB_SET, jobset, walk), rjob if staged else None), None

    return _sized(gang, walk, counts, jobset)


def _leader_worker_set(labels: Mapping[str, str], walk: _Walk) -> GroupSpec:
    name = labels[GroupLabel.LWS_NAME]
    index = labels.get(GroupLabel.LWS_GROUP_INDEX)
    where = f"{walk.namespace}/{name}"
    key = f"{walk.namespace}/{Kind.LEADER_WORKER_SET}/{name}"
    owner = (LEADER_WORKER_SET.key, walk.namespace, name)
    if not index:
        problem = f"the pod of LeaderWorkerSet {where} has no label {GroupLabel.LWS_GROUP_INDEX} (which group it is in)"
        return GroupSpec(key=key, kind=Kind.LEADER_WORKER_SET, name=name, size=None, problem=problem, owner=owner)
    try:
        lws = walk.get(LEADER_WORKER_SET, name)
    except _Missing as exc:
        return GroupSpec(
            key=f"{key}/{index}",
            kind=Kind.LEADER_WORKER_SET,
            name=name,
            size=None,
            problem=str(exc),
            owner=owner,
            waiting=True,
            depends=tuple(walk.depends),
        )

    leader_first = (lws.get("spec") or {}).get("startupPolicy") == "LeaderReady"

    def counts(what: str) -> tuple[int, int | None]:
        size = int_at(lws, ("spec", "leaderWorkerTemplate", "size"), what, default=1)
        if size < 1:
            raise InvalidOwner(f"{what} has spec.leaderWorkerTemplate.size {size}")
        return size, 1 if leader_first else None

    return _sized(_Gang(LEADER_WORKER_SET, lws, index), walk, counts, staged=leader_first)


def _sized(
    gang: _Gang,
    walk: _Walk,
    counts: Callable[[str], tuple[int, int | None]],
    *below: dict[str, Any],
    staged: bool = False,
) -> GroupSpec:
    """The ``GroupSpec`` of ``gang``; ``counts`` gives (size, minimum) or raises ``InvalidOwner``.
    Usher annotations come from ``below`` (objects under the top owner that stand for the whole
    gang, such as a RayJob's RayCluster), the top owner's winning. ``staged``: the owner makes
    the pods beyond the minimum only once those run (``GroupSpec.staged``)."""
    ns = walk.namespace
    name = gang.name
    key = f"{ns}/{gang.resource.kind}/{name}" + (f"/{gang.suffix}" if gang.suffix else "")
    owner = (gang.resource.key, ns, name)
    notes = _gang_annotations(*below, gang.top)
    try:
        size, minimum = counts(_what(gang.resource, gang.top, walk))
    except InvalidOwner as exc:
        return GroupSpec(
            key=key,
            kind=gang.resource.kind,
            name=name,
            size=None,
            problem=str(exc),
            owner=owner,
            annotations=notes,
            depends=tuple(walk.depends),
        )
    return GroupSpec(
        key=key,
        kind=gang.resource.kind,
        name=name,
        size=size,
        minimum=minimum if minimum is not None and 1 <= minimum < size else None,
        staged=staged and minimum is not None and 1 <= minimum < size,
        owner=owner,
        annotations=notes,
        depends=tuple(walk.depends),
    )


# -- helpers --------------------------------------------------------------------------------


def _what(resource: OwnerResource, obj: dict[str, Any], walk: _Walk) -> str:
    return f"{resource.kind} {walk.namespace}/{(obj.get('metadata') or {}).get('name')}"


def _gang_annotations(*objs: dict[str, Any]) -> dict[str, str]:
    """The ``GANG_ANNOTATIONS`` of ``objs``, later ones winning."""
    out: dict[str, str] = {}
    for obj in objs:
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        out.update({k: str(v) for k, v in notes.items() if k in GANG_ANNOTATIONS})
    return out




def _positive(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) >= 1 else None
