"""What the bind path writes on a gang's ResourceClaims, and how it is undone.

Once the whole gang is placed, each claim of each pod gets, before any pod binds, its
``status.allocation`` (``devices.results[]``: request, driver, pool, device; the claim's opaque
config; a ``nodeSelector`` for the pod's node) and the pod in its ``status.reservedFor``, as
kube-scheduler's DynamicResources plugin writes them. The devices are the GPUs usher's
placement chose for the pod (``gpu-<i>`` for GPU ``i``), another free matching device of the node
in place of one a selector excludes (``index.choose``), one usher holds free first: the binder
then moves usher's placement onto the devices given (``Engine.regpu``), so its view of the
node's free GPUs stays the cluster's. A claim already allocated (by someone
else, or by a leader before this one) is only reserved, on its node and devices. A claim the
gang's pods share is allocated once, for the pod that counts its devices (the first by key, so
the pods are planned in that order), and reserved for all of them in the same write.

``plan`` says all of it, or why the gang cannot be given its devices; the writer
(``dra_prebind``) sends it and, on any refusal, undoes what it wrote (``undo_patch``). Pure: no
client, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .cel import SelectorError
from .index import DraIndex, PodClaim, choose
from .model import GPU_DRIVER, node_selector


@dataclass(frozen=True, slots=True)
class Placed:
    """One pod of the gang as placed."""

    key: str
    name: str
    namespace: str
    uid: str
    node: str
    gpus: tuple[int, ...]
    #: the node's other GPUs usher holds free: where a selector excludes one of ``gpus``, the
    #: device given instead is one of these first (usher's placement then moves to it, whole)
    free: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim's status as the PreBind writes it."""

    claim: str
    pod: Placed
    #: the allocation to write; None when the claim is allocated already (only reserved)
    allocation: dict[str, Any] | None
    #: ``status.reservedFor`` after the write
    reserved_for: tuple[dict[str, str], ...]
    #: the resourceVersion the write is made against (optimistic concurrency)
    version: str
    #: the gang's other pods that share the claim (reserved in the same write)
    also: tuple[Placed, ...] = ()

    @property
    def pods(self) -> tuple[Placed, ...]:
        return (self.pod, *self.also)


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    writes: tuple[ClaimWrite, ...] = ()
    #: each pod's GPU indices as given (usher's, a swapped one where a selector excluded it)
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.writes


NO_CLAIMS = ClaimPlan()


