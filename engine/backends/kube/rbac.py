"""The Kubernetes API permissions of the usher controller and of the console's operators.

This is the one list of what usher may do to a cluster. The controller's API calls must stay
within ``CONTROLLER_PERMISSIONS``: a call that needs anything else needs a new entry here and the
matching rule in ``deploy/`` (the tests in ``tests/kube/test_deploy.py`` hold the manifests to
exactly this list, in both directions, so the RBAC stays least privilege). ``OPERATOR_PERMISSIONS``
is the same for people who run the console against a cluster (the ``usher-operator`` ClusterRole),
and ``AGENT_PERMISSIONS`` for the node agent (``usher agent``, the DaemonSet in ``deploy/70-agent.yaml``).

A permission names an API group (``""`` is core v1), a resource (``pods/binding`` for a
subresource), one verb and a scope: ``CLUSTER`` is granted by a ClusterRole, for cluster-scoped
objects and for namespaced ones in every namespace; ``NAMESPACE`` is granted by a Role in
``USHER_NAMESPACE`` only. Where ``names`` is not empty the rule carries ``resourceNames``, and a
client must ask for that object by name: ``get``/``update`` on it, and ``list``/``watch`` with the
field selector ``metadata.name=<name>`` (Kubernetes authorises a named list or watch only so).
``create`` can never be restricted by name, since the object does not exist yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .owners import OWNER_RESOURCES

USHER_NAMESPACE = "usher-system"
"""Where the controller runs, holds its leader Lease and reads its queue config."""

SERVICE_ACCOUNT = "usher"
"""The controller's service account, in ``USHER_NAMESPACE``."""

QUEUES_CONFIGMAP = "usher-queues"
"""The ConfigMap that holds the queue config (key ``QUEUES_CONFIG_KEY``); never created by usher."""

QUEUES_CONFIG_KEY = "queues.yaml"

DECISIONS_CONFIGMAP = "usher-decisions"
"""The ConfigMap that holds the operators' decisions, approve and hold (key ``DECISIONS_CONFIG_KEY``):
written by consoles (the ``usher-operator`` role), only read by the controller; shipped empty by
``deploy/31-configmap-decisions.yaml``, never created by usher."""

DECISIONS_CONFIG_KEY = "decisions.yaml"

LEADER_LEASE = "usher-controller"
"""The coordination.k8s.io Lease the controller replicas elect their leader on."""

AGENT_SERVICE_ACCOUNT = "usher-agent"
"""The node agent's service account, in ``USHER_NAMESPACE``."""


class Verb(StrEnum):
    """The Kubernetes API verbs as RBAC rules spell them."""

    GET = "get"
    LIST = "list"
    WATCH = "watch"
    CREATE = "create"
    UPDATE = "update"
    PATCH = "patch"
    DELETE = "delete"
    DELETE_COLLECTION = "deletecollection"


class Scope(StrEnum):
    """Where a permission holds: cluster-wide (ClusterRole) or in ``USHER_NAMESPACE`` (Role)."""

    CLUSTER = "cluster"
    NAMESPACE = "namespace"


@dataclass(frozen=True, slots=True)
class Permission:
    """One verb on one resource, in one scope, optionally on named objects only."""

    group: str
    """API group; ``""`` is the core group."""
    resource: str
    """Plural resource name, ``resource/subresource`` for a subresource."""
    verb: Verb
    scope: Scope
    names: tuple[str, ...] = ()
    """Object names the permission is limited to (RBAC ``resourceNames``); empty: any object."""


def _grants(
    group: str, resource: str, verbs: tuple[Verb, ...], scope: Scope, names: tuple[str, ...] = ()
) -> tuple[Permission, ...]:
    return tuple(Permission(group, resource, verb, scope, names) for verb in verbs)


_READ = (Verb.GET, Verb.LIST, Verb.WATCH)
_COORDINATION = "coordination.k8s.io"
_STORAGE = "storage.k8s.io"
_RESOURCE = "resource.k8s.io"
#: the DRA kinds usher watches: a pod's claims, their templates, device classes and the devices
_DRA_READ = ("resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices")
#: (group, plural) of every owner kind usher reads, once (both MPIJob versions are one resource)
_OWNER_RESOURCES = tuple(dict.fromkeys((r.group, r.plural) for r in OWNER_RESOURCES))

