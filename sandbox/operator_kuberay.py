"""The KubeRay operator's stand-in: RayCluster and RayJob.

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

What the operators share, and what none models, is in :mod:`.operator_base` and :mod:`.operators`.
"""

from __future__ import annotations

import copy
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .kubelet import parse_time
from .nodefit import CPU, is_terminal, pod_requests
from .operator_base import (
    add_env,
    annotations_of,
    cond_true,
    CustomPart,
    deleting,
    format_cpu,
    headless_service,
    labels_of,
    live,
    phase,
    pod_from_template,
    sha1,
)
from .store import ApiError, Stored
from .workloads import pod_ready

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
JOB_RT = RESOURCE_TYPES[Resource.JOBS]
SVC_RT = RESOURCE_TYPES[Resource.SERVICES]

GPU = "nvidia.com/gpu"


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
