"""Consolidation: move preemptible jobs out of a topology domain so that a gang waiting for one
can start in it, only when every moved job is placed again elsewhere at once.

A gang that requires one domain (a rack, a block, an NVLink host) may wait although the cluster
has GPUs enough in total, because small jobs are scattered over every domain. Preemption cannot
help when nothing outranks it; waiting for the right jobs to end may take hours. Consolidation
looks for a domain whose preemptible jobs, of no higher priority than the gang, could be lifted
out and placed elsewhere right now, least work lost first (work since the last checkpoint), and
then drops every mover the gang can spare. It succeeds only if the gang fits in the freed room and
every mover fits somewhere else, all at once: a move never leaves a job waiting. The search runs
on the state itself and undoes everything; the cycle then stops the movers, starts the gang and
restarts each mover on the nodes found for it (``carry_out``). The cycle asks for the most
urgent job blocked for capacity only (the one backfill reserves for), before its walk.

Moving a job restarts it. A replay starts it again on its new nodes at once
(``MoveMode.AT_ONCE``). A cluster cannot: the mover's pods are evicted and its owner creates new
ones later (``MoveMode.ON_RETURN``). There the room found for each mover is kept (``KeptRoom``:
its GPUs, CPU and memory taken, its queue still charged) until its pods come back, and the first
cycle that sees them queued starts it there (``return_to_kept_rooms``); a room whose job has not
come back within ``ROOM_KEPT_FOR`` is given back, and the job then queues as any other. Only jobs
something creates again are moved there (``Job.movable``: a bare pod evicted is gone for good).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .. import fmt
from ..admission import Admitter, CycleResult
from ..enums import AuditAction, EndReason, JobState, MoveMode, TopologyMode
from ..memo import memo_of
from ..state import MILLI, AuditEntry, ClusterState, Job, KeptRoom, PodPlacement, Vec
from . import quota
from .filters.registry import node_allowed
from .placement import Placer, gang_counts, request_of
from .preemption import lift_victim, restore_victim
from .registry import Policy, Scoring

#: domains tried per search, those with the least to move first
MAX_DOMAINS = 8
#: jobs moved at most to start one gang
MAX_MOVERS = 16
#: failed searches remembered at most
MEMO_LIMIT = 4096
#: on a cluster, how long (seconds) the room found for a moved job is kept for its pods to come
#: back: its owner makes new ones once the old are gone (a Job after its back-off, 10 s at first)
ROOM_KEPT_FOR = 600.0


class Miss(StrEnum):
    """Why a domain gave no consolidation."""

    #: with every mover lifted the gang still had no room there
    NO_ROOM = "no room"
    #: the gang had room, but a mover it needed gone fitted nowhere else
    NOWHERE_ELSE = "nowhere else"


@dataclass(slots=True)
class Move:
    """One job moved: where it ran, where it runs from now on, and what it is charged."""

    job: Job
    before: list[PodPlacement]
    after: list[PodPlacement]
    charged: Vec


@dataclass(slots=True)
class Consolidation:
    """A gang's placement in ``domain`` and the moves that make room for it."""

    domain: str
    level_name: str
    gang: list[PodPlacement]
    moves: list[Move]


def required_level(job: Job) -> int | None:
    """The topology level every whole-GPU group of ``job`` must sit within, when there is one."""
    levels = {g.topology_level for g in job.groups if g.whole_gpus and g.topology_mode == TopologyMode.REQUIRED}
    if len(levels) != 1 or any(g.topology_mode == TopologyMode.PREFERRED for g in job.groups):
        return None
    return levels.pop()


def _movable(state: ClusterState, job: Job, v: Job, now: float) -> bool:
    """Whether ``v`` may be moved for ``job``: preemptible, movable, of no higher priority, whole,
    working, and not in the middle of a move already (no room kept for it)."""
    run = v.current_run
    return (
        v.id != job.id
        and v.id not in state.kept_rooms
        and run is not None
        and not v.shielded
        and v.movable
        and v.priority <= job.priority
        and run.start < now  # never a job admitted at this very moment
        and not v.settling  # nor one whose start is still being carried out
        and run.work_start is not None
        and len(run.placements) == sum(gang_counts(v, False))
    )