_LIST_WATCH = (Verb.LIST, Verb.WATCH)

CONTROLLER_PERMISSIONS: tuple[Permission, ...] = (
    # Nodes: capacity, labels, NVLink and GPU-health annotations (informer: list and watch only).
    *_grants("", "nodes", _LIST_WATCH, Scope.CLUSTER),
    # Namespaces (informer: list and watch only): the queues that select namespaces by label.
    *_grants("", "namespaces", _LIST_WATCH, Scope.CLUSTER),
    # Pods: the queue's jobs and what runs (informers); get to read a pod back after an
    # ambiguous bind. Never patched: what usher writes on a pod is its binding and its status.
    *_grants("", "pods", _READ, Scope.CLUSTER),
    *_grants("", "pods/binding", (Verb.CREATE,), Scope.CLUSTER),
    *_grants("", "pods/eviction", (Verb.CREATE,), Scope.CLUSTER),
    *_grants("", "pods/status", (Verb.PATCH,), Scope.CLUSTER),
    # Events on pods and nodes: why a job waits, what was preempted and by whom (a repeat is
    # counted on the Event already there, by a patch, as kube's own components do).
    *_grants("", "events", (Verb.CREATE, Verb.PATCH), Scope.CLUSTER),
    # PodDisruptionBudgets (informer: list and watch only): a preemption or a move whose evictions
    # a budget would not all allow is not started.
    *_grants("policy", "poddisruptionbudgets", _LIST_WATCH, Scope.CLUSTER),
    # The workloads that own pods (Job, JobSet, PyTorchJob, RayCluster, LeaderWorkerSet, ...) and
    # PodGroups, and Kubernetes' Workloads: a gang's size and minimum (informers: list and watch
    # only, never written).
    *(p for group, plural in _OWNER_RESOURCES for p in _grants(group, plural, _LIST_WATCH, Scope.CLUSTER)),
    # The Workload API's runtime PodGroups (1.36, 1.37): the PodGroupScheduled /
    # PodGroupInitiallyScheduled condition a user reads on the gang (podgroup_status).
    *_grants("scheduling.k8s.io", "podgroups/status", (Verb.PATCH,), Scope.CLUSTER),
    # Storage (informers: list and watch): a pod's claims, the volumes they are bound to, the
    # classes that provision them, the room CSI drivers report and each node's attach limits
    # decide where the pod may go.
    *_grants("", "persistentvolumeclaims", _LIST_WATCH, Scope.CLUSTER),
    *_grants("", "persistentvolumes", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "storageclasses", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "csinodes", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "csistoragecapacities", _LIST_WATCH, Scope.CLUSTER),
    # CSIDrivers: whether a driver asks schedulers to check its CSIStorageCapacities.
    *_grants(_STORAGE, "csidrivers", _LIST_WATCH, Scope.CLUSTER),
    # A gang's PreBind: volume.kubernetes.io/selected-node on the claims to provision (set, and
    # withdrawn when the gang does not bind), a claimRef on a static volume chosen for a claim;
    # the provisioner's ProvisioningFailed Event on a claim that failed, for its words.
    *_grants("", "persistentvolumeclaims", (Verb.PATCH,), Scope.CLUSTER),
    *_grants("", "persistentvolumes", (Verb.PATCH,), Scope.CLUSTER),
    *_grants("", "events", (Verb.LIST,), Scope.CLUSTER),
    # Dynamic Resource Allocation (informers: list and watch): the GPUs a pod asks through its
    # ResourceClaims (or the templates they are made from), the DeviceClasses' selectors and the
    # devices nodes' ResourceSlices publish.
    *(p for plural in _DRA_READ for p in _grants(_RESOURCE, plural, _LIST_WATCH, Scope.CLUSTER)),
    # A gang's PreBind: each claim's status.allocation and status.reservedFor; their undo reads
    # the claim afresh (get) so that it takes out only the gang's own pods.
    *_grants(_RESOURCE, "resourceclaims/status", (Verb.PATCH,), Scope.CLUSTER),
    # and the delete-protection finalizer put on a claim before it is allocated (a merge patch)
    *_grants(_RESOURCE, "resourceclaims", (Verb.GET, Verb.PATCH), Scope.CLUSTER),
    # The queue config, read only (an informer on the one object: list and watch by name);
    # operators change it, with their own credentials (OPERATOR_PERMISSIONS).
    *_grants("", "configmaps", _LIST_WATCH, Scope.NAMESPACE, (QUEUES_CONFIGMAP,)),
    # The operators' decisions (approve, hold), read only, the same way; consoles write them.
    *_grants("", "configmaps", _LIST_WATCH, Scope.NAMESPACE, (DECISIONS_CONFIGMAP,)),
    # Leader election.
    *_grants(_COORDINATION, "leases", (Verb.GET, Verb.UPDATE), Scope.NAMESPACE, (LEADER_LEASE,)),
    *_grants(_COORDINATION, "leases", (Verb.CREATE,), Scope.NAMESPACE),
)
"""Every API call the headless controller (``usher --no-ui``) makes must be allowed by one of
these, and each is used by it (``tests/kube/test_sandbox_rbac.py`` runs it as deployed and fails
on a grant it never uses). Operator commands are not the controller's: a console carries them
out with its operator's own credentials (``OPERATOR_PERMISSIONS``)."""

