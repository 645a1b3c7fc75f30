"""Why a pod's volumes keep it waiting, in words a user can act on.

Each reason is an enum member (so tests, metrics and the console compare members, not text) and
each ``Blocker`` carries its message, naming the claim, volume, class or node concerned and,
where there is one, what to do. kube-scheduler's short forms ("node(s) had volume node affinity
conflict") are kept in ``NODE_WORDS`` for the per-node counts, since users search for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class VolumeReason(StrEnum):
    # the pod cannot go anywhere until something changes in the API
    CLAIM_NOT_FOUND = "ClaimNotFound"
    CLAIM_NOT_OWNED = "EphemeralClaimNotOwned"
    CLAIM_DELETING = "ClaimBeingDeleted"
    CLASS_NOT_FOUND = "StorageClassNotFound"
    UNBOUND_IMMEDIATE = "UnboundImmediateClaim"
    VOLUME_NOT_FOUND = "VolumeNotFound"
    CLAIM_LOST = "ClaimLost"
    RWOP_IN_USE = "ReadWriteOncePodInUse"
    SHARED_APART = "SharedClaimApart"
    PINNED_BEYOND_NODE = "PinnedBeyondItsNode"
    # a node does not fit (counted per node, as kube-scheduler's Filter reasons)
    NODE_CONFLICT = "VolumeNodeAffinityConflict"
    NO_VOLUME = "NoVolumeToBind"
    NO_CAPACITY = "NotEnoughStorage"
    ATTACH_LIMIT = "AttachLimitReached"
    SELECTED_ELSEWHERE = "ClaimSelectedAnotherNode"
    IN_USE_ELSEWHERE = "ClaimInUseOnAnotherNode"
    # the gang's PreBind
    WAITING_FOR_PROVISIONING = "WaitingForVolumeBinding"
    PROVISIONING_FAILED = "ProvisioningFailed"
    BINDING_TIMED_OUT = "VolumeBindingTimedOut"


#: the per-node reasons, as kube-scheduler words them (how many nodes each excluded)
NODE_WORDS: dict[VolumeReason, str] = {
    VolumeReason.NODE_CONFLICT: "had volume node affinity conflict",
    VolumeReason.NO_VOLUME: "didn't find available persistent volumes to bind",
    VolumeReason.NO_CAPACITY: "did not have enough free storage",
    VolumeReason.ATTACH_LIMIT: "exceed max volume count",
    VolumeReason.SELECTED_ELSEWHERE: "are not the node selected for a claim",
    VolumeReason.IN_USE_ELSEWHERE: "are not the node where a ReadWriteOnce claim is in use",
}


@dataclass(slots=True, frozen=True)
class Blocker:
    """One reason with its message and the claim it is about (``ns/name``; empty: none)."""

    reason: VolumeReason
    message: str
    claim: str = ""
    #: the pod and node it is about, where it is about one placement (a gang's attach limit)
    pod: str = ""
    node: str = ""

    def __str__(self) -> str:
        return self.message


def claim_not_found(volume: str, claim: str) -> Blocker:
    ns, name = claim.split("/", 1)
    return Blocker(VolumeReason.CLAIM_NOT_FOUND,
                   f"persistentvolumeclaim {name!r} not found: the pod's volume {volume!r} uses claim {claim}, "
                   f"which does not exist (create it, or fix the claimName; kubectl get pvc -n {ns})", claim)


def ephemeral_not_found(volume: str, claim: str) -> Blocker:
    return Blocker(VolumeReason.CLAIM_NOT_FOUND,
                   f"waiting for the ephemeral volume controller to create claim {claim} for the pod's volume {volume!r}",
                   claim)


def claim_not_owned(volume: str, claim: str) -> Blocker:
    return Blocker(VolumeReason.CLAIM_NOT_OWNED,
                   f"claim {claim} was not created for this pod (the pod is not its owner), so its ephemeral volume "
                   f"{volume!r} cannot use it: delete or rename the claim", claim)


def claim_deleting(claim: str) -> Blocker:
    return Blocker(VolumeReason.CLAIM_DELETING, f"claim {claim} is being deleted", claim)


def class_not_found(claim: str, klass: str) -> Blocker:
    return Blocker(VolumeReason.CLASS_NOT_FOUND,
                   f"claim {claim} asks for StorageClass {klass!r}, which does not exist: create the class or change "
                   f"the claim's storageClassName (kubectl get storageclass)", claim)


def unbound_immediate(claim: str, klass: str) -> Blocker:
    how = f"class {klass!r} binds immediately" if klass else "it has no storage class"
    return Blocker(VolumeReason.UNBOUND_IMMEDIATE,
                   f"pod has unbound immediate PersistentVolumeClaims: claim {claim} is not bound and {how}, so only "
                   f"the volume controller can bind it (kubectl describe pvc -n {claim.replace('/', ' ', 1)})", claim)


def volume_not_found(claim: str, volume: str) -> Blocker:
    return Blocker(VolumeReason.VOLUME_NOT_FOUND,
                   f"claim {claim} is bound to PersistentVolume {volume!r}, which does not exist", claim)


def claim_lost(claim: str, volume: str) -> Blocker:
    return Blocker(VolumeReason.CLAIM_LOST, f"claim {claim} lost its volume {volume!r} (status Lost)", claim)


def rwop_in_use(claim: str, user: str) -> Blocker:
    return Blocker(VolumeReason.RWOP_IN_USE,
                   f"claim {claim} is ReadWriteOncePod and pod {user} already uses it: only one pod may use it at a time",
                   claim)


def shared_apart(claim: str, pods: list[str], nodes: list[str]) -> Blocker:
    return Blocker(VolumeReason.SHARED_APART,
                   f"claim {claim} is ReadWriteOnce and shared by pods {', '.join(pods)} of the gang, which cannot all "
                   f"go on one node (placed on {', '.join(nodes)}): give each pod its own claim, or make it ReadWriteMany",
                   claim)


def waiting(claim: str, node: str, more: int) -> Blocker:
    rest = f" (and {more} other claim{'s' if more > 1 else ''})" if more else ""
    return Blocker(VolumeReason.WAITING_FOR_PROVISIONING,
                   f"waiting for provisioning of pvc/{claim.split('/', 1)[1]} on node {node}{rest}; no pod of the gang "
                   f"is bound before all its claims are", claim)


def provisioning_failed(claim: str, node: str, message: str | None) -> Blocker:
    said = f": {message}" if message else " (the provisioner withdrew the selected node)"
    return Blocker(VolumeReason.PROVISIONING_FAILED,
                   f"provisioning failed for pvc/{claim.split('/', 1)[1]} on node {node}{said}; no pod of the gang was "
                   f"bound, and usher places the gang again", claim)


def timed_out(claim: str, node: str, seconds: float) -> Blocker:
    return Blocker(VolumeReason.BINDING_TIMED_OUT,
                   f"pvc/{claim.split('/', 1)[1]} was not bound on node {node} within {seconds:g} s; no pod of the gang "
                   f"was bound, and usher places the gang again", claim)


def gang_attach_limit(pods: list[str], node: str, driver: str, limit: int, count: int, claim: str) -> Blocker:
    return Blocker(VolumeReason.ATTACH_LIMIT,
                   f"pods {', '.join(pods)} of the gang, placed together on node {node}, would use {count} volumes of "
                   f"CSI driver {driver} there, and its CSINode allows {limit} (node(s) exceed max volume count); no pod "
                   f"of the gang was bound, and usher places the gang again with fewer of them on {node}", claim,
                   pods[-1], node)


def pinned_beyond(pods: list[str], node: str, claims: list[str], need: str, has: str) -> Blocker:
    held = "is" if len(pods) == 1 else "are"
    return Blocker(VolumeReason.PINNED_BEYOND_NODE,
                   f"pod{'s' if len(pods) > 1 else ''} {', '.join(pods)} {held} held to node {node} by "
                   f"{', '.join(claims)} (a volume or a selected node there), and together need {need} where the node "
                   f"has {has}: the gang cannot fit as its volumes stand (move or delete the claims, or make the gang "
                   f"smaller)", claims[0] if claims else "", pods[0], node)


def pinned_to_unusable(pod: str, node: str, claim: str, why: str) -> Blocker:
    return Blocker(VolumeReason.PINNED_BEYOND_NODE,
                   f"pod {pod} is held to node {node} by claim {claim} (a volume or a selected node there), and node "
                   f"{node} {why}: the gang waits for it", claim, pod, node)
