"""Gangs declared with Kubernetes' own Workload API (KEP-4671, ``scheduling.k8s.io/v1alpha1``, 1.35).

A ``Workload`` lists pod groups (``spec.podGroups[]``: a ``name`` and a ``policy`` of either
``basic: {}`` or ``gang: {minCount}``); a pod joins one with ``spec.workloadRef`` (``name`` of the
Workload in the pod's namespace, ``podGroup``, and an optional ``podGroupReplicaKey``). As
kube-scheduler's GangScheduling plugin reads it:

- a ``gang`` group is one gang per replica key: pods of the same Workload and pod group with
  another ``podGroupReplicaKey`` are another gang (key
  ``<ns>/Workload/<workload>/<pod group>[/<replica key>]``). ``minCount`` is the gang: the group
  may start once that many of its pods can be placed together, and pods past it are placed as
  they fit, as for a Volcano PodGroup's ``minMember`` (the Workload holds no total).
- a ``basic`` group is scheduled pod by pod: each pod is a gang of one.
- a pod naming a Workload that does not exist, or a pod group the Workload does not have, waits
  (kube-scheduler keeps such a pod out of its queue), with words that name what is missing; it
  is decided again when the Workload appears or changes.

From 1.36 (KEP-5832) the Workload only holds templates (``spec.podGroupTemplates``) and each
runtime instance of a group is a ``PodGroup`` object of its own (``scheduling.k8s.io/v1alpha2`` in
1.36, ``v1beta1`` in 1.37) that a pod names with ``spec.schedulingGroup.podGroupName``. The
PodGroup carries its own copy of the policy (``spec.schedulingPolicy``: ``basic: {}`` or
``gang: {minCount}``), so usher reads the PodGroup alone (``pod_group_gang``): each PodGroup is a
gang (key ``<ns>/SchedulingGroup/<pod group>``, replicas of a template being separate PodGroups),
``minCount`` its minimum as for 1.35; a basic PodGroup is pod by pod; a pod naming a PodGroup that
is not there yet waits naming it.

This module reads the pod and the Workload only; ``owners.infer_group`` calls it (after usher's
own labels, before the other pod-group conventions) and turns its answer into a ``GroupSpec``.
It imports nothing of ``owners`` so that ``owners`` may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha1"
PLURAL = "workloads"
KIND = "Workload"
#: the pod's field that names its Workload and pod group
REF_FIELD = "workloadRef"
#: the 1.36/1.37 pod's field that names its PodGroup (``pod_group_gang``)
SCHEDULING_GROUP_FIELD = "schedulingGroup"
#: the served versions of the runtime PodGroup (1.36, 1.37); the objects are the same resource
POD_GROUP_VERSIONS = ("v1alpha2", "v1beta1")
POD_GROUP_PLURAL = "podgroups"
#: what a gang of a PodGroup is keyed by: ``<ns>/SchedulingGroup/<pod group>``
SCHEDULING_GROUP_KIND = "SchedulingGroup"


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """What a pod's ``spec.workloadRef`` says."""

    name: str
    pod_group: str
    replica_key: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadGang:
    """The gang a Workload reference puts a pod in, or why it cannot be told yet."""

    #: ``<ns>/Workload/<workload>/<pod group>[/<replica key>]``; for a basic group, None (the pod alone)
    key: str | None
    #: ``minCount`` of a gang group; 1 for a basic group; None when it cannot be told
    size: int | None
    #: why not: names the missing Workload, pod group or malformed field
    problem: str | None = None
    #: the problem may resolve by itself (the Workload or pod group is not there yet)
    waiting: bool = False


def workload_ref(pod: Mapping[str, Any]) -> WorkloadRef | None:
    """The pod's ``spec.workloadRef``, or None when it has none. The API server has checked its
    fields (a DNS-subdomain name, DNS-label group and key) and keeps them immutable."""
    ref = (pod.get("spec") or {}).get(REF_FIELD)
    if not isinstance(ref, dict):
        return None
    return WorkloadRef(str(ref.get("name") or ""), str(ref.get("podGroup") or ""), str(ref.get("podGroupReplicaKey") or ""))


