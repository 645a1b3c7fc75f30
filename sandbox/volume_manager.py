"""What stops the kubelet from starting a pod because of its volumes: the volume manager's view.

The kubelet stand-in (:mod:`usher.sandbox.kubelet`) asks :func:`volume_problem` before it starts
an admitted pod. A pod whose volumes cannot be set up stays ``Pending`` with its containers
``ContainerCreating``, and the user sees the event a cluster writes:

- a claim that does not exist, is not bound, or whose volume does not exist, or an ephemeral
  volume's claim the pod does not own: the kubelet's ``FailedMount`` "Unable to attach or mount
  volumes: unmounted volumes=[data], unattached volumes=[data], failed to process
  volumes=[data]: error processing PVC default/data: PVC is not bound" (the desired state of
  world populator's error, as ``WaitForAttachAndMount`` reports it);
- a CSI volume whose node affinity excludes the node: the attach/detach controller's
  ``FailedAttachVolume`` "AttachVolume.Attach failed for volume "pvc-1" : rpc error: code =
  FailedPrecondition desc = volume pvc-1 is not accessible from node gpu-2";
- any other volume (local, hostPath) whose node affinity excludes the node: the kubelet's
  ``FailedMount`` "MountVolume.NodeAffinity check failed for volume "local-1" : no matching
  NodeSelectorTerms";
- a ``ReadWriteOnce``/``ReadWriteOncePod`` CSI volume in use by a pod on another node:
  ``FailedAttachVolume`` "Multi-Attach error for volume "pvc-1" Volume is already used by pod(s)
  trainer-0" (pods of other namespaces are counted, not named).

When the claims or volumes change the kubelet asks again; once nothing is in the way the pod
starts. Attach limits of a node (CSINode ``allocatable.count``) are the scheduler's business and
are not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .events import EventType
from .kinds import RESOURCE_TYPES, Resource
from .nodefit import is_terminal, volume_fits_node
from .pv_controller import claim_of_volume_source
from .storage import AccessMode, ClaimPhase
from .store import ApiError, Store

JsonObject = dict[str, Any]

PVC_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMECLAIMS]
PV_RT = RESOURCE_TYPES[Resource.PERSISTENTVOLUMES]
POD_RT = RESOURCE_TYPES[Resource.PODS]
KUBELET = "kubelet"
ATTACH_DETACH = "attachdetach-controller"


@dataclass(frozen=True, slots=True)
class VolumeProblem:
    """Why a pod's volumes are not ready on its node, as the event that says it."""

    reason: str
    message: str
    component: str
    type: EventType = EventType.WARNING


def _claim_error(store: Store, pod: JsonObject, volume: JsonObject, claim_name: str) -> str | None:
    ns = pod["metadata"].get("namespace", "default")
    prefix = f"error processing PVC {ns}/{claim_name}"
    try:
        claim = store.get_stored(PVC_RT, claim_name, ns).obj
    except ApiError:
        return f'{prefix}: failed to fetch PVC from API server: persistentvolumeclaims "{claim_name}" not found'
    if isinstance(volume.get("ephemeral"), dict):
        owners = claim["metadata"].get("ownerReferences") or []
        if not any(o.get("uid") == pod["metadata"]["uid"] and o.get("controller") for o in owners):
            return f"PVC {ns}/{claim_name} was not created for pod {ns}/{pod['metadata']['name']} (pod is not owner)"
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if (claim.get("status") or {}).get("phase") != ClaimPhase.BOUND or not volume_name:
        return f"{prefix}: PVC is not bound"
    if not store.exists(PV_RT, volume_name):
        return f'{prefix}: failed to fetch PV "{volume_name}" from API server: persistentvolumes "{volume_name}" not found'
    return None


def _single_node(pv: JsonObject) -> bool:
    modes = set((pv.get("spec") or {}).get("accessModes") or [])
    return not modes & {AccessMode.READ_WRITE_MANY, AccessMode.READ_ONLY_MANY}


def _users_elsewhere(store: Store, pod: JsonObject, volume_name: str, node_name: str) -> list[JsonObject]:
    """Pods not terminal, bound to another node, whose volumes resolve to this PV."""
    users = []
    for other in store.list(POD_RT).items:
        o = other.obj
        o_node = (o.get("spec") or {}).get("nodeName")
        if o["metadata"]["uid"] == pod["metadata"]["uid"] or not o_node or o_node == node_name or is_terminal(o):
            continue
        for v in (o.get("spec") or {}).get("volumes") or []:
            name = claim_of_volume_source(o, v) if isinstance(v, dict) else None
            if name is None:
                continue
            try:
                claim = store.get_stored(PVC_RT, name, o["metadata"].get("namespace", "default")).obj
            except ApiError:
                continue
            if (claim.get("spec") or {}).get("volumeName") == volume_name:
                users.append(o)
                break
    return users


def volume_problem(store: Store, pod: JsonObject, node: JsonObject) -> VolumeProblem | None:
    """What keeps ``pod``'s volumes from being attached and mounted on ``node``, if anything."""
    claims = [(v, name) for v in (pod.get("spec") or {}).get("volumes") or []
              if isinstance(v, dict) and (name := claim_of_volume_source(pod, v)) is not None]
    if not claims:
        return None
    failed = [(v["name"], err) for v, name in claims if (err := _claim_error(store, pod, v, name)) is not None]
    if failed:
        names = " ".join(sorted(v.get("name", "") for v, _ in claims))
        not_processed = " ".join(sorted(n for n, _ in failed))
        return VolumeProblem("FailedMount", (
            f"Unable to attach or mount volumes: unmounted volumes=[{names}], unattached volumes=[{names}], "
            f"failed to process volumes=[{not_processed}]: {failed[0][1]}"), KUBELET)
    node_name = node["metadata"]["name"]
    ns = pod["metadata"].get("namespace", "default")
    for _, claim_name in claims:
        claim = store.get_stored(PVC_RT, claim_name, ns).obj
        pv = store.get_stored(PV_RT, claim["spec"]["volumeName"]).obj
        pv_name = pv["metadata"]["name"]
        csi = isinstance((pv.get("spec") or {}).get("csi"), dict)
        if not volume_fits_node(pv, node):
            if csi:
                return VolumeProblem("FailedAttachVolume", (
                    f'AttachVolume.Attach failed for volume "{pv_name}" : rpc error: code = FailedPrecondition '
                    f"desc = volume {pv_name} is not accessible from node {node_name}"), ATTACH_DETACH)
            return VolumeProblem("FailedMount", f'MountVolume.NodeAffinity check failed for volume "{pv_name}" : no matching NodeSelectorTerms', KUBELET)
        if csi and _single_node(pv):
            users = _users_elsewhere(store, pod, pv_name, node_name)
            if users:
                same = sorted(u["metadata"]["name"] for u in users if u["metadata"].get("namespace") == ns)
                detail = (f"Volume is already used by pod(s) {', '.join(same)}" if same
                          else f"Volume is already used by {len(users)} pod(s) in different namespaces")
                return VolumeProblem("FailedAttachVolume", f'Multi-Attach error for volume "{pv_name}" {detail}', ATTACH_DETACH)
    return None