OPERATOR_PERMISSIONS: tuple[Permission, ...] = (
    # Read what the controller reads (the Lease: to show which replica leads).
    *_grants("", "nodes", _READ, Scope.CLUSTER),
    *_grants("", "pods", _READ, Scope.CLUSTER),
    *_grants("", "namespaces", _LIST_WATCH, Scope.CLUSTER),
    *(p for group, plural in _OWNER_RESOURCES for p in _grants(group, plural, _LIST_WATCH, Scope.CLUSTER)),
    *_grants("", "persistentvolumeclaims", _LIST_WATCH, Scope.CLUSTER),
    *_grants("", "persistentvolumes", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "storageclasses", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "csinodes", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "csistoragecapacities", _LIST_WATCH, Scope.CLUSTER),
    *_grants(_STORAGE, "csidrivers", _LIST_WATCH, Scope.CLUSTER),
    *(p for plural in _DRA_READ for p in _grants(_RESOURCE, plural, _LIST_WATCH, Scope.CLUSTER)),
    *_grants("", "configmaps", _READ, Scope.CLUSTER, (QUEUES_CONFIGMAP,)),
    *_grants("", "configmaps", _READ, Scope.CLUSTER, (DECISIONS_CONFIGMAP,)),
    *_grants(_COORDINATION, "leases", _READ, Scope.CLUSTER, (LEADER_LEASE,)),
    # Act: cordon/drain nodes, evict (preempt, drain), set quotas, approve and hold (the
    # decisions ConfigMap, updated with optimistic concurrency), record why.
    *_grants("", "nodes", (Verb.PATCH,), Scope.CLUSTER),
    *_grants("", "pods/eviction", (Verb.CREATE,), Scope.CLUSTER),
    *_grants("", "configmaps", (Verb.UPDATE,), Scope.CLUSTER, (QUEUES_CONFIGMAP,)),
    *_grants("", "configmaps", (Verb.UPDATE,), Scope.CLUSTER, (DECISIONS_CONFIGMAP,)),
    *_grants("", "events", (Verb.CREATE, Verb.PATCH, *_LIST_WATCH), Scope.CLUSTER),
    # The console asks the API server which actions the user may take (to grey out the rest).
    *_grants("authorization.k8s.io", "selfsubjectaccessreviews", (Verb.CREATE,), Scope.CLUSTER),
)
"""What the ``usher-operator`` ClusterRole grants to people who run the console.

All of it is cluster scope, one ClusterRole: the ConfigMap and Lease rules are limited by name
(``usher-queues``, ``usher-decisions``, ``usher-controller``), which exist only in
``USHER_NAMESPACE``. Pods are never patched: an operator's approve and hold live in the
decisions ConfigMap, where a tenant cannot write them.
"""

AGENT_PERMISSIONS: tuple[Permission, ...] = (
    # Its Node's usher/nvlink, usher/gpu-health and usher/gpu-xids annotations, as a merge patch;
    # the Node read once when it starts, for the XIDs seen before (usher/gpu-xids).
    *_grants("", "nodes", (Verb.GET, Verb.PATCH), Scope.CLUSTER),
)
"""Every API call the node agent makes. RBAC cannot limit it to the agent's own Node (only the
kubelet's Node authorizer ties a credential to a node), so the rule names no object."""
