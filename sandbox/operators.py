"""Stand-ins for the operators AI teams run: JobSet, Kubeflow training jobs, KubeRay, LeaderWorkerSet.

Each is a :class:`~usher.sandbox.parts.Part` of :class:`~usher.sandbox.controllers.Controllers`
(as the workload controllers of :mod:`usher.sandbox.workloads` are), reconciling the custom
resources of the CRDs :mod:`usher.sandbox.crds` serves into the children the real operator
creates, with the real names, labels, annotations and controller ``ownerReferences``
(``controller: true``, ``blockOwnerDeletion: true``, so the garbage collector takes them with
their owner), and a status that moves as the children run. The shapes were read from each
project's source and docs at the version named; the pods keep the template's ``schedulerName``
(a scheduler such as usher binds them; without one the sandbox's default scheduler does).

**StatefulSet** (apps/v1, kube-controller-manager 1.30; the sandbox had none): pods
``<sts>-<ordinal>`` for ``spec.ordinals.start`` .. ``+replicas``, ``hostname`` the pod name and
``subdomain`` the ``serviceName``, labels ``controller-revision-hash: <sts>-<hash>``,
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index``; ``OrderedReady``
creates one at a time once the lower ordinals are Running and Ready, ``Parallel`` all at once; a
terminal pod is deleted and created again; status ``replicas``, ``readyReplicas``,
``currentReplicas``, ``updatedReplicas``, ``availableReplicas``, revisions. Mutating admission
webhooks (the LWS pod webhook) are modelled as :attr:`StatefulSetController.mutators`.
``volumeClaimTemplates`` give each pod its claims ``<template>-<sts>-<ordinal>``
(:func:`usher.sandbox.pod_claims.statefulset_claims`; kept when the pod or set goes: ``Retain``).

**JobSet** (jobset.x-k8s.io/v1alpha2, JobSet v0.7/v0.8): the webhook's defaults (Job
``completionMode: Indexed``, pod ``restartPolicy: OnFailure``, ``network.enableDNSHostnames``
true, subdomain the JobSet's name, success policy ``All``); one batch/v1 Job per replicatedJob
replica, ``<jobset>-<replicatedJob>-<jobIndex>``, owned by the JobSet, with these labels and the
same annotations on the Job and its pod template: ``jobset.sigs.k8s.io/jobset-name``,
``jobset.sigs.k8s.io/replicatedjob-name``, ``jobset.sigs.k8s.io/replicatedjob-replicas``,
``jobset.sigs.k8s.io/global-replicas``, ``jobset.sigs.k8s.io/job-index``,
``jobset.sigs.k8s.io/job-global-index``, ``jobset.sigs.k8s.io/job-key`` (sha1 of
``<namespace>/<job>``), ``jobset.sigs.k8s.io/restart-attempt``; the pod template's
``subdomain``; a headless Service ``<subdomain>`` selecting ``jobset-name``. The sandbox's Job
controller runs the Jobs (pods ``<job>-<index>-<random>`` owned by the Job, hostname
``<job>-<index>``). A failed Job fails the JobSet (``FailedJobs``), or with ``failurePolicy``
restarts it (rules by ``onJobFailureReasons``/``targetReplicatedJobs``; ``maxRestarts``, then
``ReachedMaxRestarts``): ``status.restarts`` + 1, every Job of the older attempt deleted and
created again; Completed (``AllJobsCompleted``) by ``successPolicy``; once finished the active
Jobs are deleted; ``suspend`` suspends the Jobs. Status ``replicatedJobsStatus`` (ready,
succeeded, failed, active, suspended), ``restarts``, ``restartsCountTowardsMax``,
``terminalState``, conditions.

**PyTorchJob, TFJob, MPIJob** (kubeflow.org/v1, training-operator v1.7/v1.8): a pod per replica,
``<job>-<replicaType lowercased>-<index>`` (MPIJob's launcher: ``<job>-launcher``), owned by the
job, with the template's labels plus ``training.kubeflow.org/operator-name``
(``pytorchjob-controller``, ``tfjob-controller``, ``mpijob-controller``),
``training.kubeflow.org/job-name``, ``training.kubeflow.org/replica-type`` (lowercased),
``training.kubeflow.org/replica-index`` (not on the MPI launcher) and
``training.kubeflow.org/job-role: master`` on the PyTorch Master, TF Chief/Master (else TF
Worker 0); MPIJob adds ``mpi-job-name``. The replica's ``restartPolicy`` is the pod's
(``ExitCode``: Never); PyTorch env ``PYTHONUNBUFFERED``, ``MASTER_ADDR`` (``<job>-master-0``),
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` and, with an ``elasticPolicy``, torchrun's
``PET_RDZV_ENDPOINT``, ``PET_RDZV_BACKEND``, ``PET_NNODES`` (``min:max``)...; TF ``TF_CONFIG``;
a headless Service per PyTorch/TF pod (same name); MPIJob a ``<job>-config`` ConfigMap with the hostfile. A missing
pod is created again; a Failed pod is deleted and replaced (condition Restarting) under
``OnFailure``/``Always``, or under ``ExitCode`` with a retryable code (>= 128); else the job
Fails. Succeeded: the Master (PyTorch; without one, every Worker), Chief/Master (TF; without
one, Worker 0 or all Workers with ``successPolicy: AllWorkers``), the launcher (MPI).
Conditions Created, Running, Restarting, Succeeded, Failed, Suspended (``runPolicy.suspend``
deletes the pods), reasons ``<Kind>Created``... with ``lastUpdateTime``; ``replicaStatuses``
(active, succeeded, failed, labelSelector), ``startTime``, ``completionTime``;
``runPolicy.cleanPodPolicy`` (PyTorch/MPI default None, TF Running) once finished.

**RayCluster, RayJob** (ray.io/v1, KubeRay v1.1/v1.2): a head pod ``<cluster>-head-<random>``
and per worker group ``replicas`` (clamped to ``minReplicas``..``maxReplicas``) x
``numOfHosts`` pods ``<cluster>-<group>-worker-<random>``, owned by the RayCluster, labels
``ray.io/cluster``, ``ray.io/node-type`` (head/worker), ``ray.io/group`` (``headgroup`` or the
group), ``ray.io/identifier`` (``<cluster>-head``/``<cluster>-worker``), ``ray.io/is-ray-node:
yes``, ``app.kubernetes.io/name: kuberay``, ``app.kubernetes.io/created-by: kuberay-operator``
(the template's own labels kept, except that these three cannot be overridden), env such as
``RAY_ADDRESS``, ``FQ_RAY_IP``; the headless head Service ``<cluster>-head-svc``. Missing pods
are created, terminal ones deleted and replaced, extra workers deleted; ``suspend`` deletes them
all. Status ``state`` (``ready`` once every pod is Running and Ready; ``suspended``),
``desiredWorkerReplicas``, ``availableWorkerReplicas``, ``readyWorkerReplicas``,
``min/maxWorkerReplicas``, ``desiredCPU``, ``desiredGPU``, ``head``, ``endpoints``. A RayJob
creates a RayCluster ``<rayjob>-raycluster-<random>`` (labels ``ray.io/originated-from-cr-name``,
``ray.io/originated-from-crd: RayJob``) owned by the RayJob, and once it is ready the submitter
batch/v1 Job ``<rayjob>`` (``submitterPodTemplate``, else a ``ray job submit`` container; the
sandbox copies ``usher/duration`` and ``sandbox.usher/exit-code`` from the RayJob's annotations
onto that default template so the submission ends); ``jobDeploymentStatus`` Initializing ->
Running -> Complete/Failed, ``jobStatus`` PENDING -> RUNNING -> SUCCEEDED/FAILED;
``shutdownAfterJobFinishes`` deletes the cluster ``ttlSecondsAfterFinished`` later.

**LeaderWorkerSet** (leaderworkerset.x-k8s.io/v1, LWS v0.5/v0.6): a headless Service ``<lws>``
and the leader StatefulSet ``<lws>`` (Parallel, ``replicas`` groups) owned by the LWS, template
labels ``leaderworkerset.sigs.k8s.io/name``, ``leaderworkerset.sigs.k8s.io/worker-index: "0"``,
``leaderworkerset.sigs.k8s.io/template-revision-hash``, annotation
``leaderworkerset.sigs.k8s.io/size``; leader pods ``<lws>-<groupIndex>``. The pod webhook adds
``leaderworkerset.sigs.k8s.io/group-index``, ``leaderworkerset.sigs.k8s.io/group-key`` (sha1 of
``<namespace>/<leader pod>``) to leaders, ``worker-index`` to workers, and the env
``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``. Per leader pod (at once, or
once it is Ready with ``startupPolicy: LeaderReady``) a worker StatefulSet named as the leader
pod, owned by the leader pod, ``replicas: size - 1``, ordinals from 1, labels name,
``group-index``, ``group-key``, revision; worker pods ``<lws>-<groupIndex>-<workerIndex>`` with
annotation ``leaderworkerset.sigs.k8s.io/leader-name``. Under ``RecreateGroupOnPodRestart`` (the
default) a pod of a group being deleted or a container restart deletes the leader pod, so the
whole group is created again. Status ``replicas``, ``readyReplicas``, ``updatedReplicas``,
``hpaPodSelector``, conditions Available/Progressing. ``leaderWorkerTemplate.volumeClaimTemplates``
(LWS v0.8) go to the leader and worker StatefulSets, so each pod gets claims of its own.

Not modelled: gang-scheduler integration (PodGroups the operators create for Volcano or
coscheduling), webhooks' validation, rolling updates of a changed template, autoscaling
(``workersToDelete``), JobSet ``startupPolicy: InOrder``/``coordinator``/TTL,
Kubeflow ``backoffLimit``/``activeDeadlineSeconds``/TTL, MPI's launcher RBAC and kubectl
delivery, elastic PyTorch's HPA, RayJob ``clusterSelector`` and HTTP submission, LWS ``subGroupPolicy`` and
``UniquePerReplica`` subdomains, events.

Sources read (no code copied): kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``,
``pkg/controllers/jobset_controller.go``, ``pkg/controllers/constants``, the JobSet webhook's
``Default``; kubeflow/training-operator ``pkg/controller.v1/common/{pod,job_controller}.go``,
``pytorch/{envvar,master,elastic,pytorchjob_controller}.go``, ``mpi/mpijob_controller.go``,
``tensorflow`` ``IsMasterRole``; ray-project/kuberay ``ray-operator/controllers/ray/utils/{constant,util}.go``,
``common/pod.go`` (``labelPod``), ``raycluster_controller.go`` (``buildWorkerPod``); kubernetes-sigs/lws
``pkg/webhooks/pod_webhook.go``, ``pkg/controllers/pod_controller.go`` and the "Labels, Annotations
and Environment Variables" reference page.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .kubelet import parse_time
from .nodefit import (
    CPU,
    condition,
    controller_ref,
    is_terminal,
    pod_requests,
    set_condition,
)
from .parts import Host
from .pod_claims import statefulset_claims
from .store import ApiError, Change, EventType, Stored
from .workloads import OwnerPart, owner_reference, pod_ready, template_hash

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
JOB_RT = RESOURCE_TYPES[Resource.JOBS]
SVC_RT = RESOURCE_TYPES[Resource.SERVICES]
STS_RT = RESOURCE_TYPES[Resource.STATEFULSETS]
CM_RT = RESOURCE_TYPES[Resource.CONFIGMAPS]

GPU = "nvidia.com/gpu"


# ====================================================================== helpers


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # the operators' key, not a secret


def labels_of(obj: JsonObject) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def annotations_of(obj: JsonObject) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def deleting(obj: JsonObject) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def phase(pod: JsonObject) -> str:
    return (pod.get("status") or {}).get("phase", "")


def live(pod: JsonObject) -> bool:
    """Not terminal and not being deleted: a pod that still counts."""
    return not deleting(pod) and not is_terminal(pod)


def restarted(pod: JsonObject) -> bool:
    status = pod.get("status") or {}
    return any(int(s.get("restartCount") or 0) > 0
               for s in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])])


def exit_code(pod: JsonObject, container: str | None = None) -> int | None:
    """The exit code of ``container`` (else the first container that terminated)."""
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and s.get("name") != container:
            continue
        term = (s.get("state") or {}).get("terminated")
        if term is not None:
            return int(term.get("exitCode", 0))
    return None


def cond_true(obj: JsonObject, type_: str) -> bool:
    return (condition(obj, type_) or {}).get("status") == "True"


def add_env(container: JsonObject, name: str, value: str | None = None, field: str | None = None) -> None:
    """Append an env variable unless the container sets it already (the user's value wins)."""
    env = container.setdefault("env", [])
    if any(e.get("name") == name for e in env):
        return
    if field is not None:
        env.append({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field}}})
    else:
        env.append({"name": name, "value": value})


