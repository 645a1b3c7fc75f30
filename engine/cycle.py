"""One scheduling cycle: the state in, decisions out (bind, evict), reasons on every pending job.

The cycle walks pending jobs in admission order (``policy.ordering``). For each it checks, in
order: hold and approval; quota (``policy.quota``), with preemption when the queue's policy allows
reclaiming; placement of the whole gang (``policy.placement``), honouring the backfill
reservation; preemption for capacity; and finally records why the job waits. One blocked job
gets the backfill reservation (``policy.backfill``): with ``reserve_for: first-blocked`` the first
the cycle finds blocked for capacity; with ``most-urgent`` (usher's) the job that was blocked for
capacity in the last cycle with the highest priority, then the oldest, planned before the walk;
when its planned start comes, the room is kept for it ahead of the fair-share order. Fair share
alone would never reserve for a big gang, whose queue's share after admitting it sorts it last.
As in Kueue, only the first blocked job of each queue may preempt in a cycle (the queue's head as
far as this cycle goes). Without gang admission the cycle is ``podcycle``'s instead.

Placements are *reserved* on the state as the cycle goes (later jobs see the capacity taken), and
returned as ``Bind`` decisions. A backend that cannot carry one out hands it back to
``Engine.unbind``, which undoes the reservation (the framework's Unreserve).

How a busy backlog stays cheap (kube-scheduler keeps an *activeQ* of pods to try, an
*unschedulablePods* pool of pods that failed, and *QueueingHints* that say which cluster event
may make such a pod schedulable again; usher's cycle does the same within a cycle, by kind):

- Jobs alike share a ``Plan`` (their attempts and memo keys), and a *kind*: queue, priority and
  gang. Verdicts are remembered per quota key, per gang shape (and reservation guard) and per
  preemption key; within a cycle capacity only shrinks and usage only grows, so a failure stays
  a failure until a preemption frees room (the event that clears every memo, like a hint that
  requeues every unschedulable pod).
- Once every attempt of a kind fails on remembered verdicts and nothing is left for its queue to
  do (no preemption attempt, no reservation), the kind is *settled* (the unschedulable pool):
  further jobs of it are only marked with its reason, with no quota check or placement tried,
  while the quota checks it passed still pass (an admission, the hint for quota, asks again).
- A kind that failed on quota alone is *stable* once no queue can preempt any more; a queue
  whose remaining jobs are all stable is finished in one pass without the heap.
- Once every (kind, guard) the jobs not reached yet can have is settled, the rest of the walk
  is written per reason cell at once (``_tail``; the guard values a cell's jobs can have are read
  off the estimated runtimes of the jobs it holds). A queue whose jobs left all come before any
  other queue's next job (its largest share below the heap's top) is written per cell on its
  own as soon as its kinds are settled: one queue's settled backlog does not wait, marked job by
  job, for a kind of another queue that the walk reaches only after it.
- The admission order's heap of queue heads is walked inline: a queue's next job goes on at
  once while its key is below every other queue's head, as the heap would pop it, so the order
  (and every decision) is the one ``policy.ordering.AdmissionOrder`` gives.

Across cycles, plans and kinds (``kinds``), failed preemption searches (until the cluster's
``epoch`` changes) and the like are remembered in the cycle's memo (``memo``), and the backfill
plan while no job has started or stopped (``reservations``).

The walk (``_GangCycle``) is one class: its methods share the cycle's verdict tables (settled
kinds, passed quota, blocked queues), and the rules for when a remembered verdict may stand read
best in one place; that is why this module runs past 600 lines rather than split the class.
Its tails, which write the rest of a walk per reason cell, are its base
``cycle_cells.CellTails``, a module of their own.
"""

from __future__ import annotations

import heapq

from . import records
from .admission import Admitter, CycleResult, mark_waiting
from .cycle_cells import CellTails, Need, Settled
from .enums import (
    Approval,
    BorrowWithinCohort,
    EndReason,
    JobState,
    MoveMode,
    PendingReason,
    ReclaimWithinCohort,
    WithinQueue,
)
from .memo import memo_of
from .kinds import plan_of
from .podcycle import run_pod_cycle
from .reservations import BLOCKED_REASONS, CAPACITY_REASONS, held_back, most_urgent_blocked
from .reservations import reserve as _reserve
from .policy import quota
from .policy.quota import HeldQuota
from .policy.backfill import Reservation, quick_reject, reservation_now
from .policy.consolidation import carry_out, consolidation_for, return_to_kept_rooms
from .policy.ordering import AdmissionOrder
from .policy.placement import Placer, classify_failure, gang_counts
from .policy.preemption import HolderLimit, find_victims
from .plans import Attempt, Plan
from .policy.registry import Backfill, Policy, ReserveFor
from .state import ClusterState, Job, Queue, Vec

