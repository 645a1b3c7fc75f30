"""Preemption: the smallest set of running jobs to evict so that a pending job fits.

Candidates come only from where the preemptor's queue policy allows (Kueue's three knobs):

- ``withinQueue``: jobs of the same queue with lower priority (``LowerPriority``), or also equal
  priority submitted later (``LowerOrNewerEqualPriority``);
- ``reclaimWithinCohort``: when the preemptor stays within its nominal quota, jobs of other queues
  of its cohort that are borrowing (``Any``, or only ``LowerPriority``);
- ``borrowWithinCohort``: when the preemptor must borrow, lower-priority jobs of borrowing queues.

Jobs marked ``preemptible: false`` are never victims, nor is a job admitted at this same moment
or one still ``settling`` (its binds on their way);
a victim gang is always evicted whole.
Candidates are ordered as Kueue does, with our tie-breaks on harm: other queues first (the
queue furthest above its fair share first), lower priority first, jobs whose pods are made anew
after an eviction first (``Job.comes_back``: on a cluster, not a bare pod nor a batch Job that
the eviction would fail), less work lost since the last checkpoint first, most recently admitted
first. They are removed one by one until the preemptor
fits; then a minimising pass puts back every victim that is not needed. A lifted victim counts
as gone for the preemptor's pod rules too (``Placer.gone``): evicting pods that block a required
anti-affinity or a spread makes room as freeing capacity does, and a victim is kept only if it
frees one or the other. Every check runs on the
state itself and is undone, so nothing changes unless the caller evicts the victims it is given.

A preemptor that would run past a backfill reservation's start, and does not outrank its holder,
is searched for under the reservation's limits (``HolderLimit``): it is placed within the guard
and must leave the holder its quota, as any job started beside a reservation must. Preemption
never breaks backfill's promise; only a higher-priority job may.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import IntEnum

from ..enums import BorrowWithinCohort, ReclaimWithinCohort, TopologyMode, WithinQueue
from ..memo import memo_of, most_whole_free
from ..state import ClusterState, Job, Queue, Vec
from . import quota
from .backfill import quick_reject
from .placement import Guard, Placer

MAX_CANDIDATES = 64
#: failed searches remembered at most (a busy cluster has a few dozen kinds of waiting job)
MEMO_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class HolderLimit:
    """What a preemptor must leave a backfill reservation's holder: the nodes of its guard and,
    where the preemptor draws on the same quota, the holder's request."""

    guard: Guard
    #: the reservation (holder id, planned start): searches under other limits are other searches
    key: tuple[int, float]
    #: the holder's queue, request and start, or None where the preemptor's quota is not the holder's
    holder_quota: quota.HeldQuota | None = None


class Rule(IntEnum):
    """Which running jobs of one queue a preemptor may take."""

    NONE = 0
    LOWER = 1  # lower priority only
    LOWER_OR_NEWER = 2  # lower priority, or equal priority and submitted later
    ANY = 3


def queue_rule(state: ClusterState, job: Job, victim_queue: Queue, borrowing: bool) -> Rule:
    """The preemptor's queue policy applied to the running jobs of ``victim_queue``."""
    q = state.queues[job.queue]
    if victim_queue.name == job.queue:
        return {
            WithinQueue.LOWER_PRIORITY: Rule.LOWER,
            WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY: Rule.LOWER_OR_NEWER,
        }.get(q.within_queue, Rule.NONE)
    if q.cohort is None or victim_queue.cohort != q.cohort or not quota.is_borrowing(victim_queue):
        return Rule.NONE
    if borrowing:
        return Rule.LOWER if q.borrow_within_cohort == BorrowWithinCohort.LOWER_PRIORITY else Rule.NONE
    return {ReclaimWithinCohort.ANY: Rule.ANY, ReclaimWithinCohort.LOWER_PRIORITY: Rule.LOWER}.get(
        q.reclaim_within_cohort, Rule.NONE
    )


def _passes(rule: Rule, job: Job, v: Job) -> bool:
    if rule == Rule.ANY:
        return True
    if v.priority < job.priority:
        return True
    return rule == Rule.LOWER_OR_NEWER and v.priority == job.priority and (v.submit, v.seq) > (job.submit, job.seq)


