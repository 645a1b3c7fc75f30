"""What stops the kubelet from starting a pod because of its resource claims: its DRA manager.

The kubelet stand-in (:mod:`usher.sandbox.kubelet`) asks :func:`claim_problem` before it starts
an admitted pod, after the volumes. Every ``spec.resourceClaims`` entry must name a claim that
exists (for a template, the one the resourceclaim controller recorded in
``status.resourceClaimStatuses``), that lists the pod in ``status.reservedFor`` (so it is
allocated: the API refuses a reservation without an allocation), and whose devices the drivers
on this node prepare: NVIDIA's (:func:`usher.sandbox.gpu_driver.prepare_problem`) refuses another
node's GPUs, unpublished ones and ones another claim holds; a driver not running on the node
cannot prepare anything. Until then the pod stays ``Pending`` (containers ``ContainerCreating``)
with the kubelet's ``FailedPrepareDynamicResources`` warning "Failed to prepare dynamic
resources: ...", and the kubelet tries again when a claim or slice changes.
"""

from __future__ import annotations

from typing import Any

from .dra import NVIDIA_DRIVER, allocation, reserved_for
from .dra_controller import claim_name, pod_claims
from .gpu_driver import prepare_problem
from .kinds import RESOURCE_TYPES, Resource
from .nodefit import term_matches
from .store import ApiError, Store
from .volume_manager import VolumeProblem

JsonObject = dict[str, Any]

CLAIM_RT = RESOURCE_TYPES[Resource.RESOURCECLAIMS]
REASON = "FailedPrepareDynamicResources"


def _problem(message: str) -> VolumeProblem:
    return VolumeProblem(REASON, f"Failed to prepare dynamic resources: {message}", "kubelet")


def claim_problem(store: Store, pod: JsonObject, node: JsonObject) -> VolumeProblem | None:
    """Why the pod's claims are not ready on ``node`` (None: every one is prepared)."""
    meta = pod["metadata"]
    ns, pod_name, uid = meta.get("namespace", "default"), meta["name"], meta.get("uid", "")
    for entry in pod_claims(pod):
        name = claim_name(pod, entry)
        if name is None:
            return _problem(f"prepare resource claim: pod {pod_name} ({uid}), spec.resourceClaims "
                            f"{entry.get('name', '')}: ResourceClaim not created yet")
        try:
            claim = store.get_stored(CLAIM_RT, name, ns).obj
        except ApiError:
            return _problem(f"failed to fetch ResourceClaim {name} referenced by pod {pod_name}: "
                            f'resourceclaims.resource.k8s.io "{name}" not found')
        cuid = claim["metadata"].get("uid", "")
        if not any(r.get("resource") == "pods" and r.get("uid") == uid for r in reserved_for(claim)):
            return _problem(f"pod {pod_name} ({uid}) is not allowed to use ResourceClaim {name} ({cuid}): "
                            "not reserved for the pod")
        alloc = allocation(claim) or {}
        selector = alloc.get("nodeSelector")
        terms = (selector or {}).get("nodeSelectorTerms") or []
        if selector is not None and not any(isinstance(t, dict) and term_matches(t, node) for t in terms):
            return _problem(f"ResourceClaim {ns}/{name} is allocated for other nodes: its nodeSelector does not "
                            f"match node {node['metadata']['name']}")
        for driver in sorted({r.get("driver", "") for r in (alloc.get("devices") or {}).get("results") or []
                              if isinstance(r, dict)}):
            if driver != NVIDIA_DRIVER:
                return _problem(f"NodePrepareResources failed for ResourceClaim {ns}/{name}: failed to get gRPC "
                                f"client for driver {driver}: plugin name {driver} not found in the list of "
                                "registered DRA plugins")
        refused = prepare_problem(store, claim, node)
        if refused is not None:
            return _problem(f"NodePrepareResources failed for ResourceClaim {ns}/{name}: error preparing devices "
                            f"for claim {cuid}: prepare devices failed: {refused}")
    return None
