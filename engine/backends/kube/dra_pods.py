"""Pods' and nodes' views with their device claims: where ``dra`` meets ``objects``.

A pod's claims (``DraIndex.ask``) add to its ``PodView`` what ``nvidia.com/gpu`` would: its GPU
count (so quota, placement, why-pending, preemption and backfill count claimed GPUs as they
count requested ones), the nodes whose devices can give them (a node constraint), and the
problems usher found in them, each with its field path. A node whose kubelet advertises no
``nvidia.com/gpu`` (NVIDIA's DRA driver replaces the device plugin) but whose ResourceSlices
publish GPUs has those GPUs, by index, as usher's own. A bound pod's GPUs are those its claims'
allocations hold (the cluster's truth, read at every rebuild), not what ``usher/gpus`` says. Kept apart from ``objects`` so the
parsing of pods and nodes stays free of the watched DRA objects.

A claim several pods name (``resourceClaimName``) is shared: its devices are allocated once, on one
node, and every pod that names it uses them (``share_claims``). usher shares a claim only among the
pods of one gang: it places them together (all or none, like the rest of the gang) and counts the
devices once, as the GPUs of one pod (``PodClaim.counted``: the first by name of those it is
reserved for, else the first by name); a claim named by pods of
two gangs would have one gang's quota pay for the other's devices, or a gang's end free devices the
other still uses, so such a pod waits with the reason. While the claim is not allocated, its pods
are kept to one node by a required pod affinity usher adds to them on
``kubernetes.io/hostname`` (over a label of its own, ``usher/shares-claim.<claim>``, that only the
pods' views carry); once it is, its allocation's node holds each of them, as it holds any pod.

A request with ``adminAccess`` (a monitoring or diagnostic pod's) is given matching devices
whether or not others hold them, and they are not the pod's GPUs: it counts none in quota or on
the node. The API server grants it only in a namespace labelled
``resource.kubernetes.io/admin-access: "true"``, which only cluster operators may label; usher
checks the label too, at every read, so a claim made before the label was taken off, or on a
server that does not check, is given nothing (``check_admin_access``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...podrules.model import AffinityTerm, LabelSelector
from ...state import HOSTNAME_LEVEL, MILLI
from .dra import Device, DraIndex, PodAsk
from .dra.model import ADMIN_ACCESS_LABEL
from .names import GPU_RESOURCE, Annotation
from .objects import Holding, NodeView, PodView, node_view


def with_claims(view: PodView, ask: PodAsk) -> PodView:
    """``view`` with what its claims ask (unchanged for a pod without claims)."""
    if not ask.claims and not ask.problems and not ask.waiting:
        return view
    problems = [view.problem] if view.problem else []
    problems.extend(ask.problems)
    if ask.gpus and view.gpu_milli and view.gpu_milli < MILLI:
        problems.append(f"annotation {Annotation.GPU_FRACTION} asks for a share of one GPU but the pod's claims "
                        f"(spec.resourceClaims) ask {ask.gpus} whole GPUs; ask for one or the other")
    view.gpu_milli += ask.gpus * MILLI
    view.claim_nodes = ask.nodes
    view.claim_exclusions = ask.exclusions
    view.claims_waiting = "; ".join(ask.waiting) or None
    given = _given(ask)
    if view.node and given:
        # on its node, the pod holds the devices its claims were given, whatever usher/gpus says
        view.gpus = given
    view.problem = "; ".join(problems) or None
    return view


#: the label (key prefix) of a pod's view that says which shared claim it names (never written
#: to the API: the pods of one claim find each other by it in the affinity usher adds)
SHARED_CLAIM_LABEL = "usher/shares-claim."


def share_claims(view: PodView, ask: PodAsk, gang_of: Callable[[str], str | None]) -> PodView:
    """``view`` with the claims it shares with other pods: a problem where one of them is of
    another gang (``gang_of``: a pod's gang key, None while not known), and while a shared claim
    is not allocated, the affinity that keeps its pods on one node."""
    problems = [view.problem] if view.problem else []
    terms: list[AffinityTerm] = []
    labels = dict(view.labels)
    for i, claim in enumerate(ask.claims):
        if not claim.sharers or claim.key is None:
            continue
        strangers = [p for p in claim.sharers if (gang := gang_of(p)) is not None and gang != view.gang]
        if strangers:
            problems.append(f"spec.resourceClaims[{i}]: ResourceClaim {claim.key} is named by pod {strangers[0]} of "
                            "another gang too; usher shares a claim only among the pods of one gang (each gang's "
                            "quota pays for its own devices)")
            continue
        if claim.allocated_on is None:
            key = f"{SHARED_CLAIM_LABEL}{claim.key.split('/', 1)[1]}"
            labels[key] = "true"
            terms.append(AffinityTerm(LabelSelector(((key, "true"),)), HOSTNAME_LEVEL))
    if not terms and len(problems) == (1 if view.problem else 0):
        return view
    view.problem = "; ".join(problems) or None
    if terms:
        view.labels = labels
        view.rules = replace(view.rules, affinity=(*view.rules.affinity, *terms))
    return view


def check_admin_access(view: PodView, ask: PodAsk, namespace_labels: dict[str, str] | None) -> PodView:
    """``view`` with a problem when a claim asks admin access in a namespace not labelled for it."""
    if (namespace_labels or {}).get(ADMIN_ACCESS_LABEL) == "true":
        return view
    for i, claim in enumerate(ask.claims):
        request = next((r for r in claim.spec.requests if r.admin), None)
        if request is not None:
            said = (f"spec.resourceClaims[{i}]: claim {claim.key or claim.name}, request {request.name} asks adminAccess, "
                    f"which needs the label {ADMIN_ACCESS_LABEL}=true on namespace {view.namespace} (cluster operators "
                    "set it)")
            view.problem = f"{view.problem}; {said}" if view.problem else said
            return view
    return view


def _given(ask: PodAsk) -> list[int]:
    """The GPU indices the pod's claims hold (empty unless every claim is allocated): those of
    a shared claim only where this pod counts them (``PodClaim.counted``)."""
    if not ask.claims or any(c.allocated_on is None for c in ask.claims):
        return []
    out = [device.index for c in ask.claims if c.counted for _, name in c.allocated
           if (device := Device(name, "", "", "")).index is not None]
    return sorted(out)


def holding_with_claims(holding: Holding | None, ask: PodAsk) -> Holding | None:
    """What a pod usher does not schedule holds, with the GPUs its allocated claims hold."""
    if holding is None or not ask.gpus:
        return holding
    return Holding(holding.node, holding.requests._replace(gpus=holding.requests.gpus + ask.gpus))


def node_with_devices(obj: dict[str, Any], index: DraIndex) -> NodeView:
    """The node's view; its GPUs those its ResourceSlices publish when its kubelet lists none."""
    name = (obj.get("metadata") or {}).get("name", "")
    devices = index.devices.get(name) or []
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    indices = sorted(d.index for d in devices if d.index is not None)
    if not indices or str(alloc.get(GPU_RESOURCE, "0")) not in ("0", ""):
        return node_view(obj)
    patched = copy.deepcopy(obj)
    # GPUs by index: a node whose slices skip an index has GPUs up to the highest, the missing
    # ones never given (``choose`` finds no device for them)
    count = indices[-1] + 1
    for part in ("allocatable", "capacity"):
        if part in (patched.get("status") or {}):
            patched["status"][part][GPU_RESOURCE] = str(count)
    if not (patched.get("status") or {}).get("allocatable") and not (patched.get("status") or {}).get("capacity"):
        patched.setdefault("status", {})["allocatable"] = {GPU_RESOURCE: str(count)}
    return node_view(patched)