def _bound(state: ClusterState, job: Job, counts: list[int], request: Vec) -> bool:
    """From per-(queue, priority) totals alone: could evicting every allowed job be enough (in
    GPUs, quota, and GPUs within one domain where a group requires one)?"""
    q = state.queues[job.queue]
    borrowing = quota.needs_borrowing(q, request)
    rules = {name: queue_rule(state, job, vq, borrowing) for name, vq in state.queues.items()}
    gpus = 0
    allowed: list[tuple[str, int]] = []
    for (name, prio), t in state.preemptible_totals.items():
        rule = rules[name]
        if rule == Rule.NONE or not t[1] and not t[2] and not t[3]:
            continue
        if rule == Rule.ANY or prio < job.priority or (rule == Rule.LOWER_OR_NEWER and prio == job.priority):
            gpus += t[0]
            allowed.append((name, prio))
    if not allowed:
        return False
    if sum(g.whole_gpus * n for g, n in zip(job.groups, counts)) > state.total_whole_free + gpus:
        return False
    return _quota_fits_without(state, q, request, _charged_by_queue(state, allowed)) and _room_in_a_domain(state, job, counts, allowed)


def _charged_by_queue(state: ClusterState, keys: list[tuple[str, int]]) -> dict[str, list[int]]:
    """What the preemptible jobs of these (queue, priority) buckets are charged, summed by queue."""
    out: dict[str, list[int]] = {}
    for name, prio in keys:
        t = state.preemptible_totals[(name, prio)]
        total = out.setdefault(name, [0, 0, 0])
        for r in range(3):
            total[r] += t[r + 1]
    return out


def _quota_fits_without(state: ClusterState, q: Queue, request: Vec, charged: dict[str, list[int]]) -> bool:
    """Would ``request`` fit queue ``q`` if ``charged`` (gpu, cpu, memory by queue) were given back?
    The usage is changed for the check and put back."""
    for name, total in charged.items():
        usage = state.queues[name].usage
        for r in range(3):
            usage[r] -= total[r]
    try:
        return quota.check(state, q, request).fits
    finally:
        for name, total in charged.items():
            usage = state.queues[name].usage
            for r in range(3):
                usage[r] += total[r]


def _bound_of_first_buckets(
    state: ClusterState, job: Job, counts: list[int], request: Vec, now: float, ordered: OrderedBuckets
) -> bool:
    """``_bound`` over only the (queue, priority) buckets the candidate list can reach: when more
    than ``MAX_CANDIDATES`` jobs may be taken, the list is cut within the first buckets of its
    order (``_candidates``), so what the later ones hold cannot help. The buckets' totals are
    upper bounds of what their candidates hold (a job admitted at this moment is no candidate),
    so a bound that fails here fails for the candidates too. Counts the jobs the list would take,
    so it reaches as far as the list would."""
    buckets, rules = ordered
    jobs = state.jobs
    taken = 0
    reached: list[tuple[str, int]] = []
    for i, (order, name, prio) in enumerate(buckets):
        if taken >= MAX_CANDIDATES and order != buckets[i - 1][0]:
            break
        newer_only = prio == job.priority and rules[name] == Rule.LOWER_OR_NEWER
        for jid in state.preemptible_jobs[(name, prio)]:
            v = jobs[jid]
            if v.runs[-1].start < now and (not newer_only or (v.submit, v.seq) > (job.submit, job.seq)):
                taken += 1
        reached.append((name, prio))
    else:
        return True  # the list is not cut: _bound has said all there is
    freed = sum(state.preemptible_totals[k][0] for k in reached)
    if sum(g.whole_gpus * n for g, n in zip(job.groups, counts)) > state.total_whole_free + freed:
        return False
    q = state.queues[job.queue]
    return _quota_fits_without(state, q, request, _charged_by_queue(state, reached)) and _room_in_a_domain(state, job, counts, reached)


