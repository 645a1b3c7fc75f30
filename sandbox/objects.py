"""A scenario's cluster as Kubernetes objects: Nodes, the queues ConfigMap, each job's pods.

These follow the conventions usher documents for its users (:mod:`.usher_names`), so
a scenario served by the sandbox and scheduled through the API is the same scenario the replay
backend runs. Pods live in namespace ``default``, are named ``<job>-<pod group>-<k>`` and carry
the gang labels; ``usher/duration`` tells the kubelet stand-in how long each runs.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from enum import StrEnum
from typing import Any

import yaml

from usher.engine.scenario import JobSpec, NodeSpec, Scenario
from usher.engine.scenario.quantity import format_cpu

from .admission import SCENARIO_ANNOTATION
from .store import rfc3339
from .usher_names import (
    DECISIONS_CONFIG_KEY,
    DECISIONS_CONFIGMAP,
    GPU_RESOURCE,
    QUEUES_CONFIG_KEY,
    QUEUES_CONFIGMAP,
    SCHEDULER_NAME,
    USHER_NAMESPACE,
    Annotation,
    Label,
)

JOB_NAMESPACE = "default"


class PodPhase(StrEnum):
    """``status.phase`` of a pod, as the kubelet reports it."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

#: a label the sandbox puts on its pods so that it can tell them from anyone else's
JOB_LABEL = "sandbox.usher/job"


def seconds(value: float) -> str:
    """A duration annotation: plain seconds with at most millisecond digits (``7200s``, ``0.5s``)."""
    return f"{value:.3f}".rstrip("0").rstrip(".") + "s"


def node_object(spec: NodeSpec, now: str | None = None) -> dict[str, Any]:
    """The Node a kubelet registers for ``spec``; its conditions were last heard of at ``now``
    (RFC 3339; default: the wall clock's now)."""
    labels = {k: str(v) for k, v in spec.labels.items()}
    if spec.gpu_model:
        labels[Label.GPU_PRODUCT.value] = spec.gpu_model
    if spec.gpu_memory:
        labels[Label.GPU_MEMORY.value] = str(spec.gpu_memory // 2**20)
    # what every kubelet lists besides: its root disk (here 1 TiB) and no hugepages set aside
    allocatable = {GPU_RESOURCE: str(spec.gpus), "pods": "110", "ephemeral-storage": "1Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    if spec.cpu is not None:
        allocatable["cpu"] = format_cpu(spec.cpu)
    if spec.memory is not None:
        allocatable["memory"] = str(spec.memory)
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    if spec.gpus:
        labels.setdefault("nvidia.com/gpu.present", "true")
    annotations = {}
    if spec.nvlink:
        annotations[Annotation.NVLINK.value] = ";".join(",".join(map(str, isl)) for isl in spec.nvlink)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": node_conditions(now or rfc3339(time.time())),
            "addresses": [{"type": "InternalIP", "address": _node_ip(spec.name)}, {"type": "Hostname", "address": spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": node_info(spec.name),
        },
    }


def _node_ip(name: str) -> str:
    n = int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)
    return f"10.{(n >> 16) % 256}.{(n >> 8) % 256}.{n % 254 + 1}"


def node_info(name: str) -> dict[str, str]:
    """``status.nodeInfo`` with every field (the official client's V1NodeSystemInfo requires them all)."""
    ident = uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.usher-sandbox")
    return {
        "architecture": "amd64",
        "bootID": str(uuid.uuid5(ident, "boot")),
        "containerRuntimeVersion": "containerd://1.7.20",
        "kernelVersion": "6.8.0-usher-sandbox",
        "kubeProxyVersion": "v1.31.0",
        "kubeletVersion": "v1.31.0-usher-sandbox",
        "machineID": ident.hex,
        "operatingSystem": "linux",
        "osImage": "Ubuntu 24.04 LTS (usher sandbox)",
        "systemUUID": str(ident),
    }


def node_conditions(now: str) -> list[dict[str, Any]]:
    """A healthy kubelet's conditions: no memory, disk or PID pressure, and Ready."""
    def cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {"type": type_, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now,
                "reason": reason, "message": message}

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def unreachable_conditions(now: str) -> list[dict[str, Any]]:
    """What the node lifecycle controller writes once a kubelet has stopped posting status: the
    Ready and pressure conditions Unknown (their last heartbeat left as it was)."""
    return [
        {"type": type_, "status": "Unknown", "lastTransitionTime": now, "reason": "NodeStatusUnknown",
         "message": "Kubelet stopped posting node status."}
        for type_ in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]


def queue_config_text(scenario: Scenario) -> str:
    """The scenario's ``topology`` and ``queues`` as the ConfigMap's YAML. A scenario's jobs name
    their queues and all run in ``JOB_NAMESPACE``; on a cluster a queue admits only the
    namespaces it names, so a queue that names none admits that one, as its operator would write."""
    doc = scenario.model_dump(mode="json", by_alias=True, exclude_none=True, include={"topology", "queues"})
    for queue in doc.get("queues") or []:
        if not queue.get("namespaces") and "namespaceSelector" not in queue:
            queue["namespaces"] = [JOB_NAMESPACE]
    return yaml.safe_dump(doc, sort_keys=False)


def decisions_configmap() -> dict[str, Any]:
    """The operators' decisions, empty at first (``deploy/`` ships it so)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DECISIONS_CONFIGMAP, "namespace": USHER_NAMESPACE},
        "data": {DECISIONS_CONFIG_KEY: ""},
    }


def queue_configmap(scenario: Scenario) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": QUEUES_CONFIGMAP,
            "namespace": USHER_NAMESPACE,
            "annotations": {SCENARIO_ANNOTATION: scenario.name},
        },
        "data": {QUEUES_CONFIG_KEY: queue_config_text(scenario)},
    }


def priority_class_name(scenario: Scenario, job: JobSpec) -> str | None:
    """The PriorityClass a job's pods name: its class, ``priority-<n>`` for a bare integer, None
    for priority 0 (a pod without a class gets 0, as on a cluster with no global default)."""
    if isinstance(job.priority, str):
        return job.priority if job.priority in scenario.priority_classes else None
    return f"priority-{job.priority}" if job.priority else None


def priority_class_objects(scenario: Scenario) -> list[dict[str, Any]]:
    """The PriorityClasses the scenario's pods name (``priority_class_name``), as a cluster admin
    would create them before the workloads: a pod's priority comes only from its class there."""
    values = {name: value for name, value in scenario.priority_classes.items()}
    for job in scenario.jobs:
        name = priority_class_name(scenario, job)
        if name is not None:
            values.setdefault(name, scenario.priority_of(job))
    return [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
         "preemptionPolicy": "PreemptLowerPriority", "description": f"scenario {scenario.name}: priority {value}"}
        for name, value in sorted(values.items())
    ]