def consolidation_for(state: ClusterState, job: Job, now: float, policy: Policy) -> Consolidation | None:
    """For a pending gang: moves that start its whole gang now, where nothing else would: its
    quota lets it start, the cluster has its GPUs free but not together, and it does not fit as
    things are. None otherwise."""
    if not job.preempts:
        return None  # a move evicts its movers: not for a job that may not evict others
    counts = gang_counts(job, False)
    request = request_of(job, counts)
    if job.held or sum(g.whole_gpus * n for g, n in zip(job.groups, counts)) > state.total_whole_free:
        return None
    if required_level(job) is None or not quota.check(state, state.queues[job.queue], request, policy.borrowing).fits:
        return None
    return find_consolidation(state, job, counts, now, policy.scoring)


def find_consolidation(
    state: ClusterState, job: Job, counts: list[int], now: float, scoring: Scoring
) -> Consolidation | None:
    """Moves that let ``job`` (``counts`` pods per group) start in one domain now, or None."""
    level = required_level(job)
    if level is None:
        return None
    key = (job.groups, tuple(counts), job.priority)
    memo = memo_of(state).failed_consolidations
    if len(memo) > MEMO_LIMIT:
        memo.clear()
    epoch = state.epoch
    remembered = memo.get(key)
    if remembered is not None and remembered[0] == epoch and remembered[1] == now:
        return None
    need = sum(g.whole_gpus * n for g, n in zip(job.groups, counts))
    candidates = _candidate_domains(state, job, level, need, now)
    # What the search reads besides the cluster (the epoch): which domains, which movers in which
    # order (the time moves both: the jobs started this moment are no movers, and the work each
    # would lose orders them). The same cluster and the same candidates fail the same way.
    tried = tuple((index, tuple(v.id for v in movers)) for index, movers in candidates)
    if remembered is not None and remembered[0] == epoch and remembered[2] == tried:
        memo[key] = (epoch, now, tried)
        return None
    placer = _gang_fits(state, job, counts, scoring) if candidates else None
    if placer is not None:
        placer.undo(job)
        return None  # it fits as things are: no need to move anything
    for index, movers in candidates:
        room = _room_signature(state, job, counts, level, index, movers)
        if room is not None and memo.get((key, index)) == room:
            continue  # this domain had no room with these movers gone, and nothing it holds moved
        found = _try_domain(state, job, counts, movers, now, scoring, level, index)
        if found == Miss.NO_ROOM and room is not None:
            memo[(key, index)] = room
        if not isinstance(found, Miss):
            gang, moves = found
            bound = {f"{g.name}-" for g in job.groups if g.topology_level == level}  # pods are named group-k
            first = next(p for p in gang if p.pod.rsplit("-", 1)[0] + "-" in bound)
            landed = state.nodes[first.node_id].domains[level]  # where the freed room was, or better
            return Consolidation(state.domains[level][landed].name, state.levels[level], gang, moves)
    memo[key] = (epoch, now, tried)
    return None


def _candidate_domains(
    state: ClusterState, job: Job, level: int, need: int, now: float
) -> list[tuple[int, list[Job]]]:
    """Domains whose free GPUs plus those of their movable jobs could hold the gang, with those
    jobs least work lost first; the domains needing the fewest GPUs moved first."""
    # whole GPUs of preemptible jobs of no higher priority, per domain, from the state's index:
    # an upper bound (it counts jobs started this moment too) that rules out most domains unread
    bound: dict[int, int] = {}
    for (_, priority), per_level in state.preemptible_domains.items():
        if priority <= job.priority:
            for index, gpus in per_level[level].items():
                bound[index] = bound.get(index, 0) + gpus
    domains = state.domains[level]
    worth: list[tuple[int, int]] = []
    for index, gpus in bound.items():
        domain = domains[index]
        missing = need - domain.whole_free
        if 0 < missing <= gpus and domain.gpu_total >= need and domain.labelled:
            worth.append((missing, index))
    worth.sort()
    out: list[tuple[int, int, list[Job]]] = []
    for missing, index in worth:
        if len(out) >= MAX_DOMAINS:
            break
        domain = domains[index]
        on_domain: dict[int, int] = {}
        for nid in domain.node_ids:
            node = state.nodes[nid]
            if not node.schedulable:
                continue
            for jid in node.jobs:
                v = state.jobs[jid]
                if _movable(state, job, v, now):
                    on_domain[jid] = on_domain.get(jid, 0) + sum(
                        len(p.gpus) for p in v.current_run.placements if p.node_id == nid  # type: ignore[union-attr]
                    )
        if sum(on_domain.values()) < missing:
            continue
        movers = sorted((state.jobs[j] for j in on_domain), key=lambda v: (v.work_at_risk(now), -on_domain[v.id], v.id))
        out.append((missing, index, movers[:MAX_MOVERS]))
    return [(index, movers) for _, index, movers in out]


