"""The Workload API as Kubernetes 1.37 serves it (KEP-4671 and KEP-5832, ``scheduling.k8s.io/v1beta1``).

From 1.36 a ``Workload`` only holds templates (``spec.podGroupTemplates[]``: a DNS-label
``name`` and a ``schedulingPolicy`` of exactly one of ``basic: {}`` or ``gang: {minCount}``),
and every runtime instance of a group is a ``PodGroup`` of its own: ``spec.workloadRef``
(``workloadName``, ``templateName``: the template it was made from), its own copy of
``spec.schedulingPolicy``, and a ``status`` (subresource) whose conditions the scheduler writes
(``PodGroupInitiallyScheduled``, ``DisruptionTarget``). A pod joins a PodGroup with
``spec.schedulingGroup.podGroupName``; 1.37's pod has no ``workloadRef`` any more.

The sandbox serves one release's shape at a time, as a real API server does: 1.35's
``v1alpha1`` Workload by default (:mod:`.workload_api`), or once :func:`serve` is called 1.36's
``v1alpha2`` (:mod:`.workload_api_alpha2`) or 1.37's ``v1beta1`` Workload and PodGroup (the 1.35
kind is then not served). The schemas come from
the official client's ``V1beta1Workload`` and ``V1beta1PodGroup`` models (:data:`MODELS`,
registered in :mod:`.schemas`); what kube-apiserver's validation adds to them, with its field
paths, is :func:`validate` (Workload, PodGroup) and :func:`validate_scheduling_group` (a pod's
or pod template's ``schedulingGroup``). Features behind gates that are off by default in 1.37
(composite pod groups) are refused as the API server refuses a field its gate disables.
The checks both shapes share are in :mod:`.workload_rules`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from enum import StrEnum
from typing import Any, Protocol

from .kinds import Resource, ResourceType
from . import workload_api_alpha2 as alpha2
from .object_validation import ErrorType, FieldError, go_quote
from .workload_api import MAX_POD_GROUPS
from .workload_rules import gated, label_field, scheduling_policy, subdomain_field

GROUP, VERSION = "scheduling.k8s.io", "v1beta1"
POD_GROUPS = "podgroups"


class Release(StrEnum):
    """Which Kubernetes release's Workload API the sandbox serves."""

    V1_35 = "1.35"
    V1_36 = "1.36"
    V1_37 = "1.37"


class Gate(StrEnum):
    """Feature gates of the Workload API's integrations that a 1.37 cluster has off by default."""

    WORKLOAD_WITH_JOB = "WorkloadWithJob"
    """The Job controller makes a Workload and PodGroup per Job (:mod:`.job_podgroup`)."""


class Condition(StrEnum):
    """The PodGroup's well-known condition types and reasons (``scheduling/v1beta1``)."""

    INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
    DISRUPTION_TARGET = "DisruptionTarget"
    UNSCHEDULABLE = "Unschedulable"
    SCHEDULER_ERROR = "SchedulerError"


WORKLOAD = ResourceType(Resource.WORKLOADS, GROUP, VERSION, "Workload", True, tracks_generation=True)
POD_GROUP = ResourceType(POD_GROUPS, GROUP, VERSION, "PodGroup", True, status_subresource=True, tracks_generation=True)

MODELS: dict[tuple[str, str, str], str] = {
    (GROUP, VERSION, "Workload"): "V1beta1Workload",
    (GROUP, VERSION, "PodGroup"): "V1beta1PodGroup",
}
"""(group, version, kind) -> the official client's model of the kind."""


class Serving(Protocol):
    """What :func:`serve` needs of a ``Store`` (named so, not imported: the store reaches this
    module through its validation)."""

    feature_gates: set[str]

    def serve_builtin(self, types: list[ResourceType]) -> None: ...


def serve(store: Serving, release: Release, gates: Collection[Gate] = ()) -> None:
    """Make ``store`` serve ``release``'s Workload API (1.35's is what a new store serves), with
    ``gates`` on (1.37 only)."""
    if release is Release.V1_36:
        store.serve_builtin([alpha2.WORKLOAD])
        store.serve_builtin([alpha2.POD_GROUP])
    elif release is Release.V1_37:
        store.serve_builtin([WORKLOAD])
        store.serve_builtin([POD_GROUP])
        store.feature_gates.update(gates)
    if gates and release is not Release.V1_37:
        raise ValueError(f"feature gates {sorted(gates)} need release {Release.V1_37}")


# ------------------------------------------------------------------ validation


def validate_workload(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    """A 1.37 Workload: its pod group templates and controller reference."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    yield from gated(spec, "compositePodGroupTemplates", "CompositePodGroup", "spec")
    ref = spec.get("controllerRef")
    if isinstance(ref, dict):
        for field in ("kind", "name"):
            if not ref.get(field):
                yield FieldError(ErrorType.REQUIRED, f"spec.controllerRef.{field}", "")
    templates = spec.get("podGroupTemplates") or []
    if not templates:
        yield FieldError(ErrorType.REQUIRED, "spec.podGroupTemplates", "")
    elif len(templates) > MAX_POD_GROUPS:
        yield FieldError(ErrorType.TOO_MANY, "spec.podGroupTemplates", f"must have at most {MAX_POD_GROUPS} items",
                         str(len(templates)))
    seen: set[str] = set()
    for i, template in enumerate(templates):
        path = f"spec.podGroupTemplates[{i}]"
        template = template if isinstance(template, dict) else {}
        yield from label_field(template.get("name"), f"{path}.name")
        name = str(template.get("name") or "")
        if name and name in seen:
            yield FieldError(ErrorType.DUPLICATE, f"{path}.name", "", go_quote(name))
        seen.add(name)
        yield from scheduling_policy(template.get("schedulingPolicy"), f"{path}.schedulingPolicy")
        yield from gated(template, "schedulingConstraints", "TopologyAwareWorkloadScheduling", path)


def validate_pod_group(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    """A 1.37 PodGroup: the template it names and its scheduling policy."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    yield from gated(spec, "parentCompositePodGroupName", "CompositePodGroup", "spec")
    yield from gated(spec, "schedulingConstraints", "TopologyAwareWorkloadScheduling", "spec")
    ref = spec.get("workloadRef")
    if isinstance(ref, dict):
        yield from subdomain_field(ref.get("workloadName"), "spec.workloadRef.workloadName")
        yield from label_field(ref.get("templateName"), "spec.workloadRef.templateName")
    if "schedulingPolicy" not in spec:
        yield FieldError(ErrorType.REQUIRED, "spec.schedulingPolicy", "")
    else:
        yield from scheduling_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy")


def validate(rt: ResourceType, obj: Mapping[str, Any]) -> list[FieldError] | None:
    """The errors of a 1.36 or 1.37 Workload or PodGroup; None for any other kind."""
    if (older := alpha2.validate(rt, obj)) is not None:
        return older
    if rt.group != GROUP or rt.version != VERSION:
        return None
    if rt.kind == WORKLOAD.kind:
        return list(validate_workload(obj))
    if rt.kind == POD_GROUP.kind:
        return list(validate_pod_group(obj))
    return None


def validate_scheduling_group(spec: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    """A pod spec's ``schedulingGroup``: exactly one field, ``podGroupName``, a DNS subdomain."""
    group = spec.get("schedulingGroup")
    if isinstance(group, dict):
        yield from subdomain_field(group.get("podGroupName"), f"{path}.schedulingGroup.podGroupName")