def scheduling_group(pod: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod names with ``spec.schedulingGroup.podGroupName`` (1.36/1.37), or None
    when it has no ``schedulingGroup``; ``""`` when it has one without a name (the API server
    refuses that; usher says so rather than placing the pod alone)."""
    group = (pod.get("spec") or {}).get(SCHEDULING_GROUP_FIELD)
    if not isinstance(group, dict):
        return None
    return str(group.get("podGroupName") or "")


def pod_group_gang(
    name: str, namespace: str, lookup: Callable[[str], dict[str, Any] | None], readable: bool
) -> WorkloadGang:
    """The gang of a pod in ``namespace`` whose ``spec.schedulingGroup.podGroupName`` is ``name``.
    ``lookup`` reads a ``scheduling.k8s.io`` PodGroup of that namespace by name (None: not known);
    ``readable``: whether usher can read PodGroups of ``scheduling.k8s.io`` on this cluster."""
    where = f"{namespace}/{name}"
    key = f"{namespace}/{SCHEDULING_GROUP_KIND}/{name}"
    field = f"spec.{SCHEDULING_GROUP_FIELD}.podGroupName"
    if not name:
        return WorkloadGang(key, None, f"the pod's spec.{SCHEDULING_GROUP_FIELD} has no podGroupName")
    versions = " or ".join(f"{GROUP}/{v}" for v in POD_GROUP_VERSIONS)
    if not readable:
        return WorkloadGang(key, None, f"the pod's {field} names PodGroup {where}, but usher cannot read {versions} "
                                       "PodGroups on this cluster")
    obj = lookup(name)
    if obj is None:
        return WorkloadGang(key, None, f"the pod's {field} names PodGroup {where}, which does not exist (yet); its "
                                       "spec.schedulingPolicy gives the gang's size", waiting=True)
    policy = (obj.get("spec") or {}).get("schedulingPolicy") or {}
    if isinstance(policy.get("basic"), dict):
        return WorkloadGang(None, 1)
    gang = policy.get("gang")
    count = gang.get("minCount") if isinstance(gang, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return WorkloadGang(key, None, f"PodGroup {where} has spec.schedulingPolicy.gang.minCount {count!r}, not a "
                                       "positive whole number")
    return WorkloadGang(key, count)


def workload_gang(
    ref: WorkloadRef, namespace: str, lookup: Callable[[str], dict[str, Any] | None], readable: bool
) -> WorkloadGang:
    """The gang of a pod in ``namespace`` whose ``spec.workloadRef`` is ``ref``. ``lookup`` reads
    a Workload of that namespace by name (None: not known); ``readable``: whether usher can read
    Workloads on this cluster at all."""
    where = f"{namespace}/{ref.name}"
    key = f"{namespace}/{KIND}/{ref.name}/{ref.pod_group}" + (f"/{ref.replica_key}" if ref.replica_key else "")
    if not readable:
        return WorkloadGang(key, None, f"the pod's spec.{REF_FIELD} names Workload {where}, but usher cannot read "
                                       f"{GROUP}/{VERSION} Workloads on this cluster")
    workload = lookup(ref.name)
    if workload is None:
        return WorkloadGang(key, None, f"the pod's spec.{REF_FIELD}.name names Workload {where}, which does not exist "
                                       "(yet); its pod group's policy gives the gang's size", waiting=True)
    groups = (workload.get("spec") or {}).get("podGroups") or []
    names = [g.get("name") for g in groups if isinstance(g, dict)]
    for i, group in enumerate(groups):
        if not isinstance(group, dict) or group.get("name") != ref.pod_group:
            continue
        policy = group.get("policy") or {}
        if isinstance(policy.get("basic"), dict):
            return WorkloadGang(None, 1)
        gang = policy.get("gang")
        count = gang.get("minCount") if isinstance(gang, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return WorkloadGang(key, None, f"Workload {where} has spec.podGroups[{i}].policy.gang.minCount {count!r}, "
                                           "not a positive whole number")
        return WorkloadGang(key, count)
    known = ", ".join(repr(n) for n in names) or "none"
    return WorkloadGang(key, None, f"the pod's spec.{REF_FIELD}.podGroup names pod group {ref.pod_group!r}, which "
                                   f"Workload {where} does not have (its spec.podGroups: {known})", waiting=True)