def _room_signature(state: ClusterState, job: Job, counts: list[int], level: int, domain: int, movers: list[Job]) -> tuple | None:
    """Everything ``_Room.fits`` reads while ``_try_domain`` lifts ``movers`` for a gang in
    ``domain``: the free room of every node of the domains it touches, the movers and where each
    runs, and the nodes' own version (labels, taints, cordons: ``change_counter``). Equal
    signatures, the same answer to whether the gang has room, whatever else changed in the
    cluster. None where ``_Room`` does not answer for the gang (a trial placement does, over the
    whole state)."""
    if not _Room.answers_for(job, counts, level):
        return None
    nodes, domains = state.nodes, state.domains[level]
    touched = {domain} | {nodes[p.node_id].domains[level] for v in movers for p in v.current_run.placements}  # type: ignore[union-attr]
    room = tuple(
        (nid, n.cpu_free, n.mem_free, n.whole_free, tuple(n.gpu_free))
        for d in sorted(touched) for nid in domains[d].node_ids for n in (nodes[nid],)
    )
    who = tuple(
        (v.id, run.start, tuple((p.node_id, tuple(p.gpus), p.share, p.cpu, p.memory) for p in run.placements))
        for v in movers for run in (v.current_run,) if run is not None
    )
    return (state.change_counter, room, who)


def _gang_fits(state: ClusterState, job: Job, counts: list[int], scoring: Scoring,
               gone: frozenset[int] = frozenset()) -> Placer | None:
    """The gang placed on the state, the movers ``gone`` (lifted) counting as gone for its pod
    rules as they do for capacity (a repelling pod moved away frees the rule, as in preemption)."""
    placer = Placer(state, scoring=scoring, gone=gone)
    return placer if placer.place_gang(job, counts) else None


class _Lifting:
    """Movers lifted off the state itself, and a trial placement of the gang to ask whether it
    fits: for any gang (see ``_Room`` for the common one, asked without changing the state)."""

    def __init__(self, state: ClusterState, job: Job, counts: list[int], scoring: Scoring, charged: dict[int, Vec]) -> None:
        self.state, self.job, self.counts, self.scoring, self.charged = state, job, counts, scoring, charged
        #: the movers lifted now: gone for the gang's pod rules
        self.lifted: set[int] = set()

    def lift(self, v: Job) -> None:
        lift_victim(self.state, v)
        self.lifted.add(v.id)

    def drop(self, v: Job) -> None:
        restore_victim(self.state, v, self.charged[v.id])
        self.lifted.discard(v.id)

    def fits(self) -> bool:
        placer = _gang_fits(self.state, self.job, self.counts, self.scoring, frozenset(self.lifted))
        if placer is None:
            return False
        placer.undo(self.job)
        return True

    def lift_for_real(self, needed: list[Job]) -> None:
        """Make the state the one asked about: the ``needed`` movers are lifted already."""

    def strands(self, needed: list[Job]) -> bool:
        """Whether some needed mover surely fits nowhere once the gang took its room (False:
        it may fit, place it to know)."""
        return False


