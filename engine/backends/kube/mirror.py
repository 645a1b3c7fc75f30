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
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from collections import Counter
from typing import Any

from ...build import group_request, queue_from_spec
from ...controller import OutsideJob
from ...core import Engine
from ...enums import AuditAction, EndReason, JobState, MoveMode, PendingReason, TopologyMode
from ...fmt import plural
from ...policy.placement import pick_whole_gpus
from ...policy.registry import Policy
from ...scenario import QueueSpec, Resources, Scenario
from ...state import MILLI, AuditEntry, ClusterState, Extras, Job, KeptRoom, Node, PodGroup, PodPlacement, Run, extra_offered
from .decisions import NONE as NO_DECISIONS
from .decisions import Decisions
from .constraints import GroupConstraints, NodeConstraints, group_constraints
from .gang import TRANSITIONS, Gang, GangPhase, IllegalMove
from .objects import Holding, NodeView, Phase, PodView, Requests, natural_key

log = logging.getLogger("usher.controller")

DEFAULT_QUEUE = "default"
#: how a debt's key starts (``Mirror._debts``): apart from the holdings' pod keys
DEBT = "debt:"
#: audit entries a rebuild keeps (the newest): a controller that runs for months must not keep all
AUDIT_KEPT = 10_000
#: finished engine jobs (ended runs, gangs gone) beyond which the controller rebuilds to drop them
FINISHED_JOBS_KEPT = 10_000


#: the retired queue that holds, for each namespace, its pods found running in a queue that
#: namespace may not use (``not-allowed/<namespace>``: no queue config may name it, a queue name
#: having no ``/``)
NOT_ALLOWED_PREFIX = "not-allowed/"


