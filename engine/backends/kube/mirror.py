"""The cluster as the engine sees it: pods grouped into gangs, nodes, the queue config.

The mirror turns informer deltas into engine operations. Pods are grouped into gangs (one engine
job each); a gang is submitted once all the pods it needs exist unbound, withdrawn when they go
away, finished when its last bound pod ends. Cordons and node readiness change schedulability in
place. Anything structural (a node added, removed or relabelled, its NVLink islands or the GPUs
the node agent reports unhealthy changed, a new queue config) rebuilds the engine's state from the
caches, which is also how a restarted controller starts: state lives in the cluster, and
``rebuild`` derives it from what the API says. A rebuild changes only what changed: a gang it
finds running that ran before it keeps its run (its start, and no second ``adopt`` line in the
audit trail), and the history the cluster does not hold is carried over: finished jobs (the
newest half of ``FINISHED_JOBS_KEPT``) and the ended runs of jobs that live on. A GPU in
``usher/gpu-health`` is out of service: never placed on, not counted as capacity.

A gang is whole or it is stopped. A gang found partly bound (a controller died between two
binds), or one that loses a member while it runs (drained, deleted, failed, its node gone), is
*torn down*: ``Gang.teardown`` says why, and the controller evicts its remaining pods. Its engine
run keeps holding the capacity until the last of its pods is gone (pods in their termination
grace period still use their GPUs); then the run ends and the gang's recreated pods queue again.
A pod being deleted on a node that is not Ready may never go (no kubelet confirms it: a dead node
keeps it Terminating until the node is back, deleted or declared out of service), so it is
*stranded*: out of its gang, holding its node as a pod usher does not schedule until it is gone,
and the gang starts again whole with the pods its owner makes anew.

Pods usher does not schedule (DaemonSets, the default scheduler's) hold capacity too: each is a
``Holding`` taken from its node's free GPUs, CPU and memory, so usher never overcommits a node.

A gang's life is one ``GangPhase`` (``gang.py``), moved only by ``Mirror.move`` as
``gang.TRANSITIONS`` allows. The mirror's other parts live beside it, one concern a module, and
are mixed into ``Mirror`` because each writes the engine's state and the mirror's indexes
together: making and adopting jobs (``mirror_jobs``), why a gang waits (``mirror_waiting``), what
other pods hold (``mirror_holdings``) and the rebuild (``mirror_rebuild``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...core import Engine
from ...enums import EndReason, JobState, MoveMode
from ...policy.registry import Policy
from ...scenario import Scenario
from ...state import MILLI, ClusterState, Extras, Job, PodPlacement
from .decisions import NONE as NO_DECISIONS
from .decisions import Decisions, approved_gpus_cover
from .constraints import GroupConstraints, NodeConstraints
from .gang import TRANSITIONS, Gang, GangPhase, IllegalMove
from .mirror_holdings import DEBT, HeldByOthers
from .mirror_jobs import JobsOfGangs
from .mirror_rebuild import RebuildFromCaches
from .mirror_waiting import WhyWaiting
from .objects import Holding, NodeView, Phase, PodView, Requests, natural_key
from .podrules.pods import PodIndex
from .dra import DraIndex
from .volumes import VolumeIndex
from .volumes_mirror import VolumesOfPods

log = logging.getLogger("usher.controller")



class Mirror(JobsOfGangs, WhyWaiting, HeldByOthers, RebuildFromCaches, VolumesOfPods):
    """Caches of nodes, pods and config, kept consistent with one ``Engine``."""

    def __init__(self, name: str, policy: Policy | str = "usher") -> None:
        self.name = name
        self.policy = policy
        self.nodes: dict[str, NodeView] = {}
        self.gangs: dict[str, Gang] = {}
        self.pod_gang: dict[str, str] = {}
        self.config: Scenario = Scenario(name=name)
        self.config_error: str | None = None
        self.engine = Engine(ClusterState(name, [], {}), policy, moves=MoveMode.ON_RETURN)
        self.gang_of_job: dict[int, Gang] = {}
        #: pods usher does not schedule, by key, and what each takes from the engine's nodes now
        self.holdings: dict[str, Holding] = {}
        self._taken: dict[str, tuple[int, list[int], int, int, Extras]] = {}
        #: holdings taken short (their node was too full), taken again when room frees
        self._short: set[str] = set()
        #: GPUs bound pods of usher's hold beyond what their run could count when it was adopted
        #: (the engine still gave them to another run, one a standby saw ending or a rebuild kept
        #: in flight): taken as holdings are, short until room frees (keyed ``DEBT`` + pod key)
        self._debts: dict[str, Holding] = {}
        #: ``group_constraints`` per pod constraints, on the nodes of this state (``_constraints_of``)
        self._constraints_seen: dict[NodeConstraints | None, GroupConstraints] = {}
        #: the storage objects and each pod's claims (``volumes_mirror``)
        self.volumes = VolumeIndex()
        #: ResourceClaims, their templates, DeviceClasses and ResourceSlices (``dra``)
        self.dra = DraIndex()
        self._volume_epoch = 0
        self._volume_sigs: dict[str, tuple[Any, ...]] = {}
        self.dirty = True  # the engine must be rebuilt before the next cycle
        self._seq = 0
        #: when the first gang spared after a refused eviction may be a victim again (``spare``)
        self.spared_until: float | None = None
        #: pods of usher's gangs being deleted on a node that is not Ready (or was deleted), by key,
        #: with their gang's key: no kubelet may ever finish them (a dead node keeps a pod
        #: Terminating until the node is back, deleted, or declared out of service), so they are
        #: out of their gang, whose run may end and start again with the pods made anew, and hold
        #: their node's resources as a pod usher does not schedule until they are gone
        self.stranded: dict[str, str] = {}
        #: queues retired (``_retire``) and said so in the audit trail
        self.retired: set[str] = set()
        #: gangs kept out of their queue after refused binds, by key: until when (``Gang.bind_retry``)
        self.backing_off: dict[str, float] = {}
        #: the clock of bind back-offs (a test drives it)
        self.monotonic: Callable[[], float] = time.monotonic
        #: nodes whose kubelet refused a pod usher bound there, until when (monotonic seconds):
        #: usher's view of them is wrong, so nothing is placed there meanwhile (the engine takes
        #: them as cordoned); the controller lifts a doubt early once it found what it missed
        self.doubted: dict[str, float] = {}
        #: gangs moved whose old run ended (or that a rebuild found without a job) before their
        #: new pods came: the finished engine job that holds the room kept for each, by gang key,
        #: which the gang's next job takes (``_carry_room``)
        self.room_of: dict[str, int] = {}
        #: namespaces' labels by name (a queue's ``namespaceSelector`` reads them)
        self.namespace_labels: dict[str, dict[str, str]] = {}
        #: every live pod as pod affinity, anti-affinity and topology spread see it (``podrules``)
        self.pod_rules = PodIndex(self.namespace_labels)
        #: the operators' approvals and holds (ConfigMap usher-decisions), by gang key
        self.decisions: Decisions = NO_DECISIONS
        #: during a rebuild: the runs of the gangs that ran before it, by gang key (their start and
        #: their pods); a gang found running on the same pods keeps that run (``_adopt``)
        self._known_runs: dict[str, tuple[float, frozenset[str]]] = {}
        #: phase moves refused (``move``), by (from, to): each one is a bug, and logged
        self.refused_moves: Counter[tuple[GangPhase, GangPhase]] = Counter()

    @property
    def state(self) -> ClusterState:
        return self.engine.state

    # -- a gang's phase (``gang.TRANSITIONS``) ----------------------------------------------

    def move(self, gang: Gang, to: GangPhase, why: str | None = None) -> None:
        """Move ``gang`` to phase ``to`` (with the reason it is there), as ``TRANSITIONS``
        allows; any other move is logged, counted (``refused_moves``) and raised as
        ``IllegalMove``, never made."""
        if to not in TRANSITIONS[gang.phase]:
            self.refused_moves[gang.phase, to] += 1
            log.error("gang %s: refused the move %s -> %s (%s)", gang.key, gang.phase, to, why or "no reason given")
            raise IllegalMove(f"gang {gang.key} may not move from {gang.phase} to {to}")
        gang.phase, gang.why = to, why

    def tear_down(self, gang: Gang, why: str, replace: bool = False) -> None:
        """Its bound pods are to be evicted (``why``): torn down, or, while its bind task is in
        flight, unreserving; already so, it keeps its first reason unless ``replace``. A
        reservation called off has nothing bound: its task ends and queues it again."""
        if gang.teardown is not None:
            if replace:
                gang.why = why
        elif gang.phase in (GangPhase.RESERVED, GangPhase.BINDS_SENT):
            self.move(gang, GangPhase.UNRESERVING, why)
        elif gang.phase == GangPhase.IDLE:
            self.move(gang, GangPhase.TEARDOWN, why)

    def stop_tearing_down(self, gang: Gang, back_to: GangPhase = GangPhase.BINDS_SENT) -> None:
        """Its teardown is over without its run ending (nothing could be evicted, it was
        completed, or a rebuild judges it again from the cluster): a bind task still in flight
        goes on in ``back_to``; otherwise the gang is idle."""
        if gang.phase == GangPhase.UNRESERVING:
            self.move(gang, back_to)
        elif gang.phase in (GangPhase.TEARDOWN, GangPhase.COMPLETING):
            self.move(gang, GangPhase.IDLE)

    def binds_over(self, gang: Gang) -> None:
        """Its bind task ended: idle, or torn down if its bound pods are being evicted."""
        if gang.phase == GangPhase.UNRESERVING:
            self.move(gang, GangPhase.TEARDOWN, gang.why)
        elif gang.phase in (GangPhase.RESERVED, GangPhase.CALLED_OFF, GangPhase.BINDS_SENT):
            self.move(gang, GangPhase.IDLE)

    def spare(self, gang: Gang, until: float) -> None:
        """An eviction of ``gang``'s pods was refused: from the next rebuild until ``until`` its
        job is neither preempted nor moved (the controller rebuilds when that time comes)."""
        gang.spared_until = until
        self.spared_until = until if self.spared_until is None else min(self.spared_until, until)
        self.dirty = True

    # -- deltas ---------------------------------------------------------------------------

    def namespace_changed(self, name: str, labels: dict[str, str] | None) -> None:
        """A namespace's labels (None: it was deleted); a queue's namespaceSelector may now
        select it or not."""
        old = self.namespace_labels.get(name)
        if labels is None:
            self.namespace_labels.pop(name, None)
        else:
            self.namespace_labels[name] = dict(labels)
        if old != labels:
            self.pod_rules.namespaces_changed()
        if old != labels and any(q.namespace_selector is not None for q in self.config.queues):
            self.dirty = True

    def set_decisions(self, decisions: Decisions) -> None:
        """The operators' decisions as the ConfigMap holds them now: each gang's job follows."""
        if decisions == self.decisions:
            return
        self.decisions = decisions
        for gang in self.gangs.values():
            if gang.job is not None:
                self._refresh_flags(gang, gang.job)

    def held(self, gang: Gang) -> bool:
        """Whether an operator holds the gang."""
        return gang.key in self.decisions.held

    def set_config(self, config: Scenario | None, error: str | None) -> None:
        """A new queue config (or, with ``error``, a broken one: the last good one stays)."""
        self.config_error = error
        if config is not None:
            self.config = config
            self.dirty = True

    def node_changed(self, view: NodeView | None, name: str, now: float) -> None:
        old = self.nodes.get(name)
        if view is None:
            self.nodes.pop(name, None)
            self.dirty = True
            self._strand_on(name, now)
            return
        self.nodes[name] = view
        if old is None or old.shape() != view.shape():
            self.dirty = True
        elif not self.dirty and (old.unschedulable, old.ready) != (view.unschedulable, view.ready):
            node = self.state.node(name)
            self.state.set_schedulable(node, cordoned=view.unschedulable or name in self.doubted, failed=not view.ready)
        if not view.ready and (old is None or old.ready):
            self._strand_on(name, now)

    def pod_seen(self, key: str, obj: dict[str, Any] | None) -> None:
        """Any pod as the API shows it (None: deleted), for the pod rules; one whose required
        anti-affinity came or went rebuilds the engine (waiting pods without rules of their own
        may be repelled by it, or no longer)."""
        if self.pod_rules.pod_changed(key, obj):
            self.dirty = True

    def pod_changed(self, view: PodView | None, key: str, now: float) -> None:
        """A pod appeared, changed or went away; a pod whose gang changed (its owner came to be
        known, a label was edited) leaves its old gang first."""
        if key in self.stranded:
            if view is None or not view.live:
                del self.stranded[key]
                self.holding_changed(key, None)
            return
        if view is not None and self._strands(view):
            self._strand(view, key, now)
            return
        if DEBT + key in self._debts and (view is None or not view.live or not view.node):
            self._forgive(key)
        previous = self.pod_gang.get(key)
        if previous is not None and (view is None or view.gang != previous):
            self._leave(previous, key, now, "was deleted from" if view is None else "left the gang on")
        if view is None:
            return
        gang_key = view.gang
        gang = self.gangs.get(gang_key)
        if gang is None:
            self._seq += 1
            gang = self.gangs[gang_key] = Gang(gang_key, self._seq)
        old = gang.pods.get(view.name)
        if old is not None and old.uid == view.uid and old.node and not view.node:
            # our bind is known to have succeeded; an older event must not undo it
            view.node, view.gpus = old.node, old.gpus
        gang.pods[view.name] = view
        if view.phase == Phase.SUCCEEDED:
            gang.completed.add(view.name)
        self.pod_gang[key] = gang_key
        gang.size, gang.minimum, gang.title, gang.waiting_for = view.gang_size, view.gang_minimum, view.gang_title, view.waiting_for
        gang.staged = view.gang_staged
        if view.gang_uid != gang.uid:
            gang.uid = view.gang_uid  # another incarnation, or its owner read at last: approved?
            if gang.job is not None:
                self._refresh_flags(gang, gang.job)
        self.sync(gang, now)

    def _strands(self, view: PodView) -> bool:
        """Whether the pod is being deleted on a node known to be not Ready (its kubelet may
        never finish it)."""
        if not (view.terminating and view.live and view.node is not None):
            return False
        node = self.nodes.get(view.node)
        return node is not None and not node.ready

    def _strand(self, view: PodView, key: str, now: float) -> None:
        """Take the pod out of its gang (``stranded``); it holds its node as any pod usher does
        not schedule, until it is gone."""
        previous = self.pod_gang.get(key)
        if previous is not None:
            self._leave(previous, key, now, "hangs terminating on node")
        self._forgive(key)  # its holding takes all it holds
        self.stranded[key] = view.gang
        whole = -(-view.gpu_milli // MILLI)  # a share holds its GPU: nothing is placed beside it there
        self.holding_changed(key, Holding(view.node or "", Requests(view.cpu, view.memory, whole, view.extra)))
        gang = self.gangs.get(view.gang)
        if gang is not None:
            self.sync(gang, now)

    def _strand_on(self, node: str, now: float) -> None:
        """The node is not Ready (or is gone): its pods being deleted are stranded."""
        for gang in list(self.gangs.values()):
            for view in list(gang.pods.values()):
                if view.node == node and view.terminating and view.live and view.key not in self.stranded:
                    self._strand(view, view.key, now)

    def doubt(self, node: str, until: float) -> None:
        """A kubelet refused a pod usher bound to ``node``: nothing is placed there until
        ``until`` (monotonic seconds), or until ``trust``."""
        self.doubted[node] = until
        self._set_doubted(node)

    def trust(self, node: str) -> None:
        """Usher's view of ``node`` is right again (it found what it had missed there)."""
        if self.doubted.pop(node, None) is not None:
            self._set_doubted(node)

    def _set_doubted(self, node: str) -> None:
        view = self.nodes.get(node)
        if not self.dirty and view is not None and node in self.state.node_by_name:
            self.state.set_schedulable(self.state.node(node), cordoned=view.unschedulable or node in self.doubted)

    def retry_binds(self, now: float) -> None:
        """Gangs whose back-off after refused binds is over go back to their queue; nodes whose
        doubt is over take pods again."""
        for node, until in list(self.doubted.items()):
            if until <= self.monotonic():
                self.trust(node)
        if not self.backing_off:
            return
        moment = self.monotonic()
        for key, until in list(self.backing_off.items()):
            if until <= moment:
                del self.backing_off[key]
                gang = self.gangs.get(key)
                if gang is not None:
                    self.sync(gang, now)

    def _leave(self, gang_key: str, key: str, now: float, how: str) -> None:
        self.pod_gang.pop(key, None)
        gang = self.gangs.get(gang_key)
        if gang is None:
            return
        last = gang.pods.pop(key.split("/", 1)[1], None)
        if last is not None and last.bound and last.live:
            gang.departed[last.name] = f"pod {last.name} {how} {last.node}"
        self.sync(gang, now)
        if not gang.pods and (gang.job is None or gang.job.current_run is None):
            self._forget(gang)

    def forget_if_empty(self, gang: Gang) -> None:
        """After a bind attempt: a gang whose pods all went meanwhile, and that does not run, goes."""
        if not gang.pods and (gang.job is None or gang.job.current_run is None) and self.gangs.get(gang.key) is gang:
            self._forget(gang)

    def _forget(self, gang: Gang) -> None:
        """A gang with no pods left and nothing running: out of the mirror (its job with it; a
        room kept for it stays with its key, ``room_of``, for the pods its owner makes next)."""
        job = gang.job
        if job is not None:
            if job.submitted:
                self.engine.withdraw(job)
            if job.id in self.state.kept_rooms:
                self.room_of[gang.key] = job.id
            job.state = JobState.FINISHED
            self.gang_of_job.pop(job.id, None)
        self.backing_off.pop(gang.key, None)
        self.gangs.pop(gang.key, None)

    def assume_bound(self, gang: Gang, pod: str, node: str, gpus: list[int]) -> None:
        """Record a bind that the API accepted, before its watch event arrives."""
        view = gang.pods.get(pod)
        if view is not None:
            view.node, view.gpus = node, gpus
            self.pod_rules.assume_bound(view.key, node)

    # -- gangs and the engine -------------------------------------------------------------

    def sync(self, gang: Gang, now: float) -> None:
        """Bring the engine's job for ``gang`` in line with its pods."""
        if self.dirty:
            return  # the coming rebuild looks at every gang
        engine = self.engine
        job = gang.job
        bound = gang.bound()
        if job is not None:
            # follows its pods and owner: a Job whose failures used up its backoffLimit is not moved
            live = gang.live()
            job.movable = all(p.movable for p in live)
            job.comes_back = all(p.comes_back for p in live)
        if job is not None and job.current_run is not None:
            # held or released while it runs: a held job runs on, but grows no more
            self._refresh_flags(gang, job)
            if gang.binding:
                return
            if not bound:
                self._end(gang, job, now)
                self.sync(gang, now)  # pods recreated meanwhile may form a new run
                return
            counted = {p.pod for p in job.current_run.placements}
            if gang.teardown is None and any(p.name not in counted and not p.terminating and p.node in self.state.node_by_name for p in bound):
                # pods on nodes that the run does not count: more of a half-bound gang's pods bound
                # now, or a pod an elastic gang grew by whose bind seemed to fail but went through;
                # take it in again, whole or not, so that their room is counted
                self.engine.unbind(job, now, None)
                self._adopt(gang, bound, now)
                return
            if gang.teardown is None and (self._joined_later(gang) or self._growth_fits_changed(gang)):
                # an elastic gang's pods made after it started (a LeaderWorkerSet's workers, made
                # once its leader is Ready; a PyTorchJob's last worker, made while the first ones
                # bound), or whose volumes allow other nodes now: taken in as one job with
                # them, to grow by them
                self.engine.unbind(job, now, None)
                self._adopt(gang, bound, now, remake=True)
                return
            done = {p.pod for p in job.current_run.placements} & gang.completed
            if done:
                # members that ran to completion free their node at once (the rest run on)
                self.engine.shrink(job, done, now, note=False)
                self.retake_short()
            if gang.teardown is None and (lost := self._lost_member(gang, job.current_run.placements, now)) is not None:
                self.tear_down(gang, lost)
            self._explain_leftovers(gang)
            return
        if bound:
            if gang.teardown is not None:
                # evicted by a decision of the engine, which gave its capacity away already (the
                # binds onto it wait for these pods to go): never adopt it back
                if job is not None and job.submitted:
                    engine.withdraw(job)
                self._explain_leftovers(gang)
                return
            self._adopt(gang, bound, now)
            return
        if gang.binding:
            return  # a bind called off is winding down: it syncs the gang again when it ends
        self.stop_tearing_down(gang)
        ready, reason, message = self._readiness(gang)
        gang.reason, gang.message = reason, message
        if job is not None and job.state == JobState.FINISHED:
            self.gang_of_job.pop(job.id, None)
            gang.job = job = None
        if not ready:
            if job is not None and job.submitted:
                engine.withdraw(job)
            return
        if job is None or self._shape_changed(gang, job) or self._volumes_changed(gang, job) or self._queue_changed(gang, job):
            old = job
            if job is not None:
                if job.submitted:
                    engine.withdraw(job)
                job.state = JobState.FINISHED
                self.gang_of_job.pop(job.id, None)
            job = self._new_job(gang, gang.unbound(), now)
            if old is not None:
                # pods made anew under other names (a Job's): a room kept for the gang is theirs
                self.state.pass_kept_room(old.id, job.id, now)
            self._carry_room(gang, job, now)
        self._refresh_flags(gang, job)
        if not job.submitted:
            engine.submit(job, now)

    def _carry_room(self, gang: Gang, job: Job, now: float) -> None:
        """The gang's new job takes the room kept for the gang (``room_of``)."""
        held = self.room_of.pop(gang.key, None)
        if held is not None:
            self.state.pass_kept_room(held, job.id, now)

    def _end(self, gang: Gang, job: Job, now: float) -> None:
        """The run's last pod is gone: it finished, or its teardown is complete."""
        if job.id in self.state.kept_rooms:
            self.room_of[gang.key] = job.id  # moved: its old pods are gone, its new ones take the room
        self.engine.finish(job, now, EndReason.FINISHED if gang.teardown is None else EndReason.GANG_BROKEN)
        self.gang_of_job.pop(job.id, None)
        queue = self.state.queues.get(job.queue)
        if queue is not None and queue.retired and not any(queue.usage) and not queue.pending:
            del self.state.queues[job.queue]  # its last job ended
            self.retired.discard(job.queue)
        self.retake_short()
        gang.job = None
        self.stop_tearing_down(gang)
        gang.to_bind = {}
        gang.complete_at = (-math.inf, 0.0)
        gang.partial = False
        gang.completed.clear()
        gang.departed.clear()

    def _lost_member(self, gang: Gang, placements: list[PodPlacement], now: float | None = None) -> str | None:
        """Why a running gang is no longer whole (a member deleted, failed or being deleted), or
        None. An elastic job that keeps at least its minimum is still whole: the placements of
        the members it lost are given back once those pods are gone (with ``now``)."""
        lost: list[tuple[str, str, bool]] = []  # (pod, why, gone for good)
        for name in sorted({p.pod for p in placements}, key=natural_key):
            view = gang.pods.get(name)
            if name in gang.completed:
                continue
            if view is None:
                lost.append((name, gang.departed.get(name, f"pod {name} is gone"), True))
            elif view.phase == Phase.FAILED:
                lost.append((name, f"pod {name} failed on {view.node}", True))
            elif view.terminating:
                lost.append((name, f"pod {name} is being deleted from {view.node}", False))
            elif not view.bound:
                lost.append((name, f"pod {name} is no longer bound", True))
        if not lost:
            return None
        job = gang.job
        if job is None or len(placements) - len(lost) < job.min_count or now is None:
            return lost[0][1]
        gone = {name for name, _, for_good in lost if for_good}
        if gone:
            self.engine.shrink(job, gone, now)
        return None

    def take_in_again(self, gang: Gang, now: float) -> bool:
        """A running gang torn down for a lost member whose bound pods a budget keeps: its run
        ends, and it is taken in again from its pods as they are (those on nodes, and those its
        owner made anew waiting), partly bound, to be completed. False when it is not short of
        pods that way (nothing to complete)."""
        job = gang.job
        if job is None or job.current_run is None or gang.binding:
            return False
        self.engine.unbind(job, now, None)
        self.stop_tearing_down(gang)
        gang.departed.clear()
        self._adopt(gang, gang.bound(), now)
        return gang.partial

    def half_bound(self) -> list[Gang]:
        """Gangs seen with fewer pods on nodes than they need and no bind of ours under way."""
        return [g for g in self.gangs.values() if g.partial and not g.binding and g.teardown is None]

    def teardowns(self) -> list[Gang]:
        """Gangs being torn down that still have pods to evict."""
        return [g for g in self.gangs.values() if g.teardown is not None and any(not p.terminating for p in g.bound())]

    def _joined_later(self, gang: Gang) -> bool:
        """Whether a running elastic gang has waiting pods its job does not know of, among those
        it may still grow by (as many as it lacks of its size, the ones ``_adopt`` takes in)."""
        if not gang.minimum or gang.minimum >= gang.required:
            return False
        known = {n for g in gang.group_pods for n in g}
        room = max(0, gang.required - len(gang.bound()))
        return any(p.name not in known for p in gang.unbound()[:room])

    def _queue_changed(self, gang: Gang, job: Job) -> bool:
        """A waiting gang's pods name another queue now (a tenant relabelled them before they
        were bound: the queue is their request until then; deploy/74 keeps it once bound)."""
        pods = gang.unbound()
        return bool(pods) and self.queue_of(pods[0]) != job.queue

    def _shape_changed(self, gang: Gang, job: Job) -> bool:
        names = sorted((p.name for p in gang.unbound()), key=natural_key)
        return names != sorted((n for g in gang.group_pods for n in g), key=natural_key)

    def _refresh_flags(self, gang: Gang, job: Job) -> None:
        self.state.set_operator_flags(job, approved=self.approved(gang), held=gang.key in self.decisions.held)

    def approved(self, gang: Gang) -> bool:
        """Whether an operator approved this gang: its key is approved, the approval names this
        incarnation (the uid it was given for) or none (a gang of labels only, or written by hand:
        by name), and it covers the GPUs the job asks now (``gpus``, when written). A job deleted
        and made again under its name is another job: it waits for its own approval (and so does
        one whose owner usher has not read yet)."""
        note = self.decisions.approved.get(gang.key)
        if note is None:
            return False
        given_for = note.get("uid")
        if given_for and given_for != gang.uid:
            return False
        # and of the size it was approved at: a job whose owner grew since (a Job's parallelism
        # raised) asks the operator again
        return gang.job is None or approved_gpus_cover(note, gang.job)

    def refresh_flags(self, gang: Gang) -> None:
        if gang.job is not None:
            self._refresh_flags(gang, gang.job)

    def missing_pods(self, job: Job) -> list[tuple[int, str]]:
        """The pods an elastic job may still grow by: its gang's waiting pods, with their group."""
        gang = self.gang_of_job.get(job.id)
        if gang is None or gang.teardown is not None or gang.binding or gang.bind_retry[0] > self.monotonic():
            return []  # (backing off after a grow whose volumes were not bound)
        return self.unplaced_members(gang)

    def unplaced_members(self, gang: Gang) -> list[tuple[int, str]]:
        """The gang's waiting pods that its job's run does not place yet, with their group."""
        job = gang.job
        run = job.current_run if job is not None else None
        if run is None:
            return []
        placed = {p.pod for p in run.placements}
        waiting = {p.name for p in gang.unbound()}
        return [(gi, name) for gi, names in enumerate(gang.group_pods) for name in names if name in waiting and name not in placed]

    def pods_of(self, gang: Gang, placements: list[PodPlacement]) -> list[tuple[PodView, PodPlacement]]:
        """The pod each placement of a decision stands for (placement names are ``g<i>-<k>``)."""
        out = []
        for p in placements:
            group, _, k = p.pod.partition("-")
            if group.startswith("g") and k.isdigit():
                name = gang.group_pods[int(group[1:])][int(k)]
            else:
                name = p.pod
            p.pod = name
            out.append((gang.pods[name], p))
        return out
