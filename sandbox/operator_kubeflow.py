"""The Kubeflow training operator's stand-in: PyTorchJob, TFJob and MPIJob.

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

What the operators share, and what none models, is in :mod:`.operator_base` and :mod:`.operators`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .kinds import RESOURCE_TYPES, Resource, ResourceType
from .nodefit import condition, set_condition
from .operator_base import (
    add_env,
    cond_true,
    CustomPart,
    deleting,
    exit_code,
    headless_service,
    labels_of,
    phase,
    pod_from_template,
)
from .store import Stored
from .workloads import pod_ready

JsonObject = dict[str, Any]

POD_RT = RESOURCE_TYPES[Resource.PODS]
SVC_RT = RESOURCE_TYPES[Resource.SERVICES]
CM_RT = RESOURCE_TYPES[Resource.CONFIGMAPS]


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