class Mirror:
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

    def needs_compaction(self) -> bool:
        """Whether the engine holds so many jobs of gangs gone that a rebuild should drop them
        (job ids are list positions, so only a rebuild can)."""
        return len(self.state.jobs) > FINISHED_JOBS_KEPT + 2 * len(self.gangs)

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

    def stranded_of(self, gang: Gang) -> list[str]:
        """The gang's pods stranded on nodes that are not Ready, as ``pod on node``."""
        out = []
        for key, gang_key in sorted(self.stranded.items()):
            if gang_key == gang.key:
                holding = self.holdings.get(key)
                out.append(f"{key.rsplit('/', 1)[-1]} on {holding.node if holding is not None else '?'}")
        return out

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
            if gang.teardown is None and self._joined_later(gang):
                # a staged gang's pods made after it started (a LeaderWorkerSet's workers, made
                # once its leader is Ready): taken in as one job with them, to grow by them
                self.engine.unbind(job, now, None)
                self._adopt(gang, bound, now)
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
        if job is None or self._shape_changed(gang, job):
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

    def _readiness(self, gang: Gang) -> tuple[bool, PendingReason | None, str | None]:
        unbound = gang.unbound()
        if not unbound:
            return False, None, None
        bad = next((p for p in unbound if p.problem), None)
        if bad is not None:
            return False, PendingReason.INVALID_REQUEST, f"Pod {bad.name} cannot be scheduled as written: {bad.problem}."
        owners = sorted({p.owner or "bare pods" for p in gang.live()})
        if len(owners) > 1:
            return False, PendingReason.INVALID_REQUEST, (
                f"Pods of {len(owners)} owners ({', '.join(owners)}) share the gang {gang.title or gang.key}; "
                "give each workload its own usher/gang label."
            )
        queue = self.queue_of(unbound[0])
        spec = next((q for q in self.config.queues if q.name == queue), None)
        namespace = unbound[0].namespace
        if spec is not None and not spec.admits(namespace, self.namespace_labels.get(namespace)):
            asked = "its usher/queue label names" if unbound[0].queue else "it lands by default in"
            return False, PendingReason.QUEUE_NOT_ALLOWED, (
                f"The pod is in namespace {namespace!r} and {asked} queue {queue!r}, which may be used only by "
                f"{spec.who_may_use()}; use a queue your namespace is allowed, or ask an operator to add it to {queue!r} "
                f"in usher-system/usher-queues."
            )
        if queue not in self.state.queues or self.state.queues[queue].retired:
            known = ", ".join(sorted(self.state.queues)) or "none"
            where = f"usher-system/usher-queues (queues: {known})"
            if unbound[0].queue is None:
                return False, PendingReason.UNKNOWN_QUEUE, (
                    f"The pod has no usher/queue label, no queue lists its namespace {unbound[0].namespace!r} "
                    f"in namespaces:, and there is no queue named {DEFAULT_QUEUE!r} in {where}."
                )
            return False, PendingReason.UNKNOWN_QUEUE, f"Queue {queue!r} is not in {where}."
        levels = self.state.levels
        for p in unbound:
            level = p.topology_required or p.topology_preferred
            if level is not None and level not in levels:
                return False, PendingReason.INVALID_REQUEST, (
                    f"Pod {p.name} asks for topology level {level!r}, which is not one of the cluster's levels ({', '.join(levels) or 'none configured'})."
                )
        if gang.waiting_for is not None:
            return False, PendingReason.WAITING_FOR_GANG, f"Waiting to learn the gang's size: {gang.waiting_for}."
        wait = gang.bind_retry[0] - self.monotonic()
        if wait > 0:
            self.backing_off[gang.key] = gang.bind_retry[0]
            return False, PendingReason.BIND_REFUSED, (
                f"Its last bind was refused ({gang.bind_error}); usher tries again in {math.ceil(wait)} s "
                "(each refusal doubles the wait, up to 5 minutes).")
        # a staged gang starts at its minimum: its owner makes the rest only once those run
        needed = min(gang.minimum, gang.required) if gang.staged and gang.minimum else gang.required
        if len(unbound) < needed:
            message = f"{len(unbound)} of the gang's {needed} pods exist; usher starts a gang only when all of them can start together."
            stranded = self.stranded_of(gang)
            if stranded:
                message += (
                    f" Its old pod {', '.join(stranded)} is stuck terminating: the node is not Ready, so no kubelet "
                    "confirms the pod is gone, and its owner may wait for that before it makes the pod anew. If the "
                    "node is dead, delete it (kubectl delete node) or taint it "
                    "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, and the cluster removes the pod."
                )
            return False, PendingReason.WAITING_FOR_GANG, message
        return True, None, None

    def queue_of(self, pod: PodView) -> str:
        """The pod's queue: its label, else its namespace's default queue, else ``default``."""
        if pod.queue:
            return pod.queue
        for spec in self.config.queues:
            if pod.namespace in spec.namespaces:
                return spec.name
        return DEFAULT_QUEUE

    def _joined_later(self, gang: Gang) -> bool:
        """Whether a running staged gang has waiting pods its job does not know of."""
        if not gang.staged or not gang.minimum or gang.minimum >= gang.required:
            return False
        known = {n for g in gang.group_pods for n in g}
        return any(p.name not in known for p in gang.unbound())

    def _shape_changed(self, gang: Gang, job: Job) -> bool:
        names = sorted((p.name for p in gang.unbound()), key=natural_key)
        return names != sorted((n for g in gang.group_pods for n in g), key=natural_key)

    def _refresh_flags(self, gang: Gang, job: Job) -> None:
        self.state.set_operator_flags(job, approved=gang.key in self.decisions.approved, held=gang.key in self.decisions.held)

    def refresh_flags(self, gang: Gang) -> None:
        if gang.job is not None:
            self._refresh_flags(gang, gang.job)

    def _retire(self, name: str, now: float) -> None:
        """A gang runs in a queue that is not in the config (taken out of it while the gang ran,
        or before a restart): the queue is kept, *retired*, so its running jobs hold their
        capacity and are counted; nothing new is admitted into it (``_readiness``), and it goes
        once its last job ends (``_end``)."""
        # built, not validated: a retired name comes from a pod or from usher, not from the config
        queue = queue_from_spec(QueueSpec.model_construct(name=name, quota=Resources(gpu=0, cpu=0, memory=0)))
        queue.retired = True
        self.state.queues[name] = queue
        if name in self.retired:
            return  # said once, not again at each rebuild
        self.retired.add(name)
        if name.startswith(NOT_ALLOWED_PREFIX):
            message = ("pods running in a queue their namespace may not use (placed without usher): they keep "
                       "their nodes and are charged to no team's quota")
        else:
            message = "not in the queue config any more: its running jobs keep their capacity until they end; nothing new is admitted"
        self.state.audit.append(AuditEntry(now, "scheduler", AuditAction.RETIRE_QUEUE, name, message))

    def _constraints_of(self, constraints: NodeConstraints | None) -> GroupConstraints:
        """``group_constraints`` on the engine's nodes, remembered per constraints until the next
        rebuild (node labels and taints change only through one): pods of one template share
        theirs, and every pod on a cluster has some (the two tolerations the API server adds),
        so matching them against every node once per job would cost O(nodes) per job."""
        known = self._constraints_seen.get(constraints)
        if known is None:
            known = self._constraints_seen[constraints] = group_constraints(constraints, self.state.nodes)
        return known

    def _new_job(self, gang: Gang, pods: list[PodView], now: float) -> Job:
        state = self.state
        groups: dict[tuple[Any, ...], list[str]] = {}
        views = sorted(pods, key=lambda p: natural_key(p.name))
        for p in views:
            groups.setdefault(p.signature(), []).append(p.name)
        by_name = {p.name: p for p in views}
        pod_groups = []
        for gi, (sig, names) in enumerate(groups.items()):
            first = by_name[names[0]]
            mode = level = None
            # a level gone from the config can only be a running gang's (``_readiness`` stops a
            # waiting one): where it runs is settled, so it is taken in without the constraint
            if first.topology_required in state.levels:
                mode, level = TopologyMode.REQUIRED, state.levels.index(first.topology_required)
            elif first.topology_preferred in state.levels:
                mode, level = TopologyMode.PREFERRED, state.levels.index(first.topology_preferred)
            pod_groups.append(
                PodGroup(
                    f"g{gi}", len(names), first.gpu_milli, first.cpu, first.memory, first.models, mode, level,
                    **self._constraints_of(first.constraints), extra=first.extra,
                )
            )
        first = views[0]
        queue = self.queue_of(first)
        spec = next((q for q in self.config.queues if q.name == queue), None)
        if spec is not None and not spec.admits(first.namespace, self.namespace_labels.get(first.namespace)):
            # found running in a queue its namespace may not use (bound by someone else, or
            # created on a node): it holds its nodes, but is never charged to that queue
            queue = f"{NOT_ALLOWED_PREFIX}{first.namespace}"
        if queue not in state.queues:
            self._retire(queue, now)
        job = Job(
            id=len(state.jobs),
            name=gang.title or gang.key,
            queue=queue,
            submit=min(p.created for p in views),
            priority=max(p.priority for p in views),
            duration=None,
            estimate=first.estimate,
            preemptible=all(p.preemptible for p in views),
            spared=gang.spared_until != -math.inf,
            preempts=all(p.preempts for p in views),
            movable=all(p.movable for p in views),
            comes_back=all(p.comes_back for p in views),
            checkpoint_every=first.checkpoint_every,
            min_count=min(gang.minimum or gang.required, gang.required, len(views)),
            groups=tuple(pod_groups),
            seq=gang.seq,
        )
        job.request = group_request(pod_groups)
        state.jobs.append(job)
        state.job_by_name[job.name] = job.id
        gang.job = job
        gang.group_pods = list(groups.values())
        self.gang_of_job[job.id] = gang
        return job

    def _adopt(self, gang: Gang, bound: list[PodView], now: float) -> None:
        """A gang with bound pods and no run in the engine: a job found running (on a restart,
        or bound by the leader while this replica or console watches).

        Its pods hold their nodes whatever happens next, so it is adopted, as the same engine job
        when that job stands for exactly these pods; one found partly bound (fewer pods on nodes
        than the gang needs) is torn down from there.
        """
        job = gang.job
        if job is not None and job.submitted:
            self.engine.withdraw(job)
        needed = min(gang.minimum or gang.required, gang.required)
        gang.partial = len(bound) + len(gang.completed) < needed
        # the job is all the gang's pods, those still waiting too, when it is elastic (it may grow
        # by them) or half-bound (the rest are being bound): it stays one job as they bind
        waiting = gang.unbound()[: max(0, gang.required - len(bound))] if gang.minimum or gang.partial else []
        members = bound + waiting
        names = sorted(p.name for p in members)
        same = job is not None and job.state != JobState.FINISHED and names == sorted(n for g in gang.group_pods for n in g)
        if not same:
            if job is not None:
                job.state = JobState.FINISHED
                self.gang_of_job.pop(job.id, None)
            job = self._new_job(gang, members, now)
        self._refresh_flags(gang, job)
        placements = []
        owing: list[tuple[PodView, int]] = []  # bound pods and the GPUs they hold beyond their placement
        on_nodes = {p.name for p in bound}
        claimed: dict[tuple[int, int], int] = {}  # (node, GPU) -> milli-GPUs placed by this adoption
        for gi, group_names in enumerate(gang.group_pods):
            group = job.groups[gi]
            for name in group_names:
                if name not in on_nodes:
                    continue
                view = gang.pods[name]
                found = self._placement_of(view, group, claimed)
                if found is not None:
                    placement, short = found
                    owing.append((view, short))
                    placements.append(placement)
                    for g in placement.gpus:
                        claimed[placement.node_id, g] = claimed.get((placement.node_id, g), 0) + (placement.share or MILLI)
        known = self._known_runs.pop(gang.key, None)
        # running before a rebuild, on these very pods: the same run goes on, not a new one found
        ran = known is not None and known[1] == frozenset(on_nodes)
        self.engine.adopt(job, placements, known[0] if ran and known is not None else min(p.created for p in bound))
        for view, short in owing:  # once the placements are allocated: never the same GPUs
            self._owe(view, short)
        nodes = len({p.node for p in bound})
        if not gang.partial:
            if not ran:
                what = ("started", f"on {plural(nodes, 'node')}") if same else ("adopt", f"found running on {plural(nodes, 'node')}")
                self.state.audit.append(AuditEntry(now, "scheduler", what[0], job.name, what[1]))
            if gang.teardown is None and (lost := self._lost_member(gang, placements, now)) is not None:
                self.tear_down(gang, lost)
        self._explain_leftovers(gang)

    def _placement_of(
        self, pod: PodView, group: PodGroup, claimed: dict[tuple[int, int], int] | None = None
    ) -> tuple[PodPlacement, int] | None:
        """Where a bound pod holds GPUs: the GPUs its ``usher/gpus`` annotation names that are
        free here, and, for any it names that are not (gone when the node shrank, taken by
        another pod) or that it lacks, other free ones; never none while the node has room, or
        a pod running on a GPU that failed under it would leave its other GPUs to be given away.
        A named GPU out of service (``usher/gpu-health``) counts as held: nothing is placed on
        it anyway. ``claimed``: what the gang's pods placed before this one take (not allocated
        yet), so two pods never count the same GPU. Also gives how many GPUs it holds beyond
        those (none were free: the engine still gave them to another run), for ``_owe``."""
        state = self.state
        if pod.node not in state.node_by_name:
            return None
        node = state.node(pod.node)
        claimed = claimed or {}
        free = [f - claimed.get((node.id, i), 0) for i, f in enumerate(node.gpu_free)]
        share = group.share
        take = share or MILLI
        want = 1 if share else group.whole_gpus
        named = [g for g in dict.fromkeys(pod.gpus) if 0 <= g < node.gpu_count]
        held = [g for g in named if free[g] >= take][:want]
        dead = [g for g in named if g in node.out_of_service and g not in held]
        missing = want - len(held) - len(dead)
        if missing > 0:
            if share:
                fits = [i for i, f in enumerate(free) if share <= f and i not in held]
                partly = [i for i in fits if free[i] < MILLI]  # beside other shares first, least left over
                held += [min(partly, key=lambda i: free[i])] if partly else fits[:1]
            else:
                spare = [i for i, f in enumerate(free) if f == MILLI and i not in held]
                if not held and not claimed:
                    spare = pick_whole_gpus(node, min(missing, node.whole_free))  # the tightest NVLink island
                held += spare[:missing]
        placement = PodPlacement(pod.name, node.id, held, share if held else 0, group.cpu, group.memory, extra=group.extra)
        return placement, max(0, want - len(held) - len(dead))

    def _owe(self, pod: PodView, missing: int) -> None:
        """A bound pod adopted with ``missing`` GPUs fewer than it holds (``_placement_of`` found
        them given to another run): those are taken as a holding is, now or as soon as room
        frees, so that no node looks free while the kubelet counts it full."""
        self._forgive(pod.key)
        if missing > 0 and pod.node is not None:
            debt = Holding(pod.node, Requests(0, 0, missing))
            self._debts[DEBT + pod.key] = debt
            self._take(DEBT + pod.key, debt)
            log.warning("pod %s is bound to %s on %d GPU(s) usher had counted as taken: counted as soon as they free",
                        pod.key, pod.node, missing)

    def _forgive(self, key: str) -> None:
        """The pod ``key`` holds nothing beyond its run any more (it is gone, or adopted anew)."""
        if self._debts.pop(DEBT + key, None) is not None:
            self._give_back(DEBT + key)
            self._short.discard(DEBT + key)
            self.retake_short()

    def _explain_leftovers(self, gang: Gang) -> None:
        if gang.partial and gang.teardown is None:
            bound = len(gang.bound())
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = f"The gang is being bound: {bound} of its {gang.required} pods are on nodes."
        elif gang.teardown is not None and gang.to_bind:
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = (
                f"The gang is being completed: a PodDisruptionBudget keeps its {plural(len(gang.bound()), 'pod')} on nodes "
                f"running, so usher binds the rest where there is room ({gang.teardown})."
            )
        elif gang.teardown is not None:
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = (
                f"The gang is being stopped ({gang.teardown}); usher starts it again whole once its old pods are gone."
            )
        elif gang.unbound() and gang.job is not None and gang.job.min_count < gang.job.total_pods:
            gang.reason = PendingReason.WAITING_FOR_GANG
            run = gang.job.current_run
            running = len(run.placements) if run is not None else 0
            gang.message = (
                f"The gang runs with {running} of its {gang.job.total_pods} pods (its minimum is {gang.job.min_count}); "
                "this pod joins it when capacity and its queue's quota allow."
            )
        elif gang.unbound():
            gang.reason = PendingReason.WAITING_FOR_GANG
            gang.message = "The rest of this gang is already running; usher starts a gang whole, so this pod waits for the next run."
        else:
            gang.reason = gang.message = None

    def missing_pods(self, job: Job) -> list[tuple[int, str]]:
        """The pods an elastic job may still grow by: its gang's waiting pods, with their group."""
        gang = self.gang_of_job.get(job.id)
        if gang is None or gang.teardown is not None or gang.binding:
            return []
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

    # -- rebuilding -----------------------------------------------------------------------

    def rebuild(self, now: float) -> None:
        """A fresh engine state from the caches (start, new nodes, a new queue config)."""
        old = self.engine.state
        in_flight = {
            g.key: [(p, old.nodes[p.node_id].name) for p in g.job.current_run.placements]
            for g in self.gangs.values()
            if g.binding and g.job is not None and g.job.current_run is not None
        }
        holders = {g.key: g.job.id for g in self.gangs.values() if g.job is not None}
        self._known_runs = {
            g.key: (g.job.current_run.start, frozenset(p.pod for p in g.job.current_run.placements))
            for g in self.gangs.values()
            if g.job is not None and g.job.current_run is not None and not g.partial
        }
        ended_runs = {key: [r for r in old.jobs[jid].runs if r.end is not None] for key, jid in holders.items()}
        holders.update(self.room_of)
        self.room_of = {}  # job ids of the old state
        kept: dict[str, tuple[KeptRoom, list[str], Job]] = {}
        for key, holder in holders.items():
            room = old.kept_rooms.get(holder)
            if room is not None:
                kept[key] = (room, [old.nodes[p.node_id].name for p in room.placements], old.jobs[room.job_id])
        cfg = self.config
        levels = list(cfg.topology.levels)
        state = ClusterState(self.name, levels, dict(cfg.priority_classes))
        if self.engine.state.audit:
            state.audit = self.engine.state.audit
            if len(state.audit) > AUDIT_KEPT:
                del state.audit[: len(state.audit) - AUDIT_KEPT]  # the oldest go: a console shows the last
        for i, view in enumerate(sorted(self.nodes.values(), key=lambda v: natural_key(v.name))):
            node = Node(
                id=i,
                name=view.name,
                labels=view.labels,
                gpu_model=view.gpu_model,
                gpu_memory=view.gpu_memory,
                gpu_count=view.gpus,
                islands=view.islands,
                cpu=view.cpu,
                memory=view.memory,
                out_of_service=frozenset(view.unhealthy),
                taints=view.taints,
                extra=dict(view.extra),
            )
            state.add_node(node)
            node.cordoned, node.failed = view.unschedulable or view.name in self.doubted, not view.ready
        state.finish_building()
        self._carry_finished(old, state)
        for spec in cfg.queues:
            queue = state.queues[spec.name] = queue_from_spec(spec)
            before = self.engine.state.queues.get(spec.name)
            if before is not None and queue.half_life is not None:
                queue.past_gpu, queue.past_at = before.past_gpu, before.past_at  # its recent use survives a rebuild
            if spec.cohort is not None:
                state.cohorts.setdefault(spec.cohort, []).append(spec.name)
        self.engine = Engine(state, self.policy, moves=MoveMode.ON_RETURN)
        self.retired -= set(state.queues)  # back in the config
        spared = [g for g in self.gangs.values() if g.spared_until != -math.inf]
        for gang in spared:
            if gang.spared_until <= now:
                gang.spared_until = -math.inf
        self.spared_until = min((g.spared_until for g in spared if g.spared_until > now), default=None)
        self.gang_of_job = {}
        self._taken = {}
        self._short = set()
        self._debts = {}
        self._constraints_seen = {}
        self.dirty = False
        for key in [k for k, g in self.gangs.items() if not g.pods and k not in in_flight]:
            del self.gangs[key]  # no pods and (after this rebuild) no job: nothing to keep
        for gang in sorted(self.gangs.values(), key=lambda g: g.seq):
            gang.job = None
            gang.group_pods = []
            if gang.key in in_flight:
                self._keep_in_flight(gang, in_flight[gang.key], now)
            else:
                # judged again from what the cluster shows: pods still on nodes hold them (a gang
                # being torn down is adopted, so its GPUs stay counted until its pods are gone; a
                # refused rollback's room is not kept, so it is not completed there any more)
                self.stop_tearing_down(gang)
                gang.to_bind = {}
                self.sync(gang, now)
        self._known_runs = {}
        for key, runs in ended_runs.items():
            gang = self.gangs.get(key)
            if runs and gang is not None and gang.job is not None:
                gang.job.runs[:0] = _runs_on(runs, old, state)  # its history before this rebuild
        for key, holding in self.holdings.items():
            self._take(key, holding)
        for key, (room, nodes, holder) in kept.items():
            self._keep_again(key, room, nodes, holder, now)

    def _carry_finished(self, old: ClusterState, state: ClusterState) -> None:
        """The newest finished jobs that ran go on in the new state, before any job made from the
        gangs (which takes the name of a job that runs again). Half of ``FINISHED_JOBS_KEPT`` at
        most, so that a compaction drops the older half and the next is due only once as many
        more have finished."""
        finished = [j for j in old.jobs if j.state == JobState.FINISHED and j.runs and j.id not in self.gang_of_job]
        for was in finished[max(0, len(finished) - FINISHED_JOBS_KEPT // 2):]:
            job = copy.copy(was)
            job.id = len(state.jobs)
            job.runs = _runs_on(was.runs, old, state)
            state.jobs.append(job)
            state.job_by_name[job.name] = job.id

    def _room_holder(self, was: Job) -> Job:
        """A finished job of the gang's that holds its kept room until its next job takes it."""
        state = self.state
        holder = Job(
            id=len(state.jobs), name=was.name, queue=was.queue, submit=was.submit, priority=was.priority, duration=None,
            estimate=None, preemptible=False, checkpoint_every=None, min_count=was.min_count, groups=was.groups,
            state=JobState.FINISHED, seq=was.seq,
        )
        state.jobs.append(holder)
        return holder

    def _keep_again(self, key: str, room: KeptRoom, nodes: list[str], holder: Job, now: float) -> None:
        """A room kept for a moved gang (``KeptRoom``) survives a rebuild where its nodes do and
        it is still free, held for the gang's job (pending, or running on its old pods while they
        go), or for a finished job of the gang's (``_room_holder``) when it has none now, until
        its next job takes it. Else it is given back, and the gang queues as any other."""
        gang = self.gangs.get(key)
        state, job, queue = self.state, gang.job if gang is not None else None, holder.queue
        placements = [
            PodPlacement(p.pod, state.node_by_name.get(node, -1), list(p.gpus), p.share, p.cpu, p.memory, extra=p.extra)
            for p, node in zip(room.placements, nodes)
        ]
        # a job running again where it was (its eviction was refused) needs no room; one whose
        # old pods are still going (torn down) does, as does a gang with no pods for now
        waiting = job is None or job.state == JobState.FINISHED or job.current_run is None or (gang is not None and gang.teardown is not None)
        if waiting and queue in state.queues and (job is None or job.queue == queue) and state.room_for(placements):
            if job is None or job.state == JobState.FINISHED:
                job = self._room_holder(holder)
                self.room_of[key] = job.id
            state.keep_room(KeptRoom(job.id, placements, room.charged, room.until, room.made_room_for), now)
            return
        where = ",".join(dict.fromkeys(nodes))
        why = "it runs where it was" if not waiting else "that room is not free any more after the cluster changed"
        state.audit.append(AuditEntry(now, "scheduler", AuditAction.KEEP_ROOM, holder.name, f"gave back the room kept on {where}: {why}"))

    def _keep_in_flight(self, gang: Gang, placements: list[tuple[PodPlacement, str]], now: float) -> None:
        """A gang whose binds are under way when the engine is rebuilt keeps its placements."""
        state = self.state
        names = [p.pod for p, _ in placements]
        job = self._new_job(gang, [gang.pods[n] for n in names if n in gang.pods], now)
        self._refresh_flags(gang, job)
        job.settling = gang.binds_sent  # its binds are still on their way: still no victim
        kept = [
            PodPlacement(p.pod, state.node_by_name[node], list(p.gpus), p.share, p.cpu, p.memory, extra=p.extra)
            for p, node in placements
            if node in state.node_by_name
        ]
        self.engine.adopt(job, kept, now)

    # -- pods usher does not schedule -------------------------------------------------------

    def holding_changed(self, key: str, holding: Holding | None) -> None:
        """A pod usher does not schedule appeared on a node, changed or went away."""
        if holding is None:
            self.holdings.pop(key, None)
        else:
            self.holdings[key] = holding
        if self.dirty:
            return  # the coming rebuild takes every holding
        self._give_back(key)
        self._short.discard(key)
        if holding is not None:
            self._take(key, holding)
        elif self._short:
            self.retake_short()

    def _take(self, key: str, holding: Holding) -> None:
        """Take what the pod holds from its node; never more than is free (the node may be
        overcommitted already: pods the kubelet admitted before usher saw them, or on room the
        engine still gave to a run that was ending). What could not be taken is taken as soon as
        room frees (``retake_short``)."""
        state = self.state
        node_id = state.node_by_name.get(holding.node)
        if node_id is None:
            return
        node = state.nodes[node_id]
        want = holding.requests
        gpus = pick_whole_gpus(node, min(want.gpus, node.whole_free)) if want.gpus else []
        cpu, memory = min(want.cpu, max(node.cpu_free, 0)), min(want.memory, max(node.mem_free, 0))
        left = node.extra_free
        extra = tuple((name, min(amount, max(extra_offered(left, name), 0))) for name, amount in want.extra)
        state.allocate(node, gpus, 0, cpu, memory, extra)
        state.changed()
        self._taken[key] = (node_id, gpus, cpu, memory, extra)
        if (len(gpus), cpu, memory, extra) != (want.gpus, want.cpu, want.memory, want.extra):
            self._short.add(key)
        else:
            self._short.discard(key)

    def retake_short(self) -> None:
        """Take again the holdings that found their node too full to take all they hold, now
        that room may have freed (a run ended, members finished, a job was stopped)."""
        if self.dirty:
            return  # the coming rebuild takes every holding
        state = self.state
        for key in sorted(self._short):
            holding = self.holdings.get(key) or self._debts.get(key)
            taken = self._taken.get(key)
            if holding is None or taken is None:
                self._short.discard(key)
                continue
            node = state.nodes[taken[0]]
            want = holding.requests
            if not ((len(taken[1]) < want.gpus and node.whole_free > 0) or (taken[2] < want.cpu and node.cpu_free > 0)
                    or (taken[3] < want.memory and node.mem_free > 0)
                    or any(got < amount and extra_offered(node.extra_free, name) > 0
                           for (name, got), (_, amount) in zip(taken[4], want.extra))):
                continue  # no room has freed there: nothing would change
            self._give_back(key)
            self._take(key, holding)

    def _give_back(self, key: str) -> None:
        taken = self._taken.pop(key, None)
        if taken is not None:
            node_id, gpus, cpu, memory, extra = taken
            self.state.release(self.state.nodes[node_id], gpus, 0, cpu, memory, extra)
            self.state.changed()


    def waiting_gangs(self) -> list[Gang]:
        return [g for g in self.gangs.values() if g.unbound()]

    def outside(self) -> tuple[OutsideJob, ...]:
        """The gangs the engine's state does not show as they are (``OutsideJob``): waiting
        outside its queue with their reason, waiting beside their job's run, or ended with no
        engine job standing for them. What a console lists beside the engine's jobs."""
        out = []
        state = self.state
        for gang in self.gangs.values():  # in the order they were first seen
            job = gang.job
            name = gang.title or gang.key
            waiting = gang.unbound()
            if job is not None and job.current_run is not None:
                kind = JobState.RUNNING
                if not waiting or gang.reason is None:
                    continue  # waiting for nothing (or being bound)
            elif job is not None and job.submitted:
                continue  # in the engine's queue: the engine says why it waits
            elif waiting:
                kind = JobState.PENDING
            elif gang.pods and not gang.live() and name not in state.job_by_name:
                kind, waiting = JobState.FINISHED, list(gang.pods.values())
            else:
                continue
            out.append(OutsideJob(
                name, job.queue if job is not None else self.queue_of(waiting[0]), kind, len(waiting),
                sum(p.gpu_milli for p in waiting), max(p.priority for p in waiting), min(p.created for p in waiting),
                gang.reason if kind != JobState.FINISHED else None, gang.message if kind != JobState.FINISHED else None,
            ))
        return tuple(out)


def _runs_on(runs: list[Run], old: ClusterState, state: ClusterState) -> list[Run]:
    """Ended runs of ``old`` as runs of ``state``: their placements name the same nodes (node ids
    are positions, which a rebuild renumbers); a placement on a node gone since is left out."""
    out = []
    for run in runs:
        placements = []
        for p in run.placements:
            node_id = state.node_by_name.get(old.nodes[p.node_id].name) if 0 <= p.node_id < len(old.nodes) else None
            if node_id is not None:
                placements.append(dataclasses.replace(p, node_id=node_id, gpus=list(p.gpus)))
        out.append(dataclasses.replace(run, placements=placements))
    return out