def pod_from_template(template: JsonObject, namespace: str, owner_ref: JsonObject, *, name: str | None = None,
                      generate_name: str | None = None, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None) -> JsonObject:
    meta = copy.deepcopy(template.get("metadata") or {})
    metadata: JsonObject = {"namespace": namespace,
                            "labels": {**(meta.get("labels") or {}), **(labels or {})},
                            "ownerReferences": [owner_ref]}
    if name is not None:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name
    merged = {**(meta.get("annotations") or {}), **(annotations or {})}
    if merged:
        metadata["annotations"] = merged
    if meta.get("finalizers"):
        metadata["finalizers"] = list(meta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template.get("spec") or {})}


def headless_service(name: str, namespace: str, owner_ref: JsonObject, selector: dict[str, str], *,
                     labels: dict[str, str] | None = None, ports: list[JsonObject] | None = None,
                     publish_not_ready: bool = False) -> JsonObject:
    spec: JsonObject = {"clusterIP": "None", "selector": dict(selector)}
    if ports:
        spec["ports"] = ports
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    meta: JsonObject = {"name": name, "namespace": namespace, "ownerReferences": [owner_ref]}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


class CustomPart(OwnerPart):
    """The controller of one custom kind, idle while its CRD is not served.

    ``child_kinds``: changes to objects of these kinds (pods, Jobs, ...) whose controller is of
    :attr:`kind` make it reconcile.
    """

    key: str = ""
    kind: str = ""
    child_keys: tuple[str, ...] = (POD_RT.key,)

    @property
    def rt(self) -> ResourceType | None:
        try:
            return self.store.resource_type(self.key)
        except ApiError:
            return None

    def on_change(self, change: Change) -> None:
        ref = controller_ref(change.new.obj) or {}
        if change.rt.key == self.key or (change.rt.key in self.child_keys and ref.get("kind") == self.kind):
            self._dirty = True

    def sync(self) -> None:
        rt = self.rt
        if rt is None:
            return
        for stored in list(self.store.list(rt).items):
            if deleting(stored.obj):
                continue
            self.mgr.guard(lambda s=stored, t=rt: self.reconcile_one(t, s))

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        raise NotImplementedError

    def ref(self, owner: JsonObject, rt: ResourceType) -> JsonObject:
        return owner_reference(owner, rt)

    def create(self, rt: ResourceType, obj: JsonObject, namespace: str | None) -> Stored | None:
        """Create a child; ``None`` when the name is still taken (an older one on its way out)."""
        try:
            return self.store.create_stored(rt, obj, namespace)
        except ApiError:
            return None

    def ensure(self, rt: ResourceType, owner: JsonObject, obj: JsonObject) -> None:
        """Create ``obj`` unless the owner has a child of that name already."""
        name = obj["metadata"]["name"]
        if not any(s.obj["metadata"]["name"] == name for s in self.owned(owner, rt)):
            self.create(rt, obj, owner["metadata"].get("namespace"))

    def save_status(self, rt: ResourceType, stored: Stored, status: JsonObject) -> None:
        if status != (stored.obj.get("status") or {}):
            self.write_status(rt, stored, status)


# ====================================================================== StatefulSet


def _ordinal(sts_name: str, pod: JsonObject) -> int | None:
    prefix, _, tail = pod["metadata"]["name"].rpartition("-")
    return int(tail) if prefix == sts_name and tail.isdigit() else None


