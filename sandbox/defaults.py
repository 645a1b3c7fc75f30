"""What the real API server fills in when a workload or a Service is created.

kubectl, controllers and usher read these defaults back (a Job's generated selector and the
labels of its pods, a Service's cluster IP), so the sandbox writes them as the registry does:

- Job: ``parallelism`` 1, ``completions`` 1 (unless ``parallelism`` alone was given: a work
  queue), ``backoffLimit`` 6, ``completionMode`` NonIndexed, ``suspend`` false; unless
  ``manualSelector``, the selector ``batch.kubernetes.io/controller-uid`` and the template labels
  ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``, ``controller-uid``,
  ``job-name``; the template's ``restartPolicy`` must be Never or OnFailure (422 otherwise).
- Deployment, DaemonSet, StatefulSet, ReplicaSet: replicas, strategies, revision history.
- Service: ``type`` ClusterIP, a ``clusterIP`` from 10.96.0.0/16 unless headless (``None``),
  ``sessionAffinity`` None, each port's ``protocol`` TCP and ``targetPort`` = ``port``.

Each function takes the object (modified in place) and whether it is being created.
"""

from __future__ import annotations

import itertools
from typing import Any

JsonObject = dict[str, Any]

_cluster_ips = itertools.count(10)


def job_defaults(job: JsonObject, creating: bool) -> None:
    spec = job.setdefault("spec", {})
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    uid = job["metadata"].get("uid")
    template = spec.setdefault("template", {})
    if creating and uid and not spec.get("manualSelector"):
        name = job["metadata"]["name"]
        generated = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(generated)
    _pod_template_defaults(template)


def deployment_defaults(deployment: JsonObject, creating: bool) -> None:
    spec = deployment.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        strategy.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})
    _pod_template_defaults(spec.setdefault("template", {}))


def replicaset_defaults(replicaset: JsonObject, creating: bool) -> None:
    spec = replicaset.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _pod_template_defaults(spec.setdefault("template", {}))


def daemonset_defaults(daemonset: JsonObject, creating: bool) -> None:
    spec = daemonset.setdefault("spec", {})
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        strategy.setdefault("rollingUpdate", {"maxUnavailable": 1, "maxSurge": 0})
    _pod_template_defaults(spec.setdefault("template", {}))


def statefulset_defaults(statefulset: JsonObject, creating: bool) -> None:
    spec = statefulset.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    _pod_template_defaults(spec.setdefault("template", {}))


def service_defaults(service: JsonObject, creating: bool) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if creating and spec["type"] != "ExternalName" and not spec.get("clusterIP"):
        n = next(_cluster_ips)
        spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
    if spec.get("clusterIP"):
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def port_defaults(spec: JsonObject) -> None:
    """Each container port's ``protocol`` TCP; with ``hostNetwork``, its ``hostPort`` its
    ``containerPort`` (the pod listens on the node's own address)."""
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or []:
            for port in (container.get("ports") or []) if isinstance(container, dict) else []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    if spec.get("hostNetwork") and not port.get("hostPort") and port.get("containerPort"):
                        port["hostPort"] = port["containerPort"]


def _pod_template_defaults(template: JsonObject) -> None:
    metadata = template.get("metadata")
    if isinstance(metadata, dict) and "creationTimestamp" in metadata and metadata["creationTimestamp"] is None:
        # a zero time, as kubectl before 1.34 writes it: today's API types omit it when stored
        del metadata["creationTimestamp"]
    spec = template.setdefault("spec", {})
    port_defaults(spec)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for container in spec.get("containers") or []:
        if isinstance(container, dict):
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("imagePullPolicy", "Always" if str(container.get("image", "")).endswith(":latest") else "IfNotPresent")
            container.setdefault("resources", {})
