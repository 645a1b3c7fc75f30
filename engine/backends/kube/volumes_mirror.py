"""A waiting pod's volumes as the engine sees them: node constraints, and reasons to wait.

A part of ``Mirror`` (a mixin, as ``mirror_jobs`` and ``mirror_waiting`` are). The mirror holds a
``VolumeIndex`` (``volumes``) that intake feeds with the storage informers' objects and every
pod. For a gang's job, each waiting pod's volume fit (``volumes.fit``: the nodes its claims allow,
and why not the others) is intersected into its pod group's ``eligible`` nodes and added to its
``exclusions``, so placement, the why-pending message and backfill plans all see it; pods whose
fits differ are in different pod groups. A pod whose claims allow no node at all (a claim or
class not found, an unbound claim of an ``Immediate`` class, a ``ReadWriteOncePod`` claim in use)
keeps its gang out of the queue, waiting with that reason (``_volume_blocker``); so does a gang
whose pods are held by their volumes to a node that cannot take them together, or that is
cordoned, not ready or gone (``volume_pins``: a local volume, or a selected node left by a PreBind
that did not finish).

A storage change re-judges the waiting gangs with claims (``storage_changed``): a job whose pods'
volume fits changed is made anew, as one whose pods changed is; so is the job of a running
elastic gang whose waiting pods' fits changed (``_growth_fits_changed``), so that it grows onto a
node whose storage capacity was published after the node itself.
"""

from __future__ import annotations

from typing import Any

from ...enums import PendingReason
from ...state import Job
from .constraints import GroupConstraints
from .gang import Gang
from .objects import NodeView, PodView
from .volumes import Blocker, NodeRoom, PinnedPod, VolumeFit, VolumeIndex, VolumeReason, stuck

#: what holds a pod to a node: a volume's node affinity, a selected node, a claim in use there
PINS = (VolumeReason.SELECTED_ELSEWHERE, VolumeReason.NODE_CONFLICT, VolumeReason.IN_USE_ELSEWHERE)


class VolumesOfPods:
    """How ``Mirror`` reads its waiting pods' volumes (see the module's docstring)."""

    volumes: VolumeIndex
    nodes: dict[str, NodeView]
    #: bumped when the engine's nodes are rebuilt: a volume fit is judged on one set of nodes
    _volume_epoch: int
    #: each gang's pods' volume fits when its job was made (``_volumes_changed``)
    _volume_sigs: dict[str, tuple[Any, ...]]

    def volume_fit(self, pod: PodView) -> VolumeFit:
        return self.volumes.fit(pod.key, self.state.nodes, self._volume_epoch)

    def _volume_sig(self, pods: list[PodView]) -> tuple[Any, ...]:
        # with what the pods' device claims ask (``dra_pods``): a class, claim or slice seen later
        # changes a waiting pod's GPUs or nodes, and its job is made anew as for its volumes
        return tuple((p.name, self.volume_fit(p).eligible, p.claim_nodes, p.gpu_milli) for p in pods)

    def _with_volumes(self, constraints: GroupConstraints, fit: VolumeFit) -> GroupConstraints:
        """A pod group's node constraints narrowed to the nodes its volumes allow."""
        if fit.eligible is None:
            return constraints
        ids = frozenset(n.id for n in self.state.nodes if n.name in fit.eligible)
        before = constraints["eligible"]
        eligible = ids if before is None else before & ids
        preferred = tuple(t & eligible for t in constraints["preferred"] if t & eligible)
        # each node once, under the first reason that keeps it out (kube-scheduler's node filters
        # before its volume filters): the volume words count only the nodes the constraints left
        left = None if before is None else [n.name for n in self.state.nodes if n.id in before]
        why = ", ".join(w for w in (constraints["exclusions"], fit.explain(self.volumes.storage, left)) if w)
        return GroupConstraints(eligible=eligible, preferred=preferred, exclusions=why or None)

    def _volume_blocker(self, unbound: list[PodView]) -> tuple[PendingReason, str] | None:
        """Why a waiting gang cannot start anywhere because of a pod's volumes (None: it may)."""
        for p in unbound:
            if p.key in self.volumes.problems:
                return PendingReason.INVALID_REQUEST, (
                    f"Pod {p.name} cannot be scheduled as written: {'; '.join(self.volumes.problems[p.key])}.")
            fit = self.volume_fit(p)
            if fit.blockers:
                return PendingReason.WAITING_FOR_VOLUMES, f"Pod {p.name} cannot start: {fit.explain(self.volumes.storage)}."
        pinned = self.volume_pins(unbound)
        if pinned is not None:
            return PendingReason.WAITING_FOR_VOLUMES, f"The gang cannot start: {pinned.message}."
        return None

    def volume_pins(self, unbound: list[PodView]) -> Blocker | None:
        """Why the gang cannot start where its volumes hold its pods, each to one node (None: it can)."""
        pods = []
        for p in unbound:
            fit = self.volume_fit(p)
            if fit.eligible is None or len(fit.eligible) != 1:
                continue
            claim = next((fit.claims[r] for r in PINS if r in fit.claims), None)
            if claim is not None:  # held there by a volume, not left there by other filters
                pods.append(PinnedPod(p.key, fit.eligible, claim, p.gpu_milli, p.cpu, p.memory))
        if not pods:
            return None
        rooms = {}
        for name in {n for p in pods for n in p.eligible or ()}:
            view = self.nodes.get(name)
            if view is not None:
                why = "is cordoned" if view.unschedulable else None if view.ready else "is not ready"
                rooms[name] = NodeRoom(view.gpus * 1000, view.cpu, view.memory, why)
        return stuck(pods, rooms)

    def _volumes_changed(self, gang: Gang, job: Job) -> bool:
        """Whether the volume fits of the gang's waiting pods are not those its job was made with."""
        known = self._volume_sigs.get(gang.key)
        if known is None:
            return False
        return known != self._volume_sig(sorted(gang.unbound(), key=lambda p: p.name))

    def _growth_fits_changed(self, gang: Gang) -> bool:
        """Whether the volume fits of the pods a running elastic gang may still grow by are not
        those its job was made with (a node, or its storage capacity, seen since: the grow would
        be judged on the nodes its volumes allowed then)."""
        known = self._volume_sigs.get(gang.key)
        waiting = {name for _, name in self.unplaced_members(gang)} if gang.minimum and known is not None else set()
        if not waiting:
            return False
        then = tuple(sig for sig in known or () if sig[0] in waiting)
        return then != self._volume_sig(sorted((gang.pods[n] for n in waiting), key=lambda p: p.name))

    def storage_changed(self, now: float) -> None:
        """A claim, volume, class, capacity or CSINode changed: the waiting gangs with claims are
        judged again (their jobs made anew where their pods' volume fits changed), and so are the
        running elastic gangs whose waiting pods have claims (they grow by them)."""
        for gang in list(self.gangs.values()):
            job = gang.job
            if gang.binding:
                continue
            if job is not None and job.current_run is not None and not gang.minimum:
                continue
            if any(self.volumes.claim_keys(p.key) for p in gang.unbound()):
                self.sync(gang, now)