def _room_in_a_domain(state: ClusterState, job: Job, counts: list[int], keys: list[tuple[str, int]]) -> bool:
    """For each group that requires one topology domain: is there a domain where its free GPUs
    plus those every allowed job holds there would be enough?"""
    for g, n in zip(job.groups, counts):
        if g.topology_mode != TopologyMode.REQUIRED or g.topology_level is None or not g.whole_gpus:
            continue
        need = g.whole_gpus * n
        level = g.topology_level
        domains = state.domains[level]
        if most_whole_free(state, level) >= need:
            continue
        extra: dict[int, int] = {}
        for key in keys:
            for domain, gpus in state.preemptible_domains[key][level].items():
                extra[domain] = extra.get(domain, 0) + gpus
        if not any(domains[d].whole_free + gpus >= need for d, gpus in extra.items()):
            return False
    return True


def candidates(state: ClusterState, job: Job, request: Vec, now: float) -> list[Job]:
    """Running jobs the policy lets ``job`` preempt, best victims first."""
    return _candidates(state, job, request, now)[0]


#: the (queue, priority) buckets ``job`` may take from, in the candidate order's first keys, and
#: the rule for each queue
OrderedBuckets = tuple[list[tuple[tuple[bool, float, int], str, int]], dict[str, Rule]]


def _ordered_buckets(state: ClusterState, job: Job, request: Vec) -> OrderedBuckets:
    """The buckets of ``state.preemptible_jobs`` the policy lets ``job`` take from, ordered as
    the candidates are: own queue last, the queue furthest above its share first, lower priority
    first."""
    borrowing = quota.needs_borrowing(state.queues[job.queue], request)
    rules: dict[str, Rule] = {}
    shares: dict[str, float] = {}
    buckets: list[tuple[tuple[bool, float, int], str, int]] = []
    for (name, prio), ids in state.preemptible_jobs.items():
        if not ids:
            continue
        rule = rules.get(name)
        if rule is None:
            rule = rules[name] = queue_rule(state, job, state.queues[name], borrowing)
        if rule == Rule.NONE:
            continue
        if rule == Rule.ANY or prio < job.priority or (rule == Rule.LOWER_OR_NEWER and prio == job.priority):
            share = shares.get(name)
            if share is None:
                share = shares[name] = quota.dominant_share(state, state.queues[name])
            buckets.append(((name == job.queue, -share, prio), name, prio))
    buckets.sort()
    return buckets, rules


def _candidates(
    state: ClusterState, job: Job, request: Vec, now: float, ordered: OrderedBuckets | None = None
) -> tuple[list[Job], bool]:
    """``candidates``, and whether the list depends on ``now``: some allowed job was admitted at
    this very moment (and left out), or the list was cut to ``MAX_CANDIDATES`` by an order that
    moves with time (work at risk).

    The order's first keys (own queue last, the queue furthest above its share first, lower
    priority first) are those of a (queue, priority) bucket of ``state.preemptible_jobs``: the
    buckets are taken in that order, and once ``MAX_CANDIDATES`` are in hand no later bucket can
    place a job in the list, so its jobs are not looked at.
    """
    buckets, rules = ordered if ordered is not None else _ordered_buckets(state, job, request)
    timed = False
    jobs = state.jobs
    keyed: list[tuple[bool, float, int, bool, float, int, int]] = []
    for i, (order, name, prio) in enumerate(buckets):
        if len(keyed) >= MAX_CANDIDATES and order != buckets[i - 1][0]:
            timed = True  # cut to MAX_CANDIDATES: later buckets cannot get in
            break
        same, neg_share, _ = order
        newer_only = prio == job.priority and rules[name] == Rule.LOWER_OR_NEWER
        for jid in state.preemptible_jobs[(name, prio)]:
            v = jobs[jid]
            if newer_only and (v.submit, v.seq) <= (job.submit, job.seq):
                continue
            start = v.runs[-1].start
            # A job admitted at this very moment is left alone (no zero-length runs, no thrash),
            # and so is one still settling (a search that failed for it may succeed once it is)
            if start >= now or v.settling:
                timed = True
                continue
            elapsed = now - start
            every = v.checkpoint_every
            keyed.append((same, neg_share, prio, not v.comes_back, elapsed % every if every else elapsed, -v.admitted_seq, jid))
    if len(keyed) > MAX_CANDIDATES:
        timed = True
        keyed = heapq.nsmallest(MAX_CANDIDATES, keyed)
    else:
        keyed.sort()
    return [jobs[k[-1]] for k in keyed], timed


