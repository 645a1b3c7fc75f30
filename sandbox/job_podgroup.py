"""The Job controller's Workload and PodGroup (KEP-5547, feature gate ``WorkloadWithJob``, alpha in 1.37).

With the gate on (``workload_api_beta.serve(..., gates={Gate.WORKLOAD_WITH_JOB})``; off by default,
as in 1.37) a root Job's controller compiles ``spec.scheduling`` into a ``scheduling.k8s.io/v1beta1``
``Workload`` (one template) and the Job's runtime ``PodGroup``, then creates the pods with
``spec.schedulingGroup.podGroupName`` naming it:

- ``spec.scheduling`` absent, or without ``schedulingPolicy``: ``basic``; ``gang`` without
  ``minCount``: the Job's ``parallelism`` (at least 1). The objects are made for every Job the
  controller manages, a basic one too.
- The Workload is ``<job>-<hash>`` with a controller reference to the Job and ``spec.controllerRef``
  naming it; the PodGroup ``<workload>-<template>-<hash>``, controlled by the Job and owned by
  the Workload, ``spec.workloadRef`` naming both; each pod has a (non-controller) owner reference
  to the PodGroup. The hash is of the Job's uid, so a restarted controller finds them again.
- They are created only while the Job has no pods; a Job that already has pods only finds them.
- The controller makes nothing when the pod template names its own ``schedulingGroup`` (the user
  brings the PodGroup) or when another controller owns the Job (a JobSet compiles its own). A
  Job naming a template of a Workload it does not own (``scheduling.k8s.io/group-template-name``)
  is not handled by the sandbox: such a Job gets no PodGroup, and its pods none.

:func:`pod_group_for` is called by ``workloads.JobController`` before it creates a pod.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from typing import Any, Protocol

from .api_errors import ApiError
from .kinds import ResourceType
from .workload_api_beta import POD_GROUP, WORKLOAD, Gate

JsonObject = dict[str, Any]

TEMPLATE = "job"
"""The name of the one pod group template of a Job's Workload."""
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class Objects(Protocol):
    """What :func:`pod_group_for` needs of the ``Store``."""

    feature_gates: Collection[str]

    def exists(self, resource: ResourceType, name: str, namespace: str | None = None) -> bool: ...

    def get_stored(self, resource: ResourceType, name: str, namespace: str | None = None) -> Any: ...

    def create_stored(self, rt: ResourceType, obj: JsonObject, namespace: str | None) -> Any: ...


def _hash(uid: str) -> str:
    """Five characters of the Job's uid, in the alphabet of generated names."""
    digest = hashlib.sha256(uid.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def _policy(job: JsonObject) -> JsonObject:
    spec = job.get("spec") or {}
    policy = (spec.get("scheduling") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if isinstance(gang, dict):
        count = gang.get("minCount")
        return {"gang": {"minCount": int(count) if count else max(1, int(spec.get("parallelism", 1) or 0))}}
    return {"basic": {}}


def _managed(job: JsonObject) -> bool:
    template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    if template_spec.get("schedulingGroup"):
        return False
    owners = [r for r in (job["metadata"].get("ownerReferences") or []) if r.get("controller")]
    return all(r.get("kind") == "CronJob" and r.get("apiVersion") == "batch/v1" for r in owners)


def pod_group_for(
    store: Objects, job: JsonObject, job_rt: ResourceType, has_pods: Callable[[], bool],
    owner_ref: Callable[[JsonObject, ResourceType], JsonObject],
) -> tuple[str, JsonObject] | None:
    """The PodGroup a new pod of ``job`` joins (its name, and the pod's owner reference to it),
    made with its Workload when the Job has no pods yet (``has_pods``, asked only then); None
    when the controller makes none."""
    if Gate.WORKLOAD_WITH_JOB not in store.feature_gates or not _managed(job):
        return None
    meta = job["metadata"]
    namespace, suffix = meta.get("namespace"), _hash(meta["uid"])
    workload_name = f"{meta['name']}-{suffix}"
    group_name = f"{workload_name}-{TEMPLATE}-{suffix}"
    if not store.exists(POD_GROUP, group_name, namespace):
        if has_pods():
            return None
        policy = _policy(job)
        if not store.exists(WORKLOAD, workload_name, namespace):
            store.create_stored(WORKLOAD, {
                "apiVersion": WORKLOAD.api_version, "kind": WORKLOAD.kind,
                "metadata": {"name": workload_name, "namespace": namespace, "ownerReferences": [owner_ref(job, job_rt)]},
                "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": meta["name"]},
                         "podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": policy}]},
            }, namespace)
        workload = store.get_stored(WORKLOAD, workload_name, namespace).obj
        workload_owner = {**owner_ref(workload, WORKLOAD), "controller": False}
        try:
            store.create_stored(POD_GROUP, {
                "apiVersion": POD_GROUP.api_version, "kind": POD_GROUP.kind,
                "metadata": {"name": group_name, "namespace": namespace,
                             "ownerReferences": [owner_ref(job, job_rt), workload_owner]},
                "spec": {"workloadRef": {"workloadName": workload_name, "templateName": TEMPLATE}, "schedulingPolicy": policy},
            }, namespace)
        except ApiError as exc:
            if exc.code != 409:
                raise
    group = store.get_stored(POD_GROUP, group_name, namespace).obj
    return group_name, {**owner_ref(group, POD_GROUP), "controller": False}