#: waiting jobs per reason cell above which a cycle marks the jobs it has not reached by cell
#: (below, marking them one by one costs less than looking for the moment it could stop)
CELLS_PAY_OFF = 16


def run_cycle(state: ClusterState, now: float, policy: Policy, engine: Admitter) -> CycleResult:
    if not policy.gang:
        return run_pod_cycle(state, now, policy, engine)
    return _GangCycle(state, now, policy, engine).run()


class _GangCycle(CellTails):
    """One gang cycle's walk; see the module docstring for the rules."""

    def __init__(self, state: ClusterState, now: float, policy: Policy, engine: Admitter) -> None:
        self.state = state
        self.now = now
        self.policy = policy
        self.engine = engine
        self.result = CycleResult()
        self.failed_shapes: dict[tuple[int, bool], PendingReason] = {}
        self.failed_quota: dict[int, PendingReason] = {}
        #: quota checks that passed since the last admission (usage only grows between admissions)
        self.passed_quota: set[int] = set()
        self.failed_preempt: set[int] = set()
        #: queues whose first blocked job already had its preemption attempt this cycle
        self.tried_preempt: set[str] = set()
        #: (kind, guarded) -> its verdict, once nothing but that verdict is left to find
        self.settled: dict[tuple[int, bool], Settled] = {}
        #: kinds whose verdict can no longer change in this cycle (a quota verdict, once no queue
        #: can preempt any more), and how many times that table has grown
        self.stable: dict[int, PendingReason] = {}
        self.stable_version = 0
        #: queues that may still make their preemption attempt in this cycle
        self.preemptors_left: set[str] = set()
        self.blocked: set[str] = set()
        self.reservation: Reservation | None = None
        #: reason stamps: a cell written at ``tail_at`` gives way to every job this cycle marks
        #: itself (at ``walk_at`` or later), and overrides what earlier cycles marked
        self.tail_at = records.reason_stamp()
        self.walk_at = records.reason_stamp()
        #: what the tail needs settled: (cell, kind, guard values), for the reservation it was
        #: computed under (``_tail_needs``)
        self.needs: list[Need] | None = None
        self.needs_for: Reservation | None = None
        #: the last visit settled the kind that kept the tail off (or any, when none is known):
        #: only then may the tail have become possible
        self.just_settled = False
        self.tail_blocker: int | None = None
        #: how many times ``settled`` has grown (a queue's tail is tried again only then)
        self.settled_version = 0
        #: queues whose rest the walk wrote by reason cells: the tail leaves their cells alone
        self.done: set[str] = set()
        #: per queue: the versions its last failed tail was tried at (``_finish_ahead``)
        self.ahead_tried: dict[str, tuple] = {}
        #: per queue: the usage its largest share was worked out at, and that share
        self.top_share: dict[str, tuple[tuple[int, int, int], float]] = {}

    def run(self) -> CycleResult:
        state, now, policy = self.state, self.now, self.policy
        if state.kept_rooms:
            return_to_kept_rooms(state, self.engine, now, self.result)
        consolidating = policy.consolidation and self.engine.moves != MoveMode.NEVER
        tried = most_urgent_blocked(state) if consolidating or policy.backfill == Backfill.EASY else None
        urgent = tried
        if consolidating and tried is not None and self._consolidate(tried):
            urgent = most_urgent_blocked(state)  # it started
        if policy.backfill == Backfill.EASY:
            holder = urgent
            if policy.reserve_for == ReserveFor.FIRST_BLOCKED and (
                holder is None or state.reservation is None or holder.id != state.reservation[0]
            ):
                # first-blocked: the walk picks the holder, except that the last cycle's keeps
                # its reservation until it starts (unless one of higher priority is blocked)
                holder = None
            if holder is not None:
                counts = gang_counts(holder, False)
                # A reservation that has come due is honoured: when the room it waited for is
                # there, it is kept for the holder against the jobs the fair-share order puts first.
                due = state.reservation is not None and state.reservation[0] == holder.id and state.reservation[1] <= now
                self.reservation = (reservation_now(state, holder, counts, now) if due else None) or _reserve(
                    state, holder, counts, now
                )
        self._walk()
        if consolidating:
            # a job the walk found blocked, more urgent than any before it: it need not wait
            # for the next cycle (on a quiet cluster, the next event)
            urgent = most_urgent_blocked(state)
            holder = self.reservation.job_id if self.reservation is not None else None
            if urgent is not None and urgent is not tried and holder in (None, urgent.id) and self._consolidate(urgent):
                self.reservation = None
        reservation = self.reservation
        self.result.reservation = reservation
        state.reservation = (reservation.job_id, reservation.start) if reservation else None
        return self.result

    def _walk(self) -> None:
        """Every pending job in admission order (``policy.ordering``'s, inlined): a queue's next
        job goes on at once while its key stays below every other queue's, as a heap would pop
        it; a job whose verdict is settled is only marked."""
        # the order's keys, snapshots (read lazily: a walk that ends early by reason cells never
        # reads the rest) and heap of queue heads are AdmissionOrder's; only the walk over them
        # is inlined here
        order = AdmissionOrder(self.state, fair_share=self.policy.fair_share, lazy=True)
        try:
            self._walk_order(order)
        finally:
            order.close()

    def _walk_order(self, order: AdmissionOrder) -> None:
        state, now = self.state, self.now
        fair_share = self.policy.fair_share
        jobs, queues, plans = state.jobs, state.queues, memo_of(state).plans
        settled, passed_quota, blocked = self.settled, self.passed_quota, self.blocked
        heap, snapshots, shares, key_of, grow = order.heap, order.snapshots, order.shares, order.key, order.grow
        lengths = order.lengths
        manual = {name for name, q in queues.items() if q.approval == Approval.MANUAL}
        if self.policy.preemption:
            self.preemptors_left = {name for name in snapshots if _may_preempt(queues[name])}
        may_finish = not self.policy.strict_fifo
        # marking by reason cells pays only when the backlog is much deeper than its kinds
        by_cells = may_tail = may_finish and sum(lengths.values()) > CELLS_PAY_OFF * len(state.reason_cells)
        walk_at = self.walk_at
        #: queues whose last attempt to finish at once stopped short, at which stable_version
        finish_tried: dict[str, int] = {}
        #: where a queue goes on when its entry comes up after jumping over finished jobs
        resume: dict[str, int] = {}
        #: queues whose last attempt to finish by reason cells failed, at which stable_version
        cells_tried: dict[str, int] = {}
        #: jobs reached one by one (visited or marked), not through their reason cells
        walked = 0

        def finish(name: str, idx: int) -> tuple[int, tuple[float, int, float, int, str, int] | None] | None:
            """Mark the queue's jobs from ``idx`` on whose verdict is stable; None when that is all
            of them, else where the first other job is and the key its queue's entry then has
            (the largest key jumped over or its own: a heap pops it no sooner)."""
            nonlocal walked
            snapshot = snapshots[name]
            total = lengths[name]
            stable = self.stable
            needs_approval = name in manual
            top: tuple[float, int] = (-1.0, idx)
            share_memo = None
            if fair_share:
                key_of(name, idx)  # brings the queue's share memo up to date
                share_memo = shares[name][1]
            for i in range(idx, total):
                if i >= len(snapshot):
                    grow(name, i)  # read on only as far as it marks
                job = jobs[snapshot[i][3]]
                if job.held:
                    reason = PendingReason.HELD
                elif needs_approval and not job.approved:
                    reason = PendingReason.AWAITING_APPROVAL
                else:
                    plan = plans.get(job.id)
                    found = None
                    if plan is not None and plan.groups is job.groups and plan.min_count == job.min_count:
                        found = stable.get(plan.kind)
                    if found is None:
                        if i == idx:
                            return idx, None
                        if not fair_share:
                            return i, key_of(name, i)
                        jumped = key_of(name, top[1])
                        own = key_of(name, i)
                        return i, max(jumped, own)
                    reason = found
                if share_memo is not None:
                    share = share_memo.get(job.request)
                    if share is None:
                        share = key_of(name, i)[0]
                    if share >= top[0]:
                        top = (share, i)
                mark_waiting(job, reason)
                walked += 1
            return None

        while heap:
            key = heapq.heappop(heap)
            name, idx = key[4], key[5]
            if name in blocked:
                continue
            resumed = resume.pop(name, None)
            if resumed is not None:
                idx = resumed  # the queue's usage has not moved since its jump: the key holds
            elif fair_share:
                fresh = key_of(name, idx)
                if fresh[0] > key[0] and heap and fresh > heap[0]:
                    heapq.heappush(heap, fresh)
                    continue
            if may_finish and self.stable and not self.preemptors_left and finish_tried.get(name) != self.stable_version:
                if by_cells and cells_tried.get(name) != self.stable_version:
                    cells_tried[name] = self.stable_version
                    if self._finish_by_cells(name):
                        continue
                stopped = finish(name, idx)
                if stopped is None:
                    continue
                finish_tried[name] = self.stable_version
                at, entry = stopped
                if entry is not None:
                    resume[name] = at
                    heapq.heappush(heap, entry)
                    continue
            if by_cells and self._finish_ahead(name, heap):
                continue
            snapshot = snapshots[name]
            have = len(snapshot)  # read so far (the order reads a long queue piecemeal)
            last = lengths[name] - 1
            usage = queues[name].usage
            needs_approval = name in manual
            while True:
                if idx >= have:
                    have = len(grow(name, idx))
                job = jobs[snapshot[idx][3]]
                walked += 1
                # the fast path: a job whose verdict is known is marked and nothing else
                if job.held:
                    mark_waiting(job, PendingReason.HELD)
                elif needs_approval and not job.approved:
                    mark_waiting(job, PendingReason.AWAITING_APPROVAL)
                else:
                    plan = plans.get(job.id)
                    if plan is None or plan.groups is not job.groups or plan.min_count != job.min_count:
                        plan = plan_of(state, job)
                    reservation = self.reservation
                    guarded = reservation is not None and held_back(job, reservation, jobs, now)
                    known = settled.get((plan.kind, guarded))
                    if known is not None and (not known.passed or passed_quota.issuperset(known.passed)):
                        # mark_waiting inlined: a settled reason is never held or awaiting approval
                        job._reason = known.reason
                        job._reason_at = walk_at
                        if job.state is not JobState.FINISHED:
                            job.state = JobState.PENDING
                    else:
                        following = key_of(name, idx + 1) if idx < last else None
                        used = (usage[0], usage[1], usage[2])
                        self._visit(job, plan, guarded)
                        if self.just_settled:
                            # the visits after which the rest could be marked at once
                            self.just_settled = False
                            if may_tail and self._tail():
                                self.result.walked += walked
                                return
                        if (
                            by_cells
                            and self.stable
                            and not self.preemptors_left
                            and cells_tried.get(name) != self.stable_version
                        ):
                            cells_tried[name] = self.stable_version
                            if self._finish_by_cells(name):
                                break
                        if by_cells and idx < last and self._finish_ahead(name, heap):
                            break
                        if following is None or name in blocked:
                            break
                        if heap and following > heap[0]:
                            heapq.heappush(heap, following)
                            break
                        if fair_share and (usage[0], usage[1], usage[2]) != used:
                            fresh = key_of(name, idx + 1)
                            if fresh[0] > following[0] and heap and fresh > heap[0]:
                                heapq.heappush(heap, fresh)
                                break
                        idx += 1
                        continue
                if idx >= last:
                    break
                if heap:
                    # key_of inlined for the common case: the next job's share against the top's
                    top = heap[0]
                    share = 0.0
                    if fair_share:
                        memo = shares.get(name)
                        if memo is None or memo[0] != usage:
                            share = key_of(name, idx + 1)[0]
                        else:
                            if idx + 1 >= have:
                                have = len(grow(name, idx + 1))
                            share = memo[1].get(jobs[snapshot[idx + 1][3]].request)  # type: ignore[assignment]
                            if share is None:
                                share = key_of(name, idx + 1)[0]
                    if share > top[0]:
                        heapq.heappush(heap, key_of(name, idx + 1))
                        break
                    if share == top[0]:
                        following = key_of(name, idx + 1)
                        if following > top:
                            heapq.heappush(heap, following)
                            break
                idx += 1
        self.result.walked += walked

    def _visit(self, job: Job, plan: Plan, guarded: bool) -> None:
        """Try to admit ``job`` (quota, placement, preemption); or record why it waits."""
        state, now, policy, engine, result = self.state, self.now, self.policy, self.engine, self.result
        failed_quota, passed_quota, failed_shapes = self.failed_quota, self.passed_quota, self.failed_shapes
        queue = state.queues[job.queue]
        reservation = self.reservation
        guard = reservation.guard if guarded and reservation is not None else None
        reason: PendingReason | None = None
        admitted = False
        preempted = False
        holder = self._holder_quota(job.queue) if guard is not None else None
        limit = self._holder_limit(job, holder) if guard is not None else None
        for attempt in plan.attempts:
            counts = list(attempt.counts)
            request = attempt.request
            qkey = attempt.quota_key
            verdict_reason = failed_quota.get(qkey)
            if verdict_reason is None and qkey not in passed_quota:
                verdict_reason = quota.check(state, queue, request, policy.borrowing).reason
                if verdict_reason is None:
                    passed_quota.add(qkey)
            if verdict_reason is None and holder is not None:
                # it would run past the reservation's start: the holder's quota is not for it
                qkey = ~qkey
                verdict_reason = failed_quota.get(qkey)
                if verdict_reason is None and qkey not in passed_quota:
                    if not quota.fits_at_start(state, queue, request, policy.borrowing, holder):
                        verdict_reason = PendingReason.RESERVED_FOR_HIGHER_PRIORITY
                    else:
                        passed_quota.add(qkey)
            if verdict_reason is not None:
                failed_quota[qkey] = verdict_reason
                if (
                    verdict_reason == PendingReason.WAITING_FOR_QUOTA
                    and self._may_try_preemption(job.queue, attempt.preempt_key)
                    and self._try_preemption(job, counts, attempt, limit)
                ):
                    admitted = preempted = True
                    break
                reason = verdict_reason if reason is None else reason
                continue
            shape = (attempt.shape, guard is not None)
            cached = failed_shapes.get(shape)
            if cached is None:
                if not quick_reject(state, job, counts):
                    placer = Placer(state, guard, scoring=policy.scoring)
                    if placer.place_gang(job, counts):
                        engine.admit(job, placer.taken, request, now, result)
                        passed_quota.clear()
                        admitted = True
                        break
                if guard is not None:
                    free_placer = Placer(state)
                    if free_placer.place_gang(job, counts):
                        free_placer.undo(job)
                        cached = PendingReason.RESERVED_FOR_HIGHER_PRIORITY
                if cached is None:
                    cached = classify_failure(state, job, counts)
                failed_shapes[shape] = cached
            if (
                cached in CAPACITY_REASONS
                and self._may_try_preemption(job.queue, attempt.preempt_key)
                and self._try_preemption(job, counts, attempt, limit)
            ):
                admitted = preempted = True
                break
            reason = cached if reason is None else reason
        if preempted:
            # victims are back in their queues with room freed: every verdict is open again
            failed_quota.clear()
            failed_shapes.clear()
            self.failed_preempt.clear()
            passed_quota.clear()
            self.settled.clear()
            self.stable.clear()
            self.stable_version += 1
        if admitted:
            self.tail_blocker = None  # its kind may have no job left: look again at the next settle
            if reservation is not None and reservation.job_id == job.id:
                self.reservation = None  # the holder started: nothing to hold back for the rest
                self.settled.clear()
                self._forget_holder_quota()
            return
        assert reason is not None
        mark_waiting(job, reason)
        if policy.strict_fifo:
            self.blocked.add(job.queue)
        elif (
            reservation is None
            and policy.backfill == Backfill.EASY
            and policy.reserve_for == ReserveFor.FIRST_BLOCKED
            and reason in BLOCKED_REASONS
        ):
            self.reservation = _reserve(state, job, list(plan.attempts[0].counts), now)
            self.settled.clear()
        else:
            self._settle(job, plan, guarded, reason)

    def _forget_holder_quota(self) -> None:
        """The quota verdicts worked out beside the reservation's holder (negative memo keys)
        no longer hold once another job holds it, or none does."""
        for key in [k for k in self.failed_quota if k < 0]:
            del self.failed_quota[key]
        self.passed_quota.difference_update([k for k in self.passed_quota if k < 0])

    def _holder_quota(self, queue: str) -> HeldQuota | None:
        """For a job that would run past the reservation's start: the holder's queue, request
        and start, when the job's queue draws on the same quota (it must leave the holder its
        share then, as the guard leaves it its nodes); None otherwise."""
        reservation = self.reservation
        if reservation is None:
            return None
        holder = self.state.jobs[reservation.job_id]
        if holder.current_run is not None or not quota.shares_quota(self.state, queue, holder.queue):
            return None
        return HeldQuota(self.state.queues[holder.queue], plan_of(self.state, holder).attempts[0].request, reservation.start)

    def _may_try_preemption(self, queue: str, preempt_key: int) -> bool:
        """As in Kueue, a queue's first blocked job tries preemption, once per kind of job."""
        return self.policy.preemption and queue not in self.tried_preempt and preempt_key not in self.failed_preempt

    def _holder_limit(self, job: Job, holder_quota: HeldQuota | None) -> HolderLimit | None:
        """What ``job``, which would run past the reservation's start, must leave its holder when
        it preempts: nothing where it outranks the holder (a higher-priority job may move a
        reservation), else the guard and the holder's quota, as when it is placed without."""
        reservation = self.reservation
        assert reservation is not None
        if job.priority > self.state.jobs[reservation.job_id].priority:
            return None
        return HolderLimit(reservation.guard, (reservation.job_id, reservation.start), holder_quota)

    def _consolidate(self, job: Job) -> bool:
        """Before the walk, for the most urgent job blocked for capacity (the one backfill
        reserves for): when its quota lets it start and the cluster has the GPUs free, only not
        together, move jobs out of one topology domain so that it starts in it, if every moved
        job can start again elsewhere now; say so in the audit trail. True when ``job`` started."""
        found = consolidation_for(self.state, job, self.now, self.policy)
        if found is None:
            return False
        carry_out(found, job, self.state, self.engine, self.now, self.result)
        return True

    def _try_preemption(self, job: Job, counts: list[int], attempt: Attempt, limit: HolderLimit | None) -> bool:
        """The queue's preemption attempt for this cycle: True when ``job`` was admitted."""
        self.tried_preempt.add(job.queue)
        self.preemptors_left.discard(job.queue)
        self.failed_preempt.add(attempt.preempt_key)
        return _preempt_for(self.state, job, counts, attempt.request, self.now, self.engine, self.result, limit)

    def _settle(self, job: Job, plan: Plan, guarded: bool, reason: PendingReason) -> None:
        """Remember ``reason`` for the job's kind when visiting another such job would only find
        it again: every attempt fails on a remembered verdict and no preemption attempt or
        reservation is left for its queue to make."""
        passed: list[int] = []
        beside_holder = guarded and self.reservation is not None and self._holder_quota(job.queue) is not None
        for attempt in plan.attempts:
            qkey = attempt.quota_key
            failed = self.failed_quota.get(qkey)
            if failed is not None:
                if failed == PendingReason.WAITING_FOR_QUOTA and self._may_try_preemption(job.queue, attempt.preempt_key):
                    return
                continue
            if qkey not in self.passed_quota:
                return
            passed.append(qkey)
            if beside_holder:
                if ~qkey in self.failed_quota:
                    continue  # the reservation's holder has the quota it needs
                if ~qkey not in self.passed_quota:
                    return
                passed.append(~qkey)
            failed = self.failed_shapes.get((attempt.shape, guarded and self.reservation is not None))
            if failed is None:
                return
            if failed in CAPACITY_REASONS and self._may_try_preemption(job.queue, attempt.preempt_key):
                return
        if (
            self.reservation is None
            and self.policy.backfill == Backfill.EASY
            and self.policy.reserve_for == ReserveFor.FIRST_BLOCKED
            and reason in BLOCKED_REASONS
        ):
            return
        self.settled[(plan.kind, guarded)] = Settled(reason, tuple(passed))
        self.settled_version += 1
        if self.tail_blocker is None or self.tail_blocker == plan.kind:
            self.just_settled = True
        if not passed:
            # failed on quota alone (guarded or not): it stays so unless a preemption frees some
            self.stable[plan.kind] = reason
            self.stable_version += 1


def _may_preempt(queue: Queue) -> bool:
    """Whether the queue's policy lets its jobs preempt anything at all."""
    return (
        queue.within_queue != WithinQueue.NEVER
        or queue.reclaim_within_cohort != ReclaimWithinCohort.NEVER
        or queue.borrow_within_cohort != BorrowWithinCohort.NEVER
    )


def _preempt_for(
    state: ClusterState,
    job: Job,
    counts: list[int],
    request: Vec,
    now: float,
    engine: Admitter,
    result: CycleResult,
    limit: HolderLimit | None = None,
) -> bool:
    if not job.preempts:
        return False
    victims = find_victims(state, job, counts, request, now, limit)
    if not victims:
        return False
    for v in victims:
        engine.stop(v, now, EndReason.PREEMPTED, by=job.name, result=result)
    placer = Placer(state, limit.guard if limit is not None else None)
    if not placer.place_gang(job, counts):  # cannot happen: find_victims checked it
        return False
    engine.admit(job, placer.taken, request, now, result)
    return True