class StatefulSetController(OwnerPart):
    """A minimal StatefulSet controller: stable pod names, ordinals, hostname and subdomain."""

    resources = (Resource.STATEFULSETS, Resource.PODS)
    owner_rt = STS_RT

    def __init__(self, mgr: Host) -> None:
        super().__init__(mgr)
        self.mutators: list[Callable[[JsonObject, JsonObject], None]] = []
        """``fn(statefulset, pod)`` run on every pod before it is created: mutating admission webhooks."""

    def on_change(self, change: Change) -> None:
        ref = controller_ref(change.new.obj) or {}
        if change.rt.key == STS_RT.key or (change.rt.key == POD_RT.key and ref.get("kind") == "StatefulSet"):
            self._dirty = True

    def sync_one(self, stored: Stored) -> None:
        sts = stored.obj
        spec = sts.get("spec") or {}
        name = sts["metadata"]["name"]
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        pods: dict[int, Stored] = {}
        for s in self.owned(sts):
            ordinal = _ordinal(name, s.obj)
            if ordinal is not None:
                pods[ordinal] = s
        wanted = range(start, start + replicas)
        for ordinal, s in sorted(pods.items()):
            if ordinal not in wanted or (is_terminal(s.obj) and not deleting(s.obj)):
                self.delete(POD_RT, s)  # out of range, or ended: deleted, and created again once gone
        for ordinal in wanted:
            s = pods.get(ordinal)
            if s is None:
                self._create(sts, ordinal, revision)
                if not parallel:
                    break
            elif not parallel and not (live(s.obj) and pod_ready(s.obj)):
                break
        current = [s.obj for s in self.owned(sts) if not deleting(s.obj)]
        ready = sum(1 for p in current if live(p) and pod_ready(p))
        updated = sum(1 for p in current if labels_of(p).get("controller-revision-hash") == revision)
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(current),
            "readyReplicas": ready,
            "currentReplicas": updated,
            "updatedReplicas": updated,
            "availableReplicas": ready,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        if status != (sts.get("status") or {}):
            self.write_status(STS_RT, stored, status)

    def _create(self, sts: JsonObject, ordinal: int, revision: str) -> None:
        spec = sts.get("spec") or {}
        name, ns = sts["metadata"]["name"], sts["metadata"].get("namespace", "default")
        pod_name = f"{name}-{ordinal}"
        pod = pod_from_template(spec.get("template") or {}, ns, owner_reference(sts, STS_RT), name=pod_name, labels={
            "controller-revision-hash": revision,
            "statefulset.kubernetes.io/pod-name": pod_name,
            "apps.kubernetes.io/pod-index": str(ordinal),
        })
        pod["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        statefulset_claims(self.store, sts, pod, ordinal)
        for mutate in self.mutators:
            mutate(sts, pod)
        try:
            self.store.create_stored(POD_RT, pod, ns)
        except ApiError:
            pass  # the name is still taken by a pod on its way out


# ====================================================================== JobSet

JS = "jobset.sigs.k8s.io/"
JS_NAME = JS + "jobset-name"
JS_RJOB = JS + "replicatedjob-name"
JS_RJOB_REPLICAS = JS + "replicatedjob-replicas"
JS_GLOBAL_REPLICAS = JS + "global-replicas"
JS_JOB_INDEX = JS + "job-index"
JS_GLOBAL_INDEX = JS + "job-global-index"
JS_JOB_KEY = JS + "job-key"
JS_RESTARTS = JS + "restart-attempt"
JS_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


class JobSetController(CustomPart):
    key = "jobsets.jobset.x-k8s.io"
    kind = "JobSet"
    child_keys = (JOB_RT.key,)

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        js = stored.obj
        spec = js.get("spec") or {}
        status = copy.deepcopy(js.get("status") or {})
        name, ns = js["metadata"]["name"], js["metadata"].get("namespace", "default")
        now = self.store.now()
        rjobs = [r for r in spec.get("replicatedJobs") or [] if r.get("name")]
        jobs = self.owned(js, JOB_RT)
        if cond_true(js, "Completed") or cond_true(js, "Failed"):
            for s in jobs:
                if not _job_finished(s.obj):
                    self.delete(JOB_RT, s)
            return
        restarts = int(status.get("restarts", 0))
        current = [s for s in jobs if labels_of(s.obj).get(JS_RESTARTS) == str(restarts)]
        for s in jobs:
            if s not in current:
                self.delete(JOB_RT, s)  # an older attempt: recreated
        network = spec.get("network") or {}
        dns = network.get("enableDNSHostnames", True) is not False
        subdomain = network.get("subdomain") or name
        if dns:
            self.ensure(SVC_RT, js, headless_service(subdomain, ns, self.ref(js, rt), {JS_NAME: name},
                                                    publish_not_ready=network.get("publishNotReadyAddresses", True) is not False))
        finished = self._failure(js, status, current, now) or self._success(js, status, current, rjobs, now)
        if finished:
            for s in current:
                if not _job_finished(s.obj):
                    self.delete(JOB_RT, s)
        elif not any(_job_finished(s.obj) and cond_true(s.obj, "Failed") for s in current):
            names = {s.obj["metadata"]["name"] for s in self.owned(js, JOB_RT)}
            global_replicas = sum(int(r.get("replicas", 1)) for r in rjobs)
            global_index = 0
            for rjob in rjobs:
                for index in range(int(rjob.get("replicas", 1))):
                    job_name = f"{name}-{rjob['name']}-{index}"
                    if job_name not in names:
                        self.create(JOB_RT, self._job(js, rt, rjob, index, global_index, global_replicas, restarts,
                                                      subdomain if dns else None), ns)
                    global_index += 1
            self._suspend(js, status, now)
        status["replicatedJobsStatus"] = [self._rjob_status(r["name"], [s.obj for s in current]) for r in rjobs]
        status.setdefault("restarts", restarts)
        self.save_status(rt, stored, status)

    def _job(self, js: JsonObject, rt: ResourceType, rjob: JsonObject, index: int, global_index: int,
             global_replicas: int, restarts: int, subdomain: str | None) -> JsonObject:
        name, ns = js["metadata"]["name"], js["metadata"].get("namespace", "default")
        job_name = f"{name}-{rjob['name']}-{index}"
        template = copy.deepcopy(rjob.get("template") or {})
        tmeta = template.get("metadata") or {}
        marks = {
            JS_NAME: name,
            JS_RJOB: rjob["name"],
            JS_RESTARTS: str(restarts),
            JS_RJOB_REPLICAS: str(int(rjob.get("replicas", 1))),
            JS_GLOBAL_REPLICAS: str(global_replicas),
            JS_JOB_INDEX: str(index),
            JS_JOB_KEY: sha1(f"{ns}/{job_name}"),
            JS_GLOBAL_INDEX: str(global_index),
        }
        extra = {}
        exclusive = annotations_of(js).get(JS_EXCLUSIVE) or (tmeta.get("annotations") or {}).get(JS_EXCLUSIVE)
        if exclusive:
            extra[JS_EXCLUSIVE] = exclusive
        job_spec = template.get("spec") or {}
        job_spec.setdefault("completionMode", "Indexed")  # the JobSet webhook's defaults
        pod_template = job_spec.setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **marks}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **marks, **extra}
        pod_spec = pod_template.setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure")
        if subdomain:
            pod_spec["subdomain"] = subdomain
        job_spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": ns,
                "labels": {**(tmeta.get("labels") or {}), **marks},
                "annotations": {**(tmeta.get("annotations") or {}), **marks, **extra},
                "ownerReferences": [self.ref(js, rt)],
            },
            "spec": job_spec,
        }

    def _failure(self, js: JsonObject, status: JsonObject, jobs: list[Stored], now: str) -> bool:
        failed = sorted((s.obj for s in jobs if cond_true(s.obj, "Failed")), key=lambda j: j["metadata"]["name"])
        if not failed:
            return False
        job = failed[0]
        policy = (js.get("spec") or {}).get("failurePolicy")
        if policy is None:
            return self._fail(status, now, "FailedJobs", "jobset failed due to one or more job failures")
        reason = (condition(job, "Failed") or {}).get("reason")
        rjob = labels_of(job).get(JS_RJOB)
        action = "RestartJobSet"
        for rule in policy.get("rules") or []:
            reasons, targets = rule.get("onJobFailureReasons") or [], rule.get("targetReplicatedJobs") or []
            if (not reasons or reason in reasons) and (not targets or rjob in targets):
                action = rule.get("action", "RestartJobSet")
                break
        if action == "FailJobSet":
            return self._fail(status, now, "FailJobSetAction",
                              f"applying FailJobSet failure policy action to job {job['metadata']['name']}")
        counted = int(status.get("restartsCountTowardsMax", 0))
        if action == "RestartJobSet":
            if counted >= int(policy.get("maxRestarts", 0)):
                return self._fail(status, now, "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
            status["restartsCountTowardsMax"] = counted + 1
        status["restarts"] = int(status.get("restarts", 0)) + 1
        return False

    @staticmethod
    def _fail(status: JsonObject, now: str, reason: str, message: str) -> bool:
        set_condition(status, now, "Failed", "True", reason, message, probe=False)
        status["terminalState"] = "Failed"
        return True

    @staticmethod
    def _success(js: JsonObject, status: JsonObject, jobs: list[Stored], rjobs: list[JsonObject], now: str) -> bool:
        policy = (js.get("spec") or {}).get("successPolicy") or {"operator": "All"}
        targets = set(policy.get("targetReplicatedJobs") or [r["name"] for r in rjobs])
        done = sum(1 for s in jobs if cond_true(s.obj, "Complete") and labels_of(s.obj).get(JS_RJOB) in targets)
        if policy.get("operator", "All") == "Any":
            needed = 1
        else:
            needed = sum(int(r.get("replicas", 1)) for r in rjobs if r["name"] in targets)
        if needed == 0 or done < needed:
            return False
        set_condition(status, now, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", probe=False)
        status["terminalState"] = "Completed"
        return True

    def _suspend(self, js: JsonObject, status: JsonObject, now: str) -> None:
        suspend = bool((js.get("spec") or {}).get("suspend"))
        for s in self.owned(js, JOB_RT):
            if bool((s.obj.get("spec") or {}).get("suspend")) != suspend and not _job_finished(s.obj):
                new = s.copy()
                new["spec"]["suspend"] = suspend
                try:
                    self.store.update_stored(JOB_RT, new, s.obj["metadata"].get("namespace"))
                except ApiError:
                    pass
        if suspend:
            set_condition(status, now, "Suspended", "True", "SuspendedJobs", "jobset is suspended", probe=False)
        elif condition({"status": status}, "Suspended") is not None:
            set_condition(status, now, "Suspended", "False", "ResumeJobs", "jobset is resumed", probe=False)

    @staticmethod
    def _rjob_status(rjob: str, jobs: list[JsonObject]) -> JsonObject:
        mine = [j for j in jobs if labels_of(j).get(JS_RJOB) == rjob]
        out = {"name": rjob, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for j in mine:
            spec, st = j.get("spec") or {}, j.get("status") or {}
            if cond_true(j, "Complete"):
                out["succeeded"] += 1
            elif cond_true(j, "Failed"):
                out["failed"] += 1
            else:
                parallelism = int(spec.get("parallelism", 1))
                expected = min(parallelism, int(spec["completions"])) if spec.get("completions") is not None else parallelism
                if int(st.get("ready", 0)) + int(st.get("succeeded", 0)) >= expected:
                    out["ready"] += 1
                if int(st.get("active", 0)) > 0:
                    out["active"] += 1
                if spec.get("suspend"):
                    out["suspended"] += 1
        return out


def _job_finished(job: JsonObject) -> bool:
    return cond_true(job, "Complete") or cond_true(job, "Failed")


# ====================================================================== Kubeflow training jobs

KF = "training.kubeflow.org/"
KF_OPERATOR = KF + "operator-name"
KF_JOB_NAME = KF + "job-name"
KF_TYPE = KF + "replica-type"
KF_INDEX = KF + "replica-index"
KF_ROLE = KF + "job-role"


class TrainingJobController(CustomPart):
    """The training-operator's common reconcile loop; subclasses give the framework's rules."""

    specs_key = ""
    operator = ""
    container = ""
    port_name = ""
    default_port = 0
    default_restart = "OnFailure"
    default_clean = "None"
    services = True
    order: tuple[str, ...] = ()

    # ---------------------------------------------------------------- framework hooks

    def pod_name(self, name: str, rtype: str, index: int) -> str:
        return f"{name}-{rtype.lower()}-{index}"

    def pod_labels(self, name: str, specs: JsonObject, rtype: str, index: int) -> dict[str, str]:
        labels = {KF_OPERATOR: self.operator, KF_JOB_NAME: name.replace("/", "-"),
                  KF_TYPE: rtype.lower(), KF_INDEX: str(index)}
        if self.master_role(specs, rtype, index):
            labels[KF_ROLE] = "master"
        return labels

    def master_role(self, specs: JsonObject, rtype: str, index: int) -> bool:
        return False

    def set_env(self, job: JsonObject, specs: JsonObject, rtype: str, index: int, pod: JsonObject) -> None:
        pass

    def succeeded(self, job: JsonObject, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        raise NotImplementedError

    def running(self, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        return any(c["active"] > 0 for c in counts.values())

    def extras(self, job: JsonObject, rt: ResourceType, specs: JsonObject) -> None:
        """Other children to keep (MPIJob's ConfigMap)."""

    def holds_back(self, job: JsonObject, specs: JsonObject, rtype: str, pods: dict[tuple[str, int], Stored]) -> bool:
        """Whether a missing pod of ``rtype`` is not to be created yet (``pods``: by type, index)."""
        return False

    def port_of(self, specs: JsonObject, rtype: str) -> int:
        for c in (((specs.get(rtype) or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
            if c.get("name") == self.container:
                for p in c.get("ports") or []:
                    if p.get("name") == self.port_name and p.get("containerPort"):
                        return int(p["containerPort"])
        return self.default_port

    # ---------------------------------------------------------------- the loop

    def ordered(self, specs: JsonObject) -> list[str]:
        return sorted(specs, key=lambda t: (self.order.index(t) if t in self.order else len(self.order), t))

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        job = stored.obj
        spec = job.get("spec") or {}
        specs = spec.get(self.specs_key) or {}
        run_policy = spec.get("runPolicy") or {}
        name = job["metadata"]["name"]
        now = self.store.now()
        status = copy.deepcopy(job.get("status") or {})
        if condition({"status": status}, "Created") is None:
            self._condition(status, now, "Created", "Created", f"{self.kind} {name} is created.")
        pods = [s for s in self.owned(job) if KF_TYPE in labels_of(s.obj)]
        if cond_true(job, "Succeeded") or cond_true(job, "Failed"):
            self._clean(run_policy, pods)
            self.save_status(rt, stored, status)
            return
        if run_policy.get("suspend"):
            for s in pods:
                self.delete(POD_RT, s)
            for s in self.owned(job, SVC_RT):
                self.delete(SVC_RT, s)
            self._condition(status, now, "Suspended", "Suspended", f"{self.kind} {name} is suspended.")
            _set_false(status, "Running", now)
            status.pop("startTime", None)
            self.save_status(rt, stored, status)
            return
        if cond_true({"status": status}, "Suspended"):
            set_condition(status, now, "Suspended", "False", f"{self.kind}Resumed", f"{self.kind} {name} is resumed.", probe=False)
        status.setdefault("startTime", now)
        self.extras(job, rt, specs)
        by_slot: dict[tuple[str, int], Stored] = {}
        for s in pods:
            index = labels_of(s.obj).get(KF_INDEX, "0")
            by_slot[(labels_of(s.obj)[KF_TYPE], int(index) if index.isdigit() else -1)] = s
        counts: dict[str, JsonObject] = {}
        restarting: tuple[str, int] | None = None
        failed: tuple[str, int] | None = None
        for rtype in self.ordered(specs):
            rspec = specs[rtype] or {}
            replicas = int(rspec.get("replicas", 1))
            policy = rspec.get("restartPolicy") or self.default_restart
            rt_lower = rtype.lower()
            count = {"active": 0, "succeeded": 0, "failed": 0}
            for (t, index), s in by_slot.items():
                if t == rt_lower and not 0 <= index < replicas:
                    self.delete(POD_RT, s)
            for index in range(replicas):
                s = by_slot.get((rt_lower, index))
                if s is None:
                    if not self.holds_back(job, specs, rtype, by_slot):
                        self._create_pod(job, rt, specs, rtype, index, policy)
                elif phase(s.obj) == "Failed":
                    code = exit_code(s.obj, self.container)
                    count["failed"] += 1
                    if policy in ("OnFailure", "Always") or (policy == "ExitCode" and code is not None and code >= 128):
                        self.delete(POD_RT, s)  # created again once gone
                        restarting = restarting or (rtype, count["failed"])
                    else:
                        failed = failed or (rtype, count["failed"])
                elif phase(s.obj) == "Succeeded":
                    count["succeeded"] += 1
                elif phase(s.obj) == "Running" and not deleting(s.obj):
                    count["active"] += 1
                if self.services:
                    self._ensure_service(job, rt, specs, rtype, index)
            counts[rtype] = count
        status["replicaStatuses"] = {
            rtype: {**{k: v for k, v in c.items() if v}, "labelSelector": {"matchLabels": {
                KF_OPERATOR: self.operator, KF_JOB_NAME: name, KF_TYPE: rtype.lower()}}}
            for rtype, c in counts.items()
        }
        if failed is not None:
            self._condition(status, now, "Failed", "Failed",
                            f"{self.kind} {name} is failed because {failed[1]} {failed[0]} replica(s) failed.")
            status.setdefault("completionTime", now)
        elif self.succeeded(job, specs, counts):
            self._condition(status, now, "Succeeded", "Succeeded", f"{self.kind} {name} is successfully completed.")
            status.setdefault("completionTime", now)
        elif restarting is not None:
            self._condition(status, now, "Restarting", "Restarting",
                            f"{self.kind} {name} is restarting because {restarting[1]} {restarting[0]} replica(s) failed.")
        elif self.running(specs, counts):
            self._condition(status, now, "Running", "Running", f"{self.kind} {name} is running.")
        if cond_true({"status": status}, "Succeeded") or cond_true({"status": status}, "Failed"):
            self._clean(run_policy, self.owned(job))
        self.save_status(rt, stored, status)

    def _condition(self, status: JsonObject, now: str, type_: str, reason: str, message: str) -> None:
        """Kubeflow's UpdateJobConditions: the new condition goes last; Running and Restarting
        replace each other; Succeeded or Failed turn Running False."""
        reason = f"{self.kind}{reason}"
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c.get("type") == type_), None)
        if current is not None and current.get("status") == "True" and current.get("reason") == reason:
            return
        kept = []
        for c in conditions:
            if c.get("type") == type_ or {type_, c.get("type")} == {"Running", "Restarting"}:
                continue
            if type_ in ("Succeeded", "Failed") and c.get("type") == "Running" and c.get("status") != "False":
                c = {**c, "status": "False", "lastUpdateTime": now, "lastTransitionTime": now}
            kept.append(c)
        kept.append({"type": type_, "status": "True", "reason": reason, "message": message,
                     "lastUpdateTime": now, "lastTransitionTime": now})
        status["conditions"] = kept

    def _clean(self, run_policy: JsonObject, pods: list[Stored]) -> None:
        policy = run_policy.get("cleanPodPolicy") or self.default_clean
        for s in pods:
            if policy == "All" or (policy == "Running" and phase(s.obj) in ("Running", "Pending")):
                self.delete(POD_RT, s)

    def _create_pod(self, job: JsonObject, rt: ResourceType, specs: JsonObject, rtype: str, index: int, policy: str) -> None:
        name, ns = job["metadata"]["name"], job["metadata"].get("namespace", "default")
        template = (specs.get(rtype) or {}).get("template") or {}
        pod = pod_from_template(template, ns, self.ref(job, rt), name=self.pod_name(name, rtype, index),
                                labels=self.pod_labels(name, specs, rtype, index))
        pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        self.set_env(job, specs, rtype, index, pod)
        self.create(POD_RT, pod, ns)

    def _ensure_service(self, job: JsonObject, rt: ResourceType, specs: JsonObject, rtype: str, index: int) -> None:
        name, ns = job["metadata"]["name"], job["metadata"].get("namespace", "default")
        labels = {k: v for k, v in self.pod_labels(name, specs, rtype, index).items() if k != KF_ROLE}
        service = headless_service(self.pod_name(name, rtype, index), ns, self.ref(job, rt), labels, labels=labels,
                                   ports=[{"name": self.port_name, "port": self.port_of(specs, rtype)}])
        self.ensure(SVC_RT, job, service)


def _set_false(status: JsonObject, type_: str, now: str) -> None:
    for c in status.get("conditions") or []:
        if c.get("type") == type_ and c.get("status") != "False":
            c.update(status="False", lastUpdateTime=now, lastTransitionTime=now)


class PyTorchJobController(TrainingJobController):
    key = "pytorchjobs.kubeflow.org"
    kind = "PyTorchJob"
    specs_key = "pytorchReplicaSpecs"
    operator = "pytorchjob-controller"
    container = "pytorch"
    port_name = "pytorchjob-port"
    default_port = 23456
    order = ("Master", "Worker")

    def master_role(self, specs: JsonObject, rtype: str, index: int) -> bool:
        return rtype == "Master"

    def set_env(self, job: JsonObject, specs: JsonObject, rtype: str, index: int, pod: JsonObject) -> None:
        name = job["metadata"]["name"]
        spec = job.get("spec") or {}
        world = sum(int((s or {}).get("replicas", 1)) for s in specs.values())
        rank = index + 1 if rtype.lower() == "worker" else index
        for c in pod["spec"].get("containers") or []:
            add_env(c, "PYTHONUNBUFFERED", "0")
            if "Master" in specs:
                add_env(c, "MASTER_PORT", str(self.port_of(specs, "Master")))
                add_env(c, "MASTER_ADDR", f"{name}-master-0")
                add_env(c, "WORLD_SIZE", str(world))
                add_env(c, "RANK", str(rank))
            if spec.get("nprocPerNode") is not None:
                add_env(c, "PET_NPROC_PER_NODE", str(spec["nprocPerNode"]))
            elastic = spec.get("elasticPolicy")
            if elastic is not None:
                for key, value in self._elastic_env(name, specs, elastic):
                    add_env(c, key, value)

    def _elastic_env(self, name: str, specs: JsonObject, elastic: JsonObject) -> list[tuple[str, str]]:
        """torchrun's PET_* variables, as the operator's elastic env generator writes them."""
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        port = elastic.get("rdzvPort") or self.port_of(specs, "Worker")
        if elastic.get("minReplicas") is None and elastic.get("maxReplicas") is None:
            nodes = str(int((specs.get("Worker") or {}).get("replicas", 1)))
        else:
            nodes = f"{elastic.get('minReplicas')}:{elastic.get('maxReplicas')}"
        out = [("PET_RDZV_ENDPOINT", f"{host}:{port}"), ("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")),
               ("PET_NNODES", nodes)]
        for key, field in (("PET_MAX_RESTARTS", "maxRestarts"), ("PET_N_PROC_PER_NODE", "nProcPerNode"),
                           ("PET_RDZV_ID", "rdzvId")):
            if elastic.get(field) is not None:
                out.append((key, str(elastic[field])))
        if elastic.get("rdzvConf"):
            out.append(("PET_RDZV_CONF", ",".join(f"{c.get('key')}={c.get('value')}" for c in elastic["rdzvConf"])))
        return out

    def succeeded(self, job: JsonObject, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        rtype = "Master" if "Master" in specs else "Worker"
        if rtype not in specs:
            return False
        return counts[rtype]["succeeded"] >= int((specs[rtype] or {}).get("replicas", 1))

    def running(self, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        rtype = "Master" if "Master" in specs else "Worker"
        return rtype in counts and counts[rtype]["active"] > 0


class TFJobController(TrainingJobController):
    key = "tfjobs.kubeflow.org"
    kind = "TFJob"
    specs_key = "tfReplicaSpecs"
    operator = "tfjob-controller"
    container = "tensorflow"
    port_name = "tfjob-port"
    default_port = 2222
    default_restart = "Never"
    default_clean = "Running"
    order = ("PS", "Master", "Chief", "Worker", "Evaluator")

    @staticmethod
    def _chief(specs: JsonObject) -> str | None:
        return next((t for t in ("Chief", "Master") if t in specs), None)

    def master_role(self, specs: JsonObject, rtype: str, index: int) -> bool:
        if self._chief(specs) is not None:
            return rtype in ("Chief", "Master")
        return rtype == "Worker" and index == 0

    def set_env(self, job: JsonObject, specs: JsonObject, rtype: str, index: int, pod: JsonObject) -> None:
        name, ns = job["metadata"]["name"], job["metadata"].get("namespace", "default")
        cluster = {
            t.lower(): [f"{self.pod_name(name, t, i)}.{ns}.svc:{self.port_of(specs, t)}"
                        for i in range(int((specs[t] or {}).get("replicas", 1)))]
            for t in self.ordered(specs) if t != "Evaluator"
        }
        tf_config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index}, "environment": "cloud"}
        for c in pod["spec"].get("containers") or []:
            if c.get("name") == self.container:
                add_env(c, "TF_CONFIG", json.dumps(tf_config, separators=(",", ":")))

    def succeeded(self, job: JsonObject, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        chief = self._chief(specs)
        if chief is not None:
            return counts[chief]["succeeded"] >= int((specs[chief] or {}).get("replicas", 1))
        if "Worker" not in specs:
            return False
        if (job.get("spec") or {}).get("successPolicy") == "AllWorkers":
            return counts["Worker"]["succeeded"] >= int((specs["Worker"] or {}).get("replicas", 1))
        worker0 = self.store.exists(POD_RT, self.pod_name(job["metadata"]["name"], "Worker", 0), job["metadata"].get("namespace"))
        if not worker0:
            return False
        pod = self.store.get(POD_RT.key, self.pod_name(job["metadata"]["name"], "Worker", 0), job["metadata"].get("namespace"))
        return phase(pod) == "Succeeded"


class MPIJobController(TrainingJobController):
    """MPIJob (``kubeflow.org/v2beta1``): with ``spec.launcherCreationPolicy: WaitForWorkersReady``
    the launcher is created only once every worker is Ready."""

    key = "mpijobs.kubeflow.org"
    kind = "MPIJob"
    specs_key = "mpiReplicaSpecs"
    operator = "mpijob-controller"
    container = "mpi"
    default_restart = "Never"
    services = False
    order = ("Launcher", "Worker")

    def pod_name(self, name: str, rtype: str, index: int) -> str:
        return f"{name}-launcher" if rtype == "Launcher" else super().pod_name(name, rtype, index)

    def holds_back(self, job: JsonObject, specs: JsonObject, rtype: str, pods: dict[tuple[str, int], Stored]) -> bool:
        if rtype != "Launcher" or (job.get("spec") or {}).get("launcherCreationPolicy") != "WaitForWorkersReady":
            return False
        workers = int((specs.get("Worker") or {}).get("replicas", 1)) if "Worker" in specs else 0
        return not all((s := pods.get(("worker", i))) is not None and pod_ready(s.obj) for i in range(workers))

    def pod_labels(self, name: str, specs: JsonObject, rtype: str, index: int) -> dict[str, str]:
        labels = {KF_OPERATOR: self.operator, KF_JOB_NAME: name, "mpi-job-name": name, KF_TYPE: rtype.lower()}
        if rtype != "Launcher":
            labels[KF_INDEX] = str(index)
        return labels

    def extras(self, job: JsonObject, rt: ResourceType, specs: JsonObject) -> None:
        name, ns = job["metadata"]["name"], job["metadata"].get("namespace", "default")
        slots = int((job.get("spec") or {}).get("slotsPerWorker", 1))
        workers = int((specs.get("Worker") or {}).get("replicas", 0)) if "Worker" in specs else 0
        hostfile = "".join(f"{name}-worker-{i} slots={slots}\n" for i in range(workers))
        self.ensure(CM_RT, job, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": f"{name}-config", "namespace": ns, "labels": {"app": name},
                                              "ownerReferences": [self.ref(job, rt)]},
                                 "data": {"hostfile": hostfile}})

    def succeeded(self, job: JsonObject, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        return "Launcher" in counts and counts["Launcher"]["succeeded"] > 0

    def running(self, specs: JsonObject, counts: dict[str, JsonObject]) -> bool:
        return "Launcher" in counts and counts["Launcher"]["active"] > 0


# ====================================================================== KubeRay

RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
RAY_ID = "ray.io/identifier"
RAY_NODE = "ray.io/is-ray-node"
RAY_FROM_NAME = "ray.io/originated-from-cr-name"
RAY_FROM_CRD = "ray.io/originated-from-crd"
HEAD_GROUP = "headgroup"
RAY_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("metrics", 8080))


def ray_labels(template: JsonObject, cluster: str, node_type: str, group: str) -> dict[str, str]:
    """KubeRay's labelPod: its labels, the template's on top, except cluster, node type and group."""
    labels = {
        RAY_NODE: "yes",
        RAY_CLUSTER: cluster,
        RAY_NODE_TYPE: node_type,
        RAY_GROUP: group,
        RAY_ID: f"{cluster}-{node_type}"[:63],
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    for k, v in ((template.get("metadata") or {}).get("labels") or {}).items():
        if k not in (RAY_CLUSTER, RAY_NODE_TYPE, RAY_GROUP):
            labels[k] = v
    return labels


def desired_workers(group: JsonObject, suspended: bool = False) -> int:
    if suspended:
        return 0
    low = int(group.get("minReplicas", 0) or 0)
    high = int(group.get("maxReplicas", 2147483647) or 0)
    replicas = group.get("replicas")
    replicas = low if replicas is None else int(replicas)
    return max(low, min(replicas, high)) * int(group.get("numOfHosts", 1) or 1)


class RayClusterController(CustomPart):
    key = "rayclusters.ray.io"
    kind = "RayCluster"
    child_keys = (POD_RT.key, SVC_RT.key)

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        rc = stored.obj
        spec = rc.get("spec") or {}
        name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace", "default")
        suspended = bool(spec.get("suspend"))
        head_spec = spec.get("headGroupSpec") or {}
        groups = [g for g in spec.get("workerGroupSpecs") or [] if g.get("groupName")]
        service = f"{name}-head-svc"
        self.ensure(SVC_RT, rc, headless_service(
            service, ns, self.ref(rc, rt), {RAY_CLUSTER: name, RAY_NODE_TYPE: "head"},
            labels={RAY_CLUSTER: name, RAY_NODE_TYPE: "head", RAY_ID: f"{name}-head",
                    "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"},
            ports=[{"name": n, "port": p, "appProtocol": "tcp"} for n, p in RAY_PORTS]))
        pods = self.owned(rc)
        for s in pods:
            if suspended or (is_terminal(s.obj) and not deleting(s.obj)):
                self.delete(POD_RT, s)  # suspended, or ended: deleted (and replaced)
        heads = [s for s in pods if labels_of(s.obj).get(RAY_NODE_TYPE) == "head" and live(s.obj)]
        if not suspended:
            if not heads:
                self._create(rc, rt, head_spec.get("template") or {}, "head", HEAD_GROUP)
            for group in groups:
                mine = sorted((s for s in pods if labels_of(s.obj).get(RAY_NODE_TYPE) == "worker"
                               and labels_of(s.obj).get(RAY_GROUP) == group["groupName"] and live(s.obj)),
                              key=lambda s: (s.obj["metadata"].get("creationTimestamp", ""), s.obj["metadata"]["name"]))
                want = desired_workers(group)
                for _ in range(want - len(mine)):
                    self._create(rc, rt, group.get("template") or {}, "worker", group["groupName"])
                for s in mine[want:] if len(mine) > want else []:
                    self.delete(POD_RT, s)
        self.save_status(rt, stored, self._status(rc, groups, suspended))

    def _create(self, rc: JsonObject, rt: ResourceType, template: JsonObject, node_type: str, group: str) -> None:
        name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace", "default")
        prefix = name[:50] if node_type == "head" else f"{name}-{group}"[:50]
        pod = pod_from_template(template, ns, self.ref(rc, rt), generate_name=f"{prefix}-{node_type}-".lower(),
                                labels=ray_labels(template, name, node_type, group),
                                annotations={"ray.io/ft-enabled": "false"})
        fq_head = f"{name}-head-svc.{ns}.svc.cluster.local"
        containers = pod["spec"].get("containers") or []
        if containers:
            ray = containers[0]  # KubeRay's Ray container is the first
            add_env(ray, "RAY_CLUSTER_NAME", field=f"metadata.labels['{RAY_CLUSTER}']")
            add_env(ray, "RAY_CLOUD_INSTANCE_ID", field="metadata.name")
            add_env(ray, "RAY_NODE_TYPE_NAME", field=f"metadata.labels['{RAY_GROUP}']")
            add_env(ray, "KUBERAY_GEN_RAY_START_CMD", "ray start --head" if node_type == "head" else f"ray start --address={fq_head}:6379")
            if node_type == "head":
                add_env(ray, "RAY_ADDRESS", "127.0.0.1:6379")
            else:
                add_env(ray, "FQ_RAY_IP", fq_head)
                add_env(ray, "RAY_IP", f"{name}-head-svc")
                add_env(ray, "RAY_PORT", "6379")
                add_env(ray, "RAY_ADDRESS", f"{fq_head}:6379")
            add_env(ray, "RAY_USAGE_STATS_KUBERAY_IN_USE", "1")
        self.create(POD_RT, pod, ns)

    def _status(self, rc: JsonObject, groups: list[JsonObject], suspended: bool) -> JsonObject:
        spec = rc.get("spec") or {}
        name = rc["metadata"]["name"]
        old = rc.get("status") or {}
        pods = [s.obj for s in self.owned(rc) if live(s.obj)]
        head = next((p for p in pods if labels_of(p).get(RAY_NODE_TYPE) == "head"), None)
        workers = [p for p in pods if labels_of(p).get(RAY_NODE_TYPE) == "worker"]
        desired = sum(desired_workers(g, suspended) for g in groups)
        running = [p for p in workers if phase(p) == "Running"]
        ready = [p for p in running if pod_ready(p)]
        cpu = gpu = 0
        templates = [((spec.get("headGroupSpec") or {}).get("template") or {}, 1)]
        templates += [(g.get("template") or {}, desired_workers(g, suspended)) for g in groups]
        for template, n in templates:
            requests = pod_requests({"spec": template.get("spec") or {}})
            cpu += n * requests.get(CPU, 0)
            gpu += n * requests.get(GPU, 0)
        status: JsonObject = {
            "desiredWorkerReplicas": desired,
            "availableWorkerReplicas": len(running),
            "readyWorkerReplicas": len(ready),
            "minWorkerReplicas": sum(int(g.get("minReplicas", 0) or 0) * int(g.get("numOfHosts", 1) or 1) for g in groups),
            "maxWorkerReplicas": sum(int(g.get("maxReplicas", 2147483647) or 0) * int(g.get("numOfHosts", 1) or 1) for g in groups),
            "desiredCPU": format_cpu(cpu),
            "desiredGPU": str(gpu),
            "endpoints": {n: str(p) for n, p in RAY_PORTS},
            "head": {"serviceName": f"{name}-head-svc"},
            "observedGeneration": rc["metadata"].get("generation", 1),
        }
        if head is not None:
            status["head"]["podName"] = head["metadata"]["name"]
            if (head.get("status") or {}).get("podIP"):
                status["head"]["podIP"] = head["status"]["podIP"]
        if suspended:
            status["state"] = "suspended"
        elif head is not None and pod_ready(head) and len(ready) >= desired:
            status["state"] = "ready"
        elif old.get("state") == "ready":
            status["state"] = "ready"  # KubeRay does not take "ready" back while pods come and go
        comparable = {k: v for k, v in old.items() if k != "lastUpdateTime"}
        status["lastUpdateTime"] = old.get("lastUpdateTime") if comparable == status else self.store.now()
        if status["lastUpdateTime"] is None:
            status["lastUpdateTime"] = self.store.now()
        return status


SANDBOX_ANNOTATIONS = ("usher/duration", "sandbox.usher/exit-code")


class RayJobController(CustomPart):
    key = "rayjobs.ray.io"
    kind = "RayJob"
    child_keys = (RayClusterController.key, JOB_RT.key)

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        rj = stored.obj
        spec = rj.get("spec") or {}
        name, ns = rj["metadata"]["name"], rj["metadata"].get("namespace", "default")
        status = copy.deepcopy(rj.get("status") or {})
        now = self.store.now()
        rc_rt = self._rc_rt()
        if rc_rt is None:
            return
        clusters = self.owned(rj, rc_rt)
        submitters = [s for s in self.owned(rj, JOB_RT) if s.obj["metadata"]["name"] == name]
        deployment = status.get("jobDeploymentStatus", "")
        if deployment in ("Complete", "Failed"):
            self._shutdown(rj, spec, status, clusters)
            self.save_status(rt, stored, status)
            return
        if spec.get("suspend"):
            for s in clusters:
                self.delete(rc_rt, s)
            for s in submitters:
                self.delete(JOB_RT, s)
            status.update(jobDeploymentStatus="Suspended", jobStatus="")
            self.save_status(rt, stored, status)
            return
        if not clusters:
            cluster = {
                "apiVersion": rc_rt.api_version,
                "kind": "RayCluster",
                "metadata": {
                    "generateName": f"{name}-raycluster-",
                    "namespace": ns,
                    "labels": {**labels_of(rj), RAY_FROM_NAME: name, RAY_FROM_CRD: "RayJob"},
                    "ownerReferences": [self.ref(rj, rt)],
                },
                "spec": copy.deepcopy(spec.get("rayClusterSpec") or {}),
            }
            if annotations_of(rj):
                cluster["metadata"]["annotations"] = dict(annotations_of(rj))
            made = self.create(rc_rt, cluster, ns)
            if made is None:
                return
            clusters = [made]
            status.update(jobDeploymentStatus="Initializing", startTime=now,
                          jobId=status.get("jobId") or f"{name}-{sha1(rj['metadata']['uid'])[:5]}")
        rc = clusters[0].obj
        cluster_name = rc["metadata"]["name"]
        status["rayClusterName"] = cluster_name
        status["dashboardURL"] = f"{cluster_name}-head-svc.{ns}.svc.cluster.local:8265"
        status["rayClusterStatus"] = copy.deepcopy(rc.get("status") or {})
        status.setdefault("jobDeploymentStatus", "Initializing")
        if (rc.get("status") or {}).get("state") == "ready" and spec.get("submissionMode", "K8sJobMode") != "HTTPMode":
            if not submitters:
                self.create(JOB_RT, self._submitter(rj, rt, rc, status), ns)
                submitters = [s for s in self.owned(rj, JOB_RT) if s.obj["metadata"]["name"] == name]
            status["jobDeploymentStatus"] = "Running"
            job = submitters[0].obj if submitters else {}
            if cond_true(job, "Complete"):
                status.update(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete", endTime=now)
            elif cond_true(job, "Failed"):
                status.update(jobStatus="FAILED", jobDeploymentStatus="Failed", endTime=now,
                              reason="SubmissionFailed", message="the submitter Job failed")
            elif int((job.get("status") or {}).get("ready", 0) or 0) > 0:
                status["jobStatus"] = "RUNNING"
            else:
                status.setdefault("jobStatus", "PENDING")
            if status["jobDeploymentStatus"] in ("Complete", "Failed"):
                self._shutdown(rj, spec, status, clusters)
        elif (rc.get("status") or {}).get("state") == "ready":
            status.update(jobDeploymentStatus="Running", jobStatus=status.get("jobStatus") or "RUNNING")
        self.save_status(rt, stored, status)

    def _rc_rt(self) -> ResourceType | None:
        try:
            return self.store.resource_type(RayClusterController.key)
        except ApiError:
            return None

    def _submitter(self, rj: JsonObject, rt: ResourceType, rc: JsonObject, status: JsonObject) -> JsonObject:
        spec = rj.get("spec") or {}
        name, ns = rj["metadata"]["name"], rj["metadata"].get("namespace", "default")
        template = copy.deepcopy(spec.get("submitterPodTemplate") or {})
        if not template:
            head = ((((rc.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec") or {})
            image = ((head.get("containers") or [{}])[0]).get("image", "rayproject/ray:2.9.0")
            address = f"http://{status['dashboardURL']}"
            notes = {k: v for k, v in annotations_of(rj).items() if k in SANDBOX_ANNOTATIONS}
            template = {
                "metadata": {"annotations": notes} if notes else {},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "ray-job-submitter",
                        "image": image,
                        "command": ["ray", "job", "submit", "--address", address, "--no-wait", "--submission-id",
                                    status.get("jobId", name), "--", *str(spec.get("entrypoint", "")).split()],
                        "env": [{"name": "RAY_DASHBOARD_ADDRESS", "value": status["dashboardURL"]},
                                {"name": "RAY_JOB_SUBMISSION_ID", "value": status.get("jobId", name)}],
                        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}},
                    }],
                },
            }
        template.setdefault("spec", {}).setdefault("restartPolicy", "Never")
        backoff = int(((spec.get("submitterConfig") or {}).get("backoffLimit")) or 2)
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {RAY_FROM_NAME: name, RAY_FROM_CRD: "RayJob"},
                         "ownerReferences": [self.ref(rj, rt)]},
            "spec": {"backoffLimit": backoff, "template": template},
        }

    def _shutdown(self, rj: JsonObject, spec: JsonObject, status: JsonObject, clusters: list[Stored]) -> None:
        if not spec.get("shutdownAfterJobFinishes") or not clusters:
            return
        ended = parse_time(status.get("endTime")) or self.mgr.now()
        due = ended + float(spec.get("ttlSecondsAfterFinished", 0) or 0)
        if self.mgr.now() >= due:
            rc_rt = self._rc_rt()
            for s in clusters:
                if rc_rt is not None:
                    self.delete(rc_rt, s)
        else:
            self.mgr.at(due, ("rayjob-shutdown", rj["metadata"]["uid"]), self.resync)


# ====================================================================== LeaderWorkerSet

LWS = "leaderworkerset.sigs.k8s.io/"
LWS_NAME = LWS + "name"
LWS_GROUP_INDEX = LWS + "group-index"
LWS_WORKER_INDEX = LWS + "worker-index"
LWS_GROUP_KEY = LWS + "group-key"
LWS_REVISION = LWS + "template-revision-hash"
LWS_SIZE = LWS + "size"
LWS_REPLICAS = LWS + "replicas"
LWS_LEADER_NAME = LWS + "leader-name"
LWS_EXCLUSIVE = LWS + "exclusive-topology"


class LeaderWorkerSetController(CustomPart):
    key = "leaderworkersets.leaderworkerset.x-k8s.io"
    kind = "LeaderWorkerSet"

    def __init__(self, mgr: Host, statefulsets: StatefulSetController) -> None:
        super().__init__(mgr)
        statefulsets.mutators.append(self.admit_pod)
        self._recreate: set[tuple[str, str, str]] = set()
        """(namespace, leader pod, leader uid) of the groups to create again."""

    def on_change(self, change: Change) -> None:
        if change.rt.key == self.key:
            self._dirty = True
            return
        if change.rt.key not in (POD_RT.key, STS_RT.key) or LWS_NAME not in labels_of(change.new.obj):
            return
        self._dirty = True
        pod = change.new.obj
        if change.rt.key != POD_RT.key or change.type is EventType.DELETED:
            return
        if deleting(pod) or restarted(pod):
            leader = self._leader_of(pod)
            if leader is not None:
                self._recreate.add(leader)

    def _leader_of(self, pod: JsonObject) -> tuple[str, str, str] | None:
        ns = pod["metadata"].get("namespace", "default")
        if labels_of(pod).get(LWS_WORKER_INDEX) == "0":
            return ns, pod["metadata"]["name"], pod["metadata"]["uid"]
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "StatefulSet":
            return None
        try:
            sts = self.store.get_stored(STS_RT, ref["name"], ns)
        except ApiError:
            return None
        leader = controller_ref(sts.obj)
        if sts.obj["metadata"]["uid"] != ref.get("uid") or leader is None or leader.get("kind") != "Pod":
            return None
        return ns, leader["name"], leader["uid"]

    # ---------------------------------------------------------------- the pod webhook

    def admit_pod(self, sts: JsonObject, pod: JsonObject) -> None:
        labels = pod["metadata"].setdefault("labels", {})
        if LWS_NAME not in labels:
            return
        annotations = pod["metadata"].get("annotations") or {}
        name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace", "default")
        ordinal = name.rpartition("-")[2]
        if labels.get(LWS_WORKER_INDEX) == "0":
            labels.setdefault(LWS_GROUP_INDEX, ordinal)
            labels.setdefault(LWS_GROUP_KEY, sha1(f"{ns}/{name}"))
            leader = name
        else:
            labels[LWS_WORKER_INDEX] = ordinal
            leader = annotations.get(LWS_LEADER_NAME, name)
        subdomain = pod["spec"].get("subdomain") or labels[LWS_NAME]
        for group in ("initContainers", "containers"):
            for c in pod["spec"].get(group) or []:
                add_env(c, "LWS_LEADER_ADDRESS", f"{leader}.{subdomain}.{ns}")
                add_env(c, "LWS_GROUP_SIZE", annotations.get(LWS_SIZE, "1"))
                add_env(c, "LWS_WORKER_INDEX", field=f"metadata.labels['{LWS_WORKER_INDEX}']")

    # ---------------------------------------------------------------- the LWS and pod controllers

    def sync(self) -> None:
        super().sync()
        self._recreate = {k for k in self._recreate if self._pod_uid(k[0], k[1]) == k[2]}

    def _pod_uid(self, namespace: str, name: str) -> str | None:
        try:
            return self.store.get_stored(POD_RT, name, namespace).obj["metadata"]["uid"]
        except ApiError:
            return None

    def reconcile_one(self, rt: ResourceType, stored: Stored) -> None:
        lws = stored.obj
        spec = lws.get("spec") or {}
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        revision = template_hash(lwt)
        self.ensure(SVC_RT, lws, headless_service(name, ns, self.ref(lws, rt), {LWS_NAME: name},
                                                  labels={LWS_NAME: name}, publish_not_ready=True))
        leader_sts = next((s for s in self.owned(lws, STS_RT) if s.obj["metadata"]["name"] == name), None)
        if leader_sts is None:
            leader_sts = self.create(STS_RT, self._leader_sts(lws, rt, revision), ns)
            if leader_sts is None:
                return
        elif (leader_sts.obj.get("spec") or {}).get("replicas") != replicas:
            new = leader_sts.copy()
            new["spec"]["replicas"] = replicas
            new["metadata"].setdefault("annotations", {})[LWS_REPLICAS] = str(replicas)
            try:
                self.store.update_stored(STS_RT, new, ns)
            except ApiError:
                pass
        recreate = (lwt.get("restartPolicy") or "RecreateGroupOnPodRestart") in ("RecreateGroupOnPodRestart", "Default")
        groups = ready_groups = updated = 0
        for s in self.owned(leader_sts.obj):
            leader = s.obj
            if not live(leader):
                continue
            key = (ns, leader["metadata"]["name"], leader["metadata"]["uid"])
            if key in self._recreate:
                self._recreate.discard(key)
                if recreate:
                    self.delete(POD_RT, s)  # the group goes with its leader (the worker set is the leader's)
                    continue
            groups += 1
            if labels_of(leader).get(LWS_REVISION) == revision:
                updated += 1
            workers_ready = True
            if size > 1:
                workers = next((w for w in self.owned(leader, STS_RT) if w.obj["metadata"]["name"] == leader["metadata"]["name"]), None)
                if workers is None:
                    workers_ready = False
                    if spec.get("startupPolicy") != "LeaderReady" or pod_ready(leader):
                        self.create(STS_RT, self._worker_sts(lws, leader, size, revision), ns)
                else:
                    ready = [p for p in self.owned(workers.obj) if live(p.obj) and pod_ready(p.obj)]
                    workers_ready = len(ready) >= size - 1
            if workers_ready and pod_ready(leader):
                ready_groups += 1
        status = copy.deepcopy(lws.get("status") or {})
        now = self.store.now()
        status.update(observedGeneration=lws["metadata"].get("generation", 1), replicas=groups,
                      readyReplicas=ready_groups, updatedReplicas=updated,
                      hpaPodSelector=f"{LWS_NAME}={name},{LWS_WORKER_INDEX}=0")
        # Available and Progressing exclude each other: the one set True turns the other False
        on, off = ("Available", "Progressing") if ready_groups >= replicas else ("Progressing", "Available")
        reason, message = (("AllGroupsReady", "All replicas are ready") if on == "Available"
                           else ("GroupsProgressing", "Replicas are progressing"))
        set_condition(status, now, on, "True", reason, message, probe=False)
        other = condition({"status": status}, off)
        if other is not None:
            set_condition(status, now, off, "False", other.get("reason"), other.get("message"), probe=False)
        self.save_status(rt, stored, status)

    def _leader_sts(self, lws: JsonObject, rt: ResourceType, revision: str) -> JsonObject:
        spec = lws.get("spec") or {}
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = spec.get("leaderWorkerTemplate") or {}
        template = copy.deepcopy(lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {})
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), LWS_NAME: name, LWS_WORKER_INDEX: "0", LWS_REVISION: revision}
        annotations = {**(meta.get("annotations") or {}), LWS_SIZE: str(int(lwt.get("size", 1)))}
        if annotations_of(lws).get(LWS_EXCLUSIVE):
            annotations[LWS_EXCLUSIVE] = annotations_of(lws)[LWS_EXCLUSIVE]
        meta["annotations"] = annotations
        replicas = int(spec.get("replicas", 1))
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns, "labels": {LWS_NAME: name, LWS_REVISION: revision},
                         "annotations": {LWS_REPLICAS: str(replicas)}, "ownerReferences": [self.ref(lws, rt)]},
            "spec": {
                "replicas": replicas,
                "podManagementPolicy": "Parallel",
                "serviceName": name,
                "selector": {"matchLabels": {LWS_NAME: name, LWS_WORKER_INDEX: "0"}},
                "template": template,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}},
                **({"volumeClaimTemplates": copy.deepcopy(lwt["volumeClaimTemplates"])} if lwt.get("volumeClaimTemplates") else {}),
            },
        }

    def _worker_sts(self, lws: JsonObject, leader: JsonObject, size: int, revision: str) -> JsonObject:
        name, ns = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
        lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
        leader_labels = labels_of(leader)
        selector = {LWS_GROUP_INDEX: leader_labels.get(LWS_GROUP_INDEX, ""), LWS_NAME: name,
                    LWS_GROUP_KEY: leader_labels.get(LWS_GROUP_KEY, "")}
        labels = {**selector, LWS_REVISION: leader_labels.get(LWS_REVISION, revision)}
        template = copy.deepcopy(lwt.get("workerTemplate") or {})
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        annotations = {**(meta.get("annotations") or {}), LWS_SIZE: str(size), LWS_LEADER_NAME: leader["metadata"]["name"]}
        if annotations_of(lws).get(LWS_EXCLUSIVE):
            annotations[LWS_EXCLUSIVE] = annotations_of(lws)[LWS_EXCLUSIVE]
        meta["annotations"] = annotations
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": leader["metadata"]["name"], "namespace": ns, "labels": labels,
                         "ownerReferences": [owner_reference(leader, POD_RT)]},
            "spec": {
                "replicas": size - 1,
                "ordinals": {"start": 1},
                "podManagementPolicy": "Parallel",
                "serviceName": name,
                "selector": {"matchLabels": selector},
                "template": template,
                **({"volumeClaimTemplates": copy.deepcopy(lwt["volumeClaimTemplates"])} if lwt.get("volumeClaimTemplates") else {}),
            },
        }


# ====================================================================== wiring


def operator_parts(mgr: Host) -> list[OwnerPart]:
    """The StatefulSet controller and the operator stand-ins, in the order they should run."""
    statefulsets = StatefulSetController(mgr)
    return [
        JobSetController(mgr),
        PyTorchJobController(mgr),
        TFJobController(mgr),
        MPIJobController(mgr),
        RayJobController(mgr),
        RayClusterController(mgr),
        LeaderWorkerSetController(mgr, statefulsets),
        statefulsets,
    ]