def plan(index: DraIndex, pods: Sequence[Placed]) -> ClaimPlan | str:
    """The writes that give every pod of the gang its devices, or why they cannot be given."""
    writes: list[ClaimWrite] = []
    by_claim: dict[str, int] = {}  # claim -> its write in ``writes``
    given: dict[str, set[str]] = {}
    gpus: list[tuple[str, tuple[int, ...]]] = []
    keys = {c.key for p in pods for c in _claims(index, p) if c.key}
    for p in sorted(pods, key=lambda p: p.key):  # a shared claim's counting pod first
        claims = _claims(index, p)
        if not claims:
            continue
        ask = index.ask(index.pods[p.key])
        if ask.problems or ask.waiting:
            return f"pod {p.key}: {(*ask.problems, *ask.waiting)[0]}"
        taken = index.taken_on(p.node, but=keys) | given.setdefault(p.node, set())
        mine: list[int] = []
        for claim in claims:
            assert claim.key is not None  # ask has no problem: every claim is made
            obj = index.claims[claim.key]
            ref = {"resource": "pods", "name": p.name, "uid": p.uid}
            shared = by_claim.get(claim.key)
            if shared is not None:
                # planned already for another pod of the gang that shares it: reserved for this one too
                first = writes[shared]
                if first.pod.node != p.node:
                    return (f"pods {first.pod.key} and {p.key} share claim {claim.key} but were placed on "
                            f"different nodes ({first.pod.node}, {p.node})")
                reserved = tuple(r for r in first.reserved_for if r.get("uid") != p.uid)
                writes[shared] = replace(first, reserved_for=(*reserved, ref), also=(*first.also, p))
                continue
            by_claim[claim.key] = len(writes)
            reserved = tuple(r for r in (obj.get("status") or {}).get("reservedFor") or [] if r.get("uid") != p.uid)
            version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if claim.allocated_on is not None:
                if claim.allocated_on != p.node:
                    return f"claim {claim.key} is allocated on node {claim.allocated_on}, not {p.node} where pod {p.key} was placed"
                if claim.counted:
                    mine.extend(_indices(d for _, d in claim.allocated))
                # its devices are held (by this pod or, shared, by another): not for the pod's other claims
                taken.update(d for _, d in claim.allocated)
                given[p.node].update(d for _, d in claim.allocated)
                writes.append(ClaimWrite(claim.key, p, None, (*reserved, ref), version))
                continue
            if not claim.counted:
                # its devices are the GPUs of the pod that counts them, which is not being placed
                return (f"claim {claim.key} is shared with pod {claim.sharers[0]}, whose GPUs its devices are: "
                        f"it is allocated when that pod is placed")
            devices = index.devices.get(p.node) or []
            try:
                chosen = choose(index, claim.spec.requests, devices, [*p.gpus[len(mine):], *p.gpus[:len(mine)], *p.free], taken,
                                claim.spec.constraints)
            except SelectorError as exc:
                return f"claim {claim.key}: {exc}"
            if chosen is None:
                return f"claim {claim.key}: node {p.node} has not devices enough free that match its requests"
            admin = {r.name for r in claim.spec.requests if r.admin}
            results = [{"request": r, "driver": d.driver, "pool": d.pool, "device": d.name,
                        **({"adminAccess": True} if r in admin else {})}
                       for r, found in chosen.items() for d in found]
            for name, found in chosen.items():
                if name in admin:
                    continue  # not the pod's GPUs, and free for others still
                taken.update(d.name for d in found)
                given[p.node].update(d.name for d in found)
                mine.extend(_indices(d.name for d in found))
            allocation: dict[str, Any] = {"devices": {"results": results}, "nodeSelector": node_selector(p.node)}
            if claim.spec.config:
                allocation["devices"]["config"] = [{"source": "FromClaim", **c} for c in claim.spec.config]
            writes.append(ClaimWrite(claim.key, p, allocation, (*reserved, ref), version))
        gpus.append((p.key, tuple(mine)))
    return ClaimPlan(tuple(writes), tuple(gpus))


def _claims(index: DraIndex, p: Placed) -> tuple[PodClaim, ...]:
    obj = index.pods.get(p.key)
    return index.ask(obj).claims if obj is not None else ()


def _indices(names: Any) -> list[int]:
    out = []
    for name in names:
        rest = str(name).removeprefix("gpu-")
        if rest.isdigit():
            out.append(int(rest))
    return out


def write_patch(write: ClaimWrite) -> dict[str, Any]:
    """The merge patch of ``status`` that gives the claim its allocation and reservation; the
    resourceVersion makes the API server refuse it if the claim changed since it was read."""
    status: dict[str, Any] = {"reservedFor": list(write.reserved_for)}
    if write.allocation is not None:
        status["allocation"] = write.allocation
    return {"metadata": {"resourceVersion": write.version}, "status": status}


def undo_patch(claim: dict[str, Any], pod_uids: set[str]) -> dict[str, Any] | None:
    """The merge patch that takes ``pod_uids`` out of the claim's reservation and, when no pod
    is left in it, its allocation (as the resourceclaim controller deallocates a claim nobody
    reserves); None when the claim reserves none of them."""
    status = claim.get("status") or {}
    reserved = [r for r in status.get("reservedFor") or [] if isinstance(r, dict)]
    left = [r for r in reserved if r.get("uid") not in pod_uids]
    if len(left) == len(reserved):
        return None
    version = str((claim.get("metadata") or {}).get("resourceVersion", ""))
    patch: dict[str, Any] = {"reservedFor": left or None}
    if not left:
        patch["allocation"] = None
    return {"metadata": {"resourceVersion": version}, "status": patch}


def gpu_results(claim: dict[str, Any]) -> list[str]:
    """The devices of NVIDIA's driver a claim's allocation holds."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [str(r.get("device")) for r in results if isinstance(r, dict) and r.get("driver") == GPU_DRIVER]
