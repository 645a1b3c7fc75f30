"""A gang's volumes, bound all or none: the PreBind plan, its progress and its undo.

kube-scheduler binds volumes pod by pod: Reserve assumes a node for each delayed claim, PreBind
writes ``volume.kubernetes.io/selected-node`` on claims to provision (and a ``claimRef`` on static
volumes it chose), waits until the PV controller and the provisioner have bound every claim, and
only then binds the pod. usher does the same for the whole gang at once, so that no pod of a gang
starts before every claim of every pod is bound:

- ``plan`` (Reserve): for a placement of the whole gang, what to write: static volumes to bind
  and claims to provision on their pod's node. A claim shared by several pods of the gang is
  planned once; a ``ReadWriteOnce`` (or ``ReadWriteOncePod``) claim shared by pods placed on
  different nodes refuses the plan (the second node would fail with a Multi-Attach error). The
  CSI volumes of all the gang's pods on one node are counted together against each driver's
  attach limit there (CSINode), beside those already attached: each pod alone may fit where
  several together do not; the refusal names the pod that went over and the node.
- ``progress`` (the wait): done when every claim the gang needs is fully bound to a volume that
  fits its pods' nodes; failed when the provisioner withdrew a selected node (its way to say it
  failed), a claim was bound to a volume its pods cannot use, a claim went away, or the wait ran
  past its bound; else waiting, with the first claim still waited for.
- ``undo`` (Unreserve): the selected nodes not yet acted on, to withdraw. Claims that did get
  bound stay bound: their volumes' node affinity pins the gang's next placement.

Pure: the caller does the writes and keeps the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from . import reasons as say
from .fit import PodClaims, Storage, choose, over_limit, volume_ids
from .reasons import Blocker, VolumeReason


class Step(StrEnum):
    DONE = "done"
    WAIT = "wait"
    FAIL = "fail"


@dataclass(slots=True, frozen=True)
class Placed:
    """One pod of the gang where the cycle placed it."""

    pod: str
    claims: PodClaims
    node: str
    labels: Mapping[str, str]


@dataclass(slots=True, frozen=True)
class Plan:
    """What PreBind writes, and what it waits for."""

    #: static volumes for delayed claims: (claim key, volume name)
    bindings: tuple[tuple[str, str], ...] = ()
    #: delayed claims to provision: (claim key, node)
    provisions: tuple[tuple[str, str], ...] = ()
    #: every (claim key, node of a pod using it) that must be bound before any pod is
    waits: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        """Every claim of the gang is bound already: nothing to write, nothing to wait for."""
        return not (self.bindings or self.provisions or self.waits)


NOTHING = Plan()


def plan(placed: Sequence[Placed], storage: Storage) -> Plan | Blocker:
    """Reserve for a whole gang: the plan, or why this placement cannot bind its volumes."""
    if all(p.claims.free for p in placed):
        return NOTHING
    apart = _shared_apart(placed, storage)
    if apart is not None:
        return apart
    bindings: dict[str, str] = {}
    provisions: dict[str, str] = {}
    waits: list[tuple[str, str]] = []
    #: node -> driver -> the CSI volumes the gang's pods placed so far bring there
    adding: dict[str, dict[str, set[str]]] = {}
    on_node: dict[str, list[str]] = {}
    for p in placed:
        choice = choose(p.claims, p.node, p.labels, storage, frozenset(bindings.values()))
        if choice.reason is not None:
            return Blocker(choice.reason, f"pod {p.pod} cannot use its volumes on node {p.node}: claim {choice.claim} "
                           f"({choice.reason})", choice.claim, p.pod, p.node)
        new = volume_ids(p.claims, storage, choice.bindings, choice.provisions)
        here = on_node.setdefault(p.node, [])
        here.append(p.pod)
        over = over_limit(p.node, storage, new, adding.get(p.node))
        if over is not None:
            claim, driver, limit, count = over
            return say.gang_attach_limit(here, p.node, driver, limit, count, claim)
        for driver, ident, _ in new:
            adding.setdefault(p.node, {}).setdefault(driver, set()).add(ident)
        for key, volume in choice.bindings:
            bindings.setdefault(key, volume)
        for key in choice.provisions:
            provisions.setdefault(key, p.node)
        waits += [(c.key, p.node) for c in p.claims.delayed]
    return Plan(tuple(sorted(bindings.items())), tuple(sorted(provisions.items())), tuple(sorted(set(waits))))


def _shared_apart(placed: Sequence[Placed], storage: Storage) -> Blocker | None:
    nodes: dict[str, dict[str, str]] = {}
    for p in placed:
        keys = [c.key for c, _ in p.claims.bound] + [c.key for c in p.claims.delayed]
        for key in keys:
            nodes.setdefault(key, {})[p.pod] = p.node
    for key, by_pod in sorted(nodes.items()):
        claim = storage.claims.get(key)
        if claim is not None and claim.single_node and len(set(by_pod.values())) > 1:
            return say.shared_apart(key, sorted(by_pod), sorted(set(by_pod.values())))
    return None


@dataclass(slots=True, frozen=True)
class Progress:
    step: Step
    blocker: Blocker | None = None


def progress(the_plan: Plan, storage: Storage, labels: Mapping[str, Mapping[str, str]], waited: float,
             timeout: float, failures: Mapping[str, str] | None = None) -> Progress:
    """Where the PreBind of ``the_plan`` stands, after ``waited`` seconds of a wait bounded by
    ``timeout``. ``labels``: each node's labels; ``failures``: the provisioner's last word on a
    claim (its ProvisioningFailed message), when known."""
    failures = failures or {}
    selected = dict(the_plan.provisions)
    pending: list[tuple[str, str]] = []
    for key, node in the_plan.waits:
        claim = storage.claims.get(key)
        if claim is None or claim.deleting:
            return Progress(Step.FAIL, say.provisioning_failed(key, node, "the claim was deleted"))
        if not claim.bound:
            if key in selected and claim.selected_node != selected[key]:
                return Progress(Step.FAIL, say.provisioning_failed(key, selected[key], failures.get(key)))
            pending.append((key, node))
            continue
        volume = storage.volumes.get(claim.volume_name)
        if volume is None:
            pending.append((key, node))  # the volume's watch event is on its way
            continue
        if not volume.fits(node, labels.get(node, {})):
            return Progress(Step.FAIL, Blocker(
                VolumeReason.NODE_CONFLICT,
                f"pvc/{claim.name} was bound to volume {volume.name}, usable only where {volume.where()}, not on "
                f"node {node}; no pod of the gang was bound, and usher places the gang again", key))
    if not pending:
        return Progress(Step.DONE)
    key, node = pending[0]
    if waited >= timeout:
        return Progress(Step.FAIL, say.timed_out(key, node, timeout))
    return Progress(Step.WAIT, say.waiting(key, node, len({k for k, _ in pending}) - 1))


def undo(the_plan: Plan, storage: Storage) -> tuple[str, ...]:
    """The claims whose selected node to withdraw: planned to provision, not bound, still selected."""
    out = []
    for key, node in the_plan.provisions:
        claim = storage.claims.get(key)
        if claim is not None and not claim.bound and claim.selected_node == node:
            out.append(key)
    return tuple(out)


def leftovers(claims: Sequence[str], storage: Storage) -> tuple[str, ...]:
    """Of a waiting gang's claims, those with a selected node but not bound: a PreBind that a
    controller left unfinished (it restarted, or lost its lease). The new leader withdraws them
    before it places the gang again; those that did get bound pin the placement."""
    return tuple(k for k in claims if (c := storage.claims.get(k)) is not None and c.selected_node and not c.bound)
