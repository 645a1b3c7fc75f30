"""The CustomResourceDefinitions of the operators AI teams run, served by the sandbox from the start.

With the controller stand-ins on (``FakeApiServer(controllers=True)``, ``usher sandbox``),
:func:`install` creates these CRDs in the store, as a cluster with the operators installed has
them, so ``kubectl apply -f pytorchjob.yaml`` works at once; :mod:`usher.sandbox.operators` then
runs the objects. Each CRD has the real group, version, kind, plural, singular, list kind, short
names, categories and scope, the ``status`` subresource, and printer columns taken from the
real CRD where they are plain paths. The schema is ``x-kubernetes-preserve-unknown-fields``
(any spec is accepted and kept; the real CRDs validate it field by field).

- ``jobsets.jobset.x-k8s.io`` v1alpha2 (JobSet v0.7/v0.8)
- ``pytorchjobs``, ``tfjobs``, ``mpijobs.kubeflow.org`` v1 (Kubeflow training-operator v1.7/v1.8)
- ``rayclusters``, ``rayjobs.ray.io`` v1 (KubeRay v1.1/v1.2)
- ``leaderworkersets.leaderworkerset.x-k8s.io`` v1 (LWS v0.5/v0.6)
- ``podgroups.scheduling.volcano.sh`` v1beta1 (Volcano v1.9; served only, no controller)
- ``trainjobs.trainer.kubeflow.org`` v1alpha1 (Kubeflow Trainer v2; served only, no controller)

``podgroups.scheduling.x-k8s.io`` (scheduler-plugins' coscheduling) is a built-in of the sandbox
already (:data:`usher.sandbox.kinds.BUILTIN_TYPES`), so it is not created again.
"""

from __future__ import annotations

from typing import Any

from .kinds import Resource
from .store import ApiError, Store

JsonObject = dict[str, Any]

_SCHEMA: JsonObject = {
    "openAPIV3Schema": {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
}


def _column(name: str, path: str, type_: str = "string", priority: int = 0, description: str = "") -> JsonObject:
    column: JsonObject = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        column["priority"] = priority
    if description:
        column["description"] = description
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "date")


def crd(group: str, version: str, kind: str, plural: str, *, short_names: tuple[str, ...] = (),
        categories: tuple[str, ...] = (), columns: tuple[JsonObject, ...] = ()) -> JsonObject:
    """A namespaced CRD with one served and stored version, the status subresource and an open schema."""
    names: JsonObject = {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    version_spec: JsonObject = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": _SCHEMA,
        "subresources": {"status": {}},
    }
    if columns:
        version_spec["additionalPrinterColumns"] = list(columns)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": "Namespaced", "versions": [version_spec]},
    }


_KUBEFLOW_COLUMNS = (_column("State", ".status.conditions[-1].type"), _AGE)

OPERATOR_CRDS: tuple[JsonObject, ...] = (
    crd("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", columns=(
        _column("TerminalState", ".status.terminalState", description="Final state of JobSet"),
        _column("Restarts", ".status.restarts", description="Number of restarts"),
        _column("Suspended", ".spec.suspend", description="JobSet suspended"),
        _AGE,
    )),
    crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", columns=_KUBEFLOW_COLUMNS),
    crd("kubeflow.org", "v1", "TFJob", "tfjobs", columns=_KUBEFLOW_COLUMNS),
    crd("kubeflow.org", "v1", "MPIJob", "mpijobs", columns=_KUBEFLOW_COLUMNS),
    crd("ray.io", "v1", "RayCluster", "rayclusters", categories=("all",), columns=(
        _column("desired workers", ".status.desiredWorkerReplicas", "integer"),
        _column("available workers", ".status.availableWorkerReplicas", "integer"),
        _column("gpus", ".status.desiredGPU"),
        _column("status", ".status.state"),
        _AGE,
        _column("head pod IP", ".status.head.podIP", priority=1),
        _column("head service IP", ".status.head.serviceIP", priority=1),
    )),
    crd("ray.io", "v1", "RayJob", "rayjobs", categories=("all",), columns=(
        _column("job status", ".status.jobStatus"),
        _column("deployment status", ".status.jobDeploymentStatus"),
        _column("ray cluster name", ".status.rayClusterName"),
        _column("start time", ".status.startTime", "string"),
        _column("end time", ".status.endTime", "string"),
        _AGE,
    )),
    crd("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", short_names=("lws",)),
    # served only: no stand-in runs it (its JobSet would be made by the Kubeflow Trainer)
    crd("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    crd("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", short_names=("pg", "podgroup-v1beta1"), columns=(
        _column("STATUS", ".status.phase"),
        _column("minMember", ".spec.minMember", "integer"),
        _column("RUNNINGS", ".status.running", "integer"),
        _AGE,
        _column("QUEUE", ".spec.queue", priority=1),
    )),
)


def install(store: Store) -> list[str]:
    """Create every CRD of :data:`OPERATOR_CRDS` the store does not serve yet; the names created."""
    created = []
    for definition in OPERATOR_CRDS:
        name = definition["metadata"]["name"]
        if store.exists(Resource.CUSTOMRESOURCEDEFINITIONS, name):
            continue
        try:
            store.resource_type(name)
            continue  # served already (a built-in of the same group resource)
        except ApiError:
            pass
        store.create(Resource.CUSTOMRESOURCEDEFINITIONS, definition)
        created.append(name)
    return created