def pod_objects(scenario: Scenario, job: JobSpec, duration: float | None = None, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """Every pod of a job; ``duration`` overrides the job's (a requeued job's remaining work).

    ``time_scale`` turns scenario seconds into the wall seconds written on the pod (1 / speed).
    """
    total = sum(p.count for p in job.pods)
    run_for = job.duration if duration is None else duration
    pods = []
    for gi, group in enumerate(job.pods):
        group_name = group.name or ("pod" if len(job.pods) == 1 else f"pod{gi}")
        annotations: dict[str, str] = {}
        requests: dict[str, str] = {}
        if 0 < group.gpu < 1:
            annotations[Annotation.GPU_FRACTION] = f"{group.gpu:g}"
        elif group.gpu:
            requests[GPU_RESOURCE] = str(int(group.gpu))
        if group.cpu:
            requests["cpu"] = format_cpu(group.cpu)
        if group.memory:
            requests["memory"] = str(group.memory)
        if group.gpu_model:
            annotations[Annotation.GPU_MODEL] = ",".join(group.gpu_model)
        if group.topology is not None:
            if group.topology.required:
                annotations[Annotation.TOPOLOGY_REQUIRED] = group.topology.required
            else:
                annotations[Annotation.TOPOLOGY_PREFERRED] = str(group.topology.preferred)
        estimate = job.estimate if job.estimate is not None else job.duration
        if estimate is not None:
            annotations[Annotation.ESTIMATE] = seconds(estimate * time_scale)
        if run_for is not None:
            annotations[Annotation.DURATION] = seconds(run_for * time_scale)
        if job.checkpoint_every:
            annotations[Annotation.CHECKPOINT_EVERY] = seconds(job.checkpoint_every * time_scale)
        if not job.preemptible:
            annotations[Annotation.PREEMPTIBLE] = "false"
        # the World creates an evicted pod again, as its Job would: usher may move it
        annotations[Annotation.MOVABLE] = "true"
        labels = {
            Label.QUEUE.value: job.queue,
            JOB_LABEL: job.name,
            Label.GANG.value: job.name,
            Label.GANG_SIZE.value: str(job.min_count or total),
        }
        priority_class = priority_class_name(scenario, job)
        for k in range(group.count):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job.name}-{group_name}-{k}",
                        "namespace": JOB_NAMESPACE,
                        "labels": dict(labels),
                        "annotations": {str(a): v for a, v in annotations.items()},
                    },
                    "spec": {
                        "schedulerName": SCHEDULER_NAME,
                        **({"priorityClassName": priority_class} if priority_class else {}),
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "usher-sandbox/sleep",
                                "resources": {"requests": dict(requests), "limits": {k: v for k, v in requests.items() if k == GPU_RESOURCE}},
                            }
                        ],
                    },
                }
            )
    return pods