def lift_victim(state: ClusterState, v: Job) -> None:
    """Take a running job's placements and quota charge off the state, to try the room without it
    (``restore_victim`` puts it back); preemption and consolidation both search this way."""
    run = v.current_run
    assert run is not None
    state.unplace(v, run.placements)
    state.uncharge(v)


def restore_victim(state: ClusterState, v: Job, charged: Vec) -> None:
    """Undo ``lift_victim``: place the job back where it runs and charge it ``charged`` again."""
    run = v.current_run
    assert run is not None
    state.place(v, run.placements)
    state.charge(v, charged)


def _fits(state: ClusterState, job: Job, counts: list[int], request: Vec, limit: HolderLimit | None = None,
          gone: frozenset[int] = frozenset()) -> bool:
    """Whether ``job`` fits as the state is, the jobs ``gone`` (lifted) counting as gone for its
    pod rules as they do for capacity."""
    queue = state.queues[job.queue]
    if not quota.check(state, queue, request).fits:
        return False
    if limit is not None and limit.holder_quota is not None and not quota.fits_at_start(state, queue, request, True, limit.holder_quota):
        return False
    if quick_reject(state, job, counts):
        return False
    placer = Placer(state, limit.guard if limit is not None else None, gone=gone)
    if placer.place_gang(job, counts):
        placer.undo(job)
        return True
    return False


class _DomainGate:
    """For a gang of one group of whole-GPU pods that requires one topology domain: the domains
    that could take it now, kept up to date as candidates are lifted one by one (a lift changes
    only the domains its pods were in). While there is none, placing it fails (``Placer`` tries
    exactly those domains, and places nothing in one that cannot hold every pod), so the lifting
    loop need not try."""

    def __init__(self, state: ClusterState, pod, n: int) -> None:  # type: ignore[no-untyped-def]
        self.state = state
        self.pod = pod
        self.n = n
        self.level: int = pod.topology_level
        self.need = pod.whole_gpus * n
        self.placer = Placer(state)
        self.able: set[int] | None = None

    @classmethod
    def of(cls, state: ClusterState, job: Job, counts: list[int]) -> _DomainGate | None:
        if len(job.groups) != 1 or not counts[0]:
            return None
        pod = job.groups[0]
        if not pod.whole_gpus or pod.topology_mode != TopologyMode.REQUIRED or pod.topology_level is None:
            return None
        return cls(state, pod, counts[0])

    def _able(self, domain: int) -> bool:
        dom = self.state.domains[self.level][domain]
        return dom.whole_free >= self.need and self.placer._domain_capacity(self.pod, dom.node_ids, self.n) >= self.n

    def may_fit(self, lifted: Job) -> bool:
        """After ``lifted`` came off the state: could some domain take the gang?"""
        if self.able is None:
            self.able = {d for d in range(len(self.state.domains[self.level])) if self._able(d)}
        else:
            nodes = self.state.nodes
            for d in {nodes[p.node_id].domains[self.level] for p in lifted.current_run.placements}:  # type: ignore[union-attr]
                if self._able(d):
                    self.able.add(d)
                else:
                    self.able.discard(d)
        return bool(self.able)


