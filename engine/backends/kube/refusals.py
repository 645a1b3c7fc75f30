"""A kubelet's refusal of a pod usher bound: what it says, and what usher counted instead.

The kubelet admits a pod bound to its node only if it fits beside the pods the kubelet already
runs there (``pkg/kubelet/lifecycle/predicate.go``); else it fails the pod at once, with
``status.phase: Failed``, a ``reason`` and a ``message`` that begins ``Pod was rejected:``:

- ``OutOf<resource>`` (``OutOfcpu``, ``OutOfnvidia.com/gpu``, ``OutOfpods``, ...): ``Node didn't
  have enough resource: <resource>, requested: R, used: U, capacity: C``;
- ``NodeAffinity``, ``NodeName``, ``NodePorts``, ``TaintToleration`` (NoExecute taints only):
  ``Predicate <name> failed: <why>``;
- ``UnexpectedAdmissionError`` (a device plugin could not allocate), ``UnknownReason``,
  ``UnexpectedPredicateFailureType`` and the few other admit handlers' reasons.

usher binds only where its own count says the pod fits, so a refusal means its view of that node
is wrong (a pod its watches missed, a device the plugin lost, labels changed under it). The
controller then backs off, reads the node's pods again, and says so (``KubeController``). This
module reads the refusal (``kubelet_refusal``), keeps the metric's label set bounded
(``Refusal.label``), and puts usher's count beside the kubelet's (``usher_count``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ...state import HOST_PORT, MILLI, Node
from .objects import GPU_RESOURCE, PodView

#: how the kubelet's message of a refusal at admission begins (``rejectPod``)
REJECTED = "Pod was rejected: "
#: the reason of a refusal for want of a resource: this prefix and the resource's name
OUT_OF = "OutOf"


class AdmissionReason(StrEnum):
    """The kubelet's reasons for refusing a pod at admission, other than ``OutOf<resource>``."""

    NODE_AFFINITY = "NodeAffinity"
    NODE_NAME = "NodeName"
    NODE_PORTS = "NodePorts"
    TAINT_TOLERATION = "TaintToleration"
    UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
    UNKNOWN_REASON = "UnknownReason"
    UNEXPECTED_PREDICATE_FAILURE_TYPE = "UnexpectedPredicateFailureType"
    #: any other reason a refusal came with (an admit handler added later, a plugin's own)
    OTHER = "Other"


_OUT_OF_FIGURES = re.compile(r"requested: (\d+), used: (\d+), capacity: (\d+)")
#: what a resource name in a metric label may look like (``nvidia.com/gpu``, ``hugepages-2Mi``)
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")


@dataclass(slots=True, frozen=True)
class Refusal:
    """One pod the kubelet of ``node`` refused at admission."""

    pod: str
    node: str
    reason: str
    message: str

    @property
    def resource(self) -> str | None:
        """The resource it ran out of (``nvidia.com/gpu``), for an ``OutOf<resource>`` refusal."""
        if self.reason.startswith(OUT_OF) and _RESOURCE_NAME.fullmatch(self.reason[len(OUT_OF):]):
            return self.reason[len(OUT_OF):]
        return None

    @property
    def label(self) -> str:
        """The ``reason`` label of ``usher_bind_refusals_total``: the kubelet's reason when it is
        one of the known ones or ``OutOf`` a resource name, else ``Other`` (a bounded set)."""
        if self.resource is not None or self.reason in AdmissionReason.__members__.values():
            return self.reason
        return AdmissionReason.OTHER

    @property
    def kubelet_used(self) -> int | None:
        """What the kubelet counted as used of the resource (``used: U``), when it says."""
        found = _OUT_OF_FIGURES.search(self.message)
        return int(found.group(2)) if found else None


def kubelet_refusal(obj: dict[str, Any]) -> Refusal | None:
    """The kubelet's refusal of the pod ``obj`` at admission, or None when it was not refused
    (a pod that failed while it ran says no ``Pod was rejected``)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    node, reason, message = spec.get("nodeName"), status.get("reason"), status.get("message") or ""
    if status.get("phase") != "Failed" or not node or not reason:
        return None
    if not (message.startswith(REJECTED) or reason.startswith(OUT_OF) or reason in AdmissionReason.__members__.values()):
        return None
    meta = obj.get("metadata") or {}
    return Refusal(f"{meta.get('namespace', 'default')}/{meta.get('name')}", str(node), str(reason), message)


def usher_count(refusal: Refusal, node: Node | None, pod: PodView | None, counted: bool) -> str:
    """How usher's count of the refused resource on the node compares with the kubelet's, in
    the kubelet's units (``usher counted 1 nvidia.com/gpu in use besides this pod, the kubelet
    2``); ``counted``: the pod's own request is among usher's count (its run holds it)."""
    resource = refusal.resource
    if node is None:
        return "usher no longer knows the node"
    if resource is None:
        return f"usher found the node fit for the pod ({refusal.reason} was not in its view)"
    used = _used(node, resource)
    if used is None:
        return f"usher does not count {resource} on the node"
    if counted and pod is not None:
        used -= _asked(pod, resource)
    theirs = refusal.kubelet_used
    kubelet = f", the kubelet {theirs}" if theirs is not None else ""
    return f"usher counted {max(used, 0)} {resource} in use besides this pod{kubelet}"


def _used(node: Node, resource: str) -> int | None:
    """What usher counts as in use of ``resource`` on ``node``, in the kubelet's units."""
    if resource == GPU_RESOURCE:
        return sum(1 for i, free in enumerate(node.gpu_free) if free < MILLI and i not in node.out_of_service)
    if resource == "cpu":
        return node.cpu - node.cpu_free
    if resource == "memory":
        return node.memory - node.mem_free
    if resource in node.extra and not resource.startswith(HOST_PORT):
        return node.extra[resource] - node.extra_free.get(resource, 0)
    return None


def _asked(pod: PodView, resource: str) -> int:
    if resource == GPU_RESOURCE:
        return -(-pod.gpu_milli // MILLI)
    if resource == "cpu":
        return pod.cpu
    if resource == "memory":
        return pod.memory
    return dict(pod.extra).get(resource, 0)
