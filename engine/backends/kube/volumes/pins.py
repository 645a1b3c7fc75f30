"""Whether a gang fits where its volumes hold its pods: the pins of a PreBind left behind.

A claim bound to a local volume, or a delayed claim whose ``volume.kubernetes.io/selected-node``
is set, holds its pod to one node (its volume fit allows that node alone). A gang whose PreBind
did not finish (this replica, or a leader that died mid-way) can be held so to nodes that cannot
take it: several pods held to one node that together need more than the node has, or a node that
is cordoned, not ready, or gone. Kube-scheduler would leave such a pod Pending with per-node
reasons and nothing else; usher judges the gang as a whole, so the gang says why it cannot start
(``stuck``), and a new leader withdraws the selected nodes nobody acted on rather than wait
under them (the binder's ``take_over``).

Only single-node pins are judged: a pod held to a zone has a choice of nodes, which placement
weighs. Pure: the caller gives each pod's fit and the nodes' sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import reasons as say
from .reasons import Blocker


@dataclass(slots=True, frozen=True)
class PinnedPod:
    """One waiting pod of the gang: what its volumes allow, and what it asks of a node."""

    pod: str
    #: the nodes its volumes allow (None: any)
    eligible: frozenset[str] | None
    #: the claim that holds it, when its volumes allow one node only
    claim: str
    gpu_milli: int
    cpu: int
    memory: int


@dataclass(slots=True, frozen=True)
class NodeRoom:
    """A node's size (its allocatable), and why it takes no pod now (None: it may)."""

    gpu_milli: int
    cpu: int
    memory: int
    unusable: str | None = None


def stuck(pods: Sequence[PinnedPod], nodes: Mapping[str, NodeRoom]) -> Blocker | None:
    """Why the gang cannot start where its volumes hold its pods (None: as far as pins go, it can)."""
    held: dict[str, list[PinnedPod]] = {}
    for p in pods:
        if p.eligible is not None and len(p.eligible) == 1:
            held.setdefault(next(iter(p.eligible)), []).append(p)
    for node, group in sorted(held.items()):
        room = nodes.get(node)
        if room is None:
            return say.pinned_to_unusable(group[0].pod, node, group[0].claim, "does not exist")
        if room.unusable is not None:
            return say.pinned_to_unusable(group[0].pod, node, group[0].claim, room.unusable)
        for field, what in (("gpu_milli", "GPUs"), ("cpu", "CPU"), ("memory", "memory")):
            asked, has = sum(getattr(p, field) for p in group), getattr(room, field)
            if asked > has:
                return say.pinned_beyond([p.pod for p in group], node, sorted({p.claim for p in group}),
                                         _amount(asked, what), _amount(has, what))
    return None


def _amount(n: int, what: str) -> str:
    """GPUs and CPU in milli units, memory in bytes, as a user reads them."""
    if what == "memory":
        return f"{n / 2**30:g}Gi of memory"
    return f"{n / 1000:g} {what}"