def _could_fit(state: ClusterState, job: Job, counts: list[int], request: Vec, cands: list[Job]) -> bool:
    """Cheap bounds: with every candidate gone, could quota and GPUs (per domain) suffice?"""
    charged: dict[str, list[int]] = {}
    for v in cands:
        total = charged.setdefault(v.queue, [0, 0, 0])
        for r in range(3):
            total[r] += v.charged[r]
    if not _quota_fits_without(state, state.queues[job.queue], request, charged):
        return False
    nodes = state.nodes
    freed: dict[int, int] = {}
    for v in cands:
        for p in v.current_run.placements:  # type: ignore[union-attr]
            if not p.share and nodes[p.node_id].schedulable:
                freed[p.node_id] = freed.get(p.node_id, 0) + len(p.gpus)
    need = sum(g.whole_gpus * n for g, n in zip(job.groups, counts))
    if need > state.total_whole_free + sum(freed.values()):
        return False
    for g, n in zip(job.groups, counts):
        if g.topology_mode != TopologyMode.REQUIRED or g.topology_level is None or not g.whole_gpus:
            continue
        level = g.topology_level
        extra: dict[int, int] = {}
        for nid, k in freed.items():
            d = nodes[nid].domains[level]
            extra[d] = extra.get(d, 0) + k
        domains = state.domains[level]
        best = max(most_whole_free(state, level), max((domains[i].whole_free + k for i, k in extra.items()), default=0))
        if best < g.whole_gpus * n:
            return False
    return True


def _search_key(state: ClusterState, job: Job, counts: list[int], request: Vec, limit: HolderLimit | None) -> tuple:
    """What a search's outcome depends on besides the cluster (the epoch) and the time: the
    preemptor's queue, priority and gang, the reservation it must leave room for, and its submit
    order where newer equal-priority jobs are fair game."""
    key: tuple = (job.queue, job.priority, request, job.groups, tuple(counts), limit.key if limit is not None else None)
    if state.queues[job.queue].within_queue == WithinQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
        key += (job.submit, job.seq)
    return key


def _ids(jobs: list[Job], job: Job) -> frozenset[int]:
    """The ids of the jobs lifted so far, for ``job``'s pod rules (empty when it has none)."""
    if all(g.rules is None for g in job.groups):
        return frozenset()
    return frozenset(v.id for v in jobs)


def find_victims(
    state: ClusterState, job: Job, counts: list[int], request: Vec, now: float, limit: HolderLimit | None = None
) -> list[Job] | None:
    """A minimal list of jobs whose eviction lets ``job`` fit (within ``limit`` when given), or
    None when none does.

    A search that fails on the aggregate bounds alone (``_bound``, ``_could_fit``) is remembered
    in the cycle's memo (``memo.CycleMemo``) until the cluster changes (``state.epoch``): nothing else it
    looked at can change, unless its candidates depended on the time, in which case it is
    remembered for this moment only. Busy clusters fail most searches, every cycle, this way.
    """
    key = _search_key(state, job, counts, request, limit)
    epoch = state.epoch
    memo = memo_of(state).failed_searches
    if len(memo) > MEMO_LIMIT:
        memo.clear()
    remembered = memo.get(key)
    if remembered is not None and remembered[0] == epoch and (remembered[1] is None or remembered[1] == now):
        return None
    if not _bound(state, job, counts, request):
        memo[key] = (epoch, None)
        return None
    ordered = _ordered_buckets(state, job, request)
    if not _bound_of_first_buckets(state, job, counts, request, now, ordered):
        memo[key] = (epoch, now)
        return None
    cands, timed = _candidates(state, job, request, now, ordered)
    if not cands or not _could_fit(state, job, counts, request, cands):
        memo[key] = (epoch, now if timed else None)
        return None
    charged = {v.id: v.charged for v in cands}
    lifted: list[Job] = []
    found = False
    gate = _DomainGate.of(state, job, counts)
    for v in cands:
        lift_victim(state, v)
        lifted.append(v)
        if gate is not None and not gate.may_fit(v):
            continue  # no domain could take the gang yet: _fits would say no, touching nothing
        if _fits(state, job, counts, request, limit, _ids(lifted, job)):
            found = True
            break
    if not found:
        for v in reversed(lifted):
            restore_victim(state, v, charged[v.id])
        return None
    # Minimising pass: put back each victim (last chosen first) that the preemptor can spare.
    needed: list[Job] = []
    out = set(_ids(lifted, job))
    for v in reversed(lifted[:-1]):
        restore_victim(state, v, charged[v.id])
        out.discard(v.id)
        if not _fits(state, job, counts, request, limit, frozenset(out)):
            out.add(v.id)
            lift_victim(state, v)
            needed.append(v)
    needed.append(lifted[-1])
    for v in needed:
        restore_victim(state, v, charged[v.id])
    return list(reversed(needed))