class _Room(_Lifting):
    """For a gang of one group of whole-GPU pods that requires a domain at ``level``: the free
    room of the nodes the movers run on, as it would be with the lifted ones gone, kept beside
    the state, which stays untouched until the movers needed are known (``lift_for_real``).

    The gang fitted nowhere before any mover was lifted, and lifting changes only the domains
    (at ``level``) the movers ran in. ``Placer`` puts such a gang in a domain only if the domain
    can hold all its pods, pod by pod on nodes with room, each pod taking exactly one pod's room;
    so it fits exactly when one of those domains has room for all of them by
    ``Placer._domain_capacity``'s count, which ``fits`` makes over this room."""

    def __init__(
        self, state: ClusterState, job: Job, counts: list[int], scoring: Scoring, charged: dict[int, Vec],
        level: int, domains: list[int],
    ) -> None:
        super().__init__(state, job, counts, scoring, charged)
        [(self.pod, self.n)] = [(g, n) for g, n in zip(job.groups, counts) if n]
        self.level, self.domains = level, domains
        self.need = self.pod.whole_gpus * self.n
        #: node id -> [CPU free, memory free, whole GPUs free, free milli of each GPU]
        self.free: dict[int, list] = {}
        #: domain index -> change of its schedulable nodes' whole GPUs free
        self.whole_delta: dict[int, int] = {}

    @staticmethod
    def answers_for(job: Job, counts: list[int], level: int) -> bool:
        """Whether the gang is one group of whole-GPU pods that requires a domain at ``level``, with
        no pod rules (room alone cannot tell whether those hold)."""
        groups = [g for g, n in zip(job.groups, counts) if n]
        return (len(groups) == 1 and bool(groups[0].whole_gpus) and groups[0].topology_mode == TopologyMode.REQUIRED
                and groups[0].topology_level == level and groups[0].rules is None)

    @classmethod
    def of(
        cls, state: ClusterState, job: Job, counts: list[int], scoring: Scoring, charged: dict[int, Vec],
        level: int, domain: int, movers: list[Job],
    ) -> _Lifting:
        if not cls.answers_for(job, counts, level):
            return _Lifting(state, job, counts, scoring, charged)
        nodes = state.nodes
        touched = {domain} | {nodes[p.node_id].domains[level] for v in movers for p in v.current_run.placements}  # type: ignore[union-attr]
        return cls(state, job, counts, scoring, charged, level, sorted(touched))

    def lift(self, v: Job) -> None:
        self._move(v, 1)

    def drop(self, v: Job) -> None:
        self._move(v, -1)

    def _move(self, v: Job, sign: int) -> None:
        """What ``ClusterState.release`` (``sign`` 1) or ``allocate`` (-1) does to the room."""
        nodes = self.state.nodes
        for p in v.current_run.placements:  # type: ignore[union-attr]
            room = self.free.get(p.node_id)
            node = nodes[p.node_id]
            if room is None:
                room = self.free[p.node_id] = [node.cpu_free, node.mem_free, node.whole_free, list(node.gpu_free)]
            before = room[2]
            take = p.share or MILLI
            gpu_free = room[3]
            for i in p.gpus:
                if sign > 0:
                    gpu_free[i] += take
                    if gpu_free[i] == MILLI:
                        room[2] += 1
                else:
                    if gpu_free[i] == MILLI:
                        room[2] -= 1
                    gpu_free[i] -= take
            room[0] += sign * p.cpu
            room[1] += sign * p.memory
            if node.schedulable and room[2] != before:  # the state indexes schedulable nodes only
                d = node.domains[self.level]
                self.whole_delta[d] = self.whole_delta.get(d, 0) + room[2] - before

    def fits(self) -> bool:
        domains = self.state.domains[self.level]
        return any(
            domains[d].whole_free + self.whole_delta.get(d, 0) >= self.need and self._capacity(domains[d].node_ids) >= self.n
            for d in self.domains
        )

    def _capacity(self, node_ids: list[int]) -> int:
        """``Placer._domain_capacity`` (no guard) over the room (stops counting at ``n``)."""
        pod, nodes, count = self.pod, self.state.nodes, 0
        for nid in node_ids:
            node = nodes[nid]
            if not node.schedulable or not node_allowed(pod, node):
                continue
            room = self.free.get(nid)
            cpu, memory, whole = (room[0], room[1], room[2]) if room is not None else (node.cpu_free, node.mem_free, node.whole_free)
            fit = whole // pod.whole_gpus
            if pod.cpu:
                fit = min(fit, cpu // pod.cpu)
            if pod.memory:
                fit = min(fit, memory // pod.memory)
            count += fit
            if count >= self.n:
                return count
        return count

    def lift_for_real(self, needed: list[Job]) -> None:
        for v in needed:
            lift_victim(self.state, v)

    def strands(self, needed: list[Job]) -> bool:
        """A count that needs no placement, for movers of whole-GPU pods when the movers ran in
        the gang's domain alone: the gang fitted nowhere before and only that domain changed, so
        it lands there and leaves at most the domain's whole GPUs free (the needed movers lifted)
        less its own. A mover's pod of ``g`` GPUs needs one node with ``g`` whole GPUs free: one
        outside the domain (the state's buckets less the domain's ``free_hist``) or ``g`` left in
        it. Where some pod has neither, placing the movers fails, whatever the placer chooses."""
        if len(self.domains) != 1:
            return False
        [d] = self.domains
        domain = self.state.domains[self.level][d]
        left = domain.whole_free + self.whole_delta.get(d, 0) - self.need
        buckets = self.state.buckets.values()
        for v in needed:
            for g, n in zip(v.groups, gang_counts(v, False)):
                if not n:
                    continue
                if not g.whole_gpus or g.whole_gpus <= left:
                    return False  # a share of a GPU, or room left beside the gang: place it
                hist = domain.free_hist
                outside = sum(len(b[k]) for b in buckets for k in range(g.whole_gpus, len(b))) - sum(hist[g.whole_gpus:])
                if outside <= 0:
                    return True
        return False


def _try_domain(
    state: ClusterState, job: Job, counts: list[int], movers: list[Job], now: float, scoring: Scoring, level: int, domain: int
) -> tuple[list[PodPlacement], list[Move]] | Miss:
    charged = {v.id: v.charged for v in movers}
    trial = _Room.of(state, job, counts, scoring, charged, level, domain, movers)
    lifted: list[Job] = []
    fitted = False
    for v in movers:
        trial.lift(v)
        lifted.append(v)
        if trial.fits():
            fitted = True
            break
    if not fitted:
        for v in reversed(lifted):
            trial.drop(v)
        return Miss.NO_ROOM
    # Put back every mover the gang can spare (the last lifted is needed: it made the fit).
    needed: list[Job] = [lifted[-1]]
    for v in reversed(lifted[:-1]):
        trial.drop(v)
        if not trial.fits():
            trial.lift(v)
            needed.append(v)
    if trial.strands(needed):
        return Miss.NOWHERE_ELSE  # nothing lifted for real yet: nothing to undo
    trial.lift_for_real(needed)
    placer = _gang_fits(state, job, counts, scoring, frozenset(v.id for v in needed))
    assert placer is not None  # the state is the one that fitted last
    # Every mover must fit elsewhere now, the biggest first.
    placed: list[tuple[Job, Placer]] = []
    for v in sorted(needed, key=lambda v: (-v.request[0], v.id)):
        mover = Placer(state, scoring=scoring)
        if not mover.place_gang(v, gang_counts(v, False)):
            break
        placed.append((v, mover))
    ok = len(placed) == len(needed)
    moves = [Move(v, list(v.current_run.placements), list(p.taken), charged[v.id]) for v, p in placed]  # type: ignore[union-attr]
    gang = list(placer.taken)
    for v, mover in reversed(placed):
        mover.undo(v)
    placer.undo(job)
    for v in reversed(needed):
        restore_victim(state, v, charged[v.id])
    return (gang, moves) if ok else Miss.NOWHERE_ELSE


def carry_out(found: Consolidation, job: Job, state: ClusterState, engine: Admitter, now: float, result: CycleResult) -> None:
    """Stop the movers, start ``job`` in the room made for it and start each mover on its new
    nodes, all at ``now``; on a cluster (``MoveMode.ON_RETURN``) keep each mover's new room for
    it until its pods come back instead. Say so in the audit trail (the events view)."""
    on_return = engine.moves == MoveMode.ON_RETURN
    lost = [engine.stop(m.job, now, EndReason.PREEMPTED, job.name, result, note=False) for m in found.moves]
    if on_return:
        for move in found.moves:
            engine.withdraw(move.job)  # it queues again once its owner has created its pods anew
    state.place(job, found.gang)
    engine.admit(job, found.gang, request_of(job, gang_counts(job, False)), now, result)
    where = f"{found.level_name}={found.domain}"
    for move, seconds in zip(found.moves, lost):
        before, after = _node_names(state, move.before), _node_names(state, move.after)
        if on_return:
            state.keep_room(KeptRoom(move.job.id, move.after, move.charged, now + ROOM_KEPT_FOR, job.name), now)
            text = (
                f"moving from {before} to {after} so that {job.name} could start in {where}; lost "
                f"{fmt.duration(seconds)} of work; its room on {after} is kept for "
                f"{fmt.duration(ROOM_KEPT_FOR)} until its pods come back"
            )
        else:
            state.place(move.job, move.after)
            engine.admit(move.job, move.after, move.charged, now, result)
            text = f"moved from {before} to {after} so that {job.name} could start in {where}; lost {fmt.duration(seconds)} of work"
        state.audit.append(AuditEntry(now, "scheduler", AuditAction.MOVE, move.job.name, text))
    moved = ", ".join(m.job.name for m in found.moves)
    state.audit.append(AuditEntry(now, "scheduler", AuditAction.MAKE_ROOM, job.name, f"started in {where} after moving {moved}"))


def return_to_kept_rooms(state: ClusterState, engine: Admitter, now: float, result: CycleResult) -> None:
    """On a cluster: start each moved job whose pods have come back (it is queued again) in the
    room kept for it; give back the rooms whose time is up, or that their job no longer fits
    (its pods changed). Each outcome is noted in the audit trail. (A room whose move was called
    off is given back by the backend.)"""
    for job_id, room in list(state.kept_rooms.items()):
        job = state.jobs[job_id]
        where = _node_names(state, room.placements)
        back = job.submitted and job.current_run is None and job.state != JobState.FINISHED
        if not back or state.waits_on_operator(job):
            # not back yet: its old pods may still be going (a cluster backend keeps the room
            # across its view's rebuilds and hands it to the job its new pods make), or it waits
            # for an operator
            if now >= room.until:
                state.give_back_room(job_id, now)
                why = "it is held or awaits approval" if back else f"its pods did not come back within {fmt.duration(ROOM_KEPT_FOR)}"
                state.audit.append(AuditEntry(now, "scheduler", AuditAction.KEEP_ROOM, job.name, f"gave back the room kept on {where}: {why}"))
            continue
        state.give_back_room(job_id, now)
        placements = [PodPlacement(p.pod, p.node_id, list(p.gpus), p.share, p.cpu, p.memory, extra=p.extra) for p in room.placements]
        if not _same_pods(job, placements) or not state.room_for(placements):
            why = "its pods ask for other resources now" if not _same_pods(job, placements) else "a node there changed"
            state.audit.append(AuditEntry(now, "scheduler", AuditAction.KEEP_ROOM, job.name, f"could not start again on {where}: {why}; it waits in its queue"))
            continue
        state.place(job, placements)
        engine.admit(job, placements, room.charged, now, result)
        result.decisions[-1].returning = room
        state.audit.append(AuditEntry(
            now, "scheduler", AuditAction.KEEP_ROOM, job.name,
            f"started again on {where}, in the room kept for it since it was moved for {room.made_room_for}",
        ))


def _same_pods(job: Job, placements: list[PodPlacement]) -> bool:
    """Whether ``placements`` (pods named ``<group>-<k>``) still fit what ``job``'s groups ask,
    each pod of its whole gang placed once."""
    groups = {g.name: g for g in job.groups}
    seen: set[str] = set()
    for p in placements:
        name, _, k = p.pod.rpartition("-")
        group = groups.get(name)
        if group is None or not k.isdigit() or int(k) >= group.count or p.pod in seen:
            return False
        seen.add(p.pod)
        share = group.share
        if (p.share, len(p.gpus), p.cpu, p.memory) != (share, 1 if share else group.whole_gpus, group.cpu, group.memory):
            return False
    return len(seen) >= job.min_count


def _node_names(state: ClusterState, placements: list[PodPlacement]) -> str:
    return ",".join(dict.fromkeys(state.nodes[p.node_id].name for p in placements))
