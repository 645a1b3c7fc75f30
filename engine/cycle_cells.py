"""The gang cycle's tails: the rest of a walk written per reason cell instead of job by job.

A deep backlog holds few kinds of job (``state.ReasonCell``: the pending jobs of one queue,
priority, minCount and gang). Once the walk (``cycle``) has settled the verdict of every kind,
and of every guard value its jobs can have (held back by the backfill reservation or not),
visiting the jobs it has not reached would only mark each with its kind's reason; a tail writes
each cell's reason once instead, and the walk ends:

- ``_tail``: the whole rest of the walk, once every cell's kinds are settled;
- ``_finish_ahead``: one queue, once its kinds are settled and all its jobs left come before any
  other queue's next job (they would be marked before anything else happened);
- ``_finish_by_cells``: one queue whose kinds all failed on quota alone (``stable``), where no
  later admission can change their verdict.

The jobs waiting on an operator, and the reservation's holder, are marked one by one
(``_apart_reasons``). A cell written at the cycle's ``tail_at`` gives way to every job the walk
marked itself, so a tail never overrides what the walk found.

``CellTails`` is a base of ``cycle._GangCycle``, not a class of its own: the tails read the
walk's verdict tables (settled and stable kinds, passed quota, the reservation, the queues left
to preempt), which the walk updates as it goes; keeping them apart from the walk keeps the
rules for when a cell may be written in place of its jobs in one module.
"""

from __future__ import annotations

from dataclasses import dataclass

from .admission import mark_waiting
from .enums import Approval, PendingReason
from .kinds import plan_of
from .memo import memo_of
from .policy import quota
from .policy.backfill import Reservation
from .policy.registry import Policy
from .reservations import held_back
from .state import ClusterState, Job, ReasonCell, lost_to_a_node

#: the guard values the jobs of a reason cell can have (see ``CellTails._tail_needs``)
UNGUARDED: tuple[bool, ...] = (False,)
EITHER_GUARD: tuple[bool, ...] = (False, True)

#: a reason cell, its kind, and the guard values its jobs can have
Need = tuple[ReasonCell, int, tuple[bool, ...]]


@dataclass(slots=True, frozen=True)
class Settled:
    """A kind of job (and guard) whose verdict this cycle is known: every further job of it
    waits for ``reason`` with nothing else to do, while its quota checks still pass."""

    reason: PendingReason
    #: quota memo keys that passed when it was settled (an admission makes them ask again)
    passed: tuple[int, ...]


class CellTails:
    """The tails of one gang cycle's walk (see the module docstring); ``cycle._GangCycle``
    sets the tables below and keeps them up to date."""

    state: ClusterState
    now: float
    policy: Policy
    reservation: Reservation | None
    #: (kind, guarded) -> its verdict; kinds whose quota verdict can no longer change
    settled: dict[tuple[int, bool], Settled]
    stable: dict[int, PendingReason]
    stable_version: int
    settled_version: int
    passed_quota: set[int]
    preemptors_left: set[str]
    tail_at: int
    needs: list[Need] | None
    needs_for: Reservation | None
    tail_blocker: int | None
    done: set[str]
    ahead_tried: dict[str, tuple]
    top_share: dict[str, tuple[tuple[int, int, int], float]]

    def _tail(self) -> bool:
        """The rest of the walk at once, when every job it has not reached would only be marked
        with its kind's settled reason: each reason cell is written instead of each job (the
        jobs waiting on an operator, and the reservation's holder, are marked one by one).
        Nothing else could happen: no job left would be visited, so none admitted or preempting.
        True when done."""
        reservation = self.reservation
        needs = self._needs(reservation)
        reasons, failed = self._cell_reasons(needs)
        if reasons is None:
            if failed:  # look at what failed first next time: it will likely fail again
                needs[0], needs[failed] = needs[failed], needs[0]
            self.tail_blocker = needs[0][1]  # nothing to look at again before it settles
            return False
        apart = self._apart_reasons(reservation, None)
        if apart is None:
            self.tail_blocker = None
            return False
        self._write_cells(needs, reasons, apart)
        return True

    def _cell_reasons(self, needs: list[Need]) -> tuple[list[PendingReason | None] | None, int]:
        """The reason to write in each of ``needs``' cells (None: leave it, its jobs wait on an
        operator or its queue's rest is written already), when every guard value its jobs can
        have has one settled verdict; else None and the index of the first cell without."""
        settled, passed, stable, done = self.settled, self.passed_quota, self.stable, self.done
        queues = self.state.queues
        reasons: list[PendingReason | None] = []
        for i, (cell, kind, guards) in enumerate(needs):
            if cell.queue in done or not cell.waits_on_scheduler(queues[cell.queue].approval == Approval.MANUAL):
                reasons.append(None)  # only jobs waiting on an operator, each marked apart
                continue
            reason = stable.get(kind) if not self.preemptors_left else None
            if reason is not None:
                reasons.append(reason)  # a quota verdict: the same guarded or not
                continue
            for guarded in guards:
                known = settled.get((kind, guarded))
                if (
                    known is None
                    or (known.passed and not passed.issuperset(known.passed))
                    or (reason is not None and known.reason != reason)
                ):
                    return None, i
                reason = known.reason
            reasons.append(reason)
        return reasons, 0

    def _finish_ahead(self, name: str, heap: list[tuple[float, int, float, int, str, int]]) -> bool:
        """The rest of queue ``name`` at once, when the walk would go through all of it before
        any other queue's next job (every key it has left is below the heap's top) and every
        job of it would only be marked with its kind's settled reason (``_tail``'s rule, for
        one queue): its reason cells are written instead of its jobs. No job is admitted or
        preempts meanwhile, so nothing moves the verdicts it would have met. This is the case
        the global tail cannot end: one queue's deep backlog, settled, ahead of a kind of
        another queue that the walk has not reached yet. True when done."""
        if heap and not self._ahead(name, heap[0]):
            return False
        reservation = self.reservation
        version = (self.settled_version, self.stable_version, len(self.passed_quota), len(self.preemptors_left), reservation)
        if self.ahead_tried.get(name) == version:
            return False
        self.ahead_tried[name] = version
        needs = [need for need in self._needs(reservation) if need[0].queue == name]
        reasons, _ = self._cell_reasons(needs)
        if reasons is None:
            return False
        apart = self._apart_reasons(reservation, name)
        if apart is None:
            return False
        self._write_cells(needs, reasons, apart)
        self.done.add(name)
        return True

    def _ahead(self, name: str, top: tuple[float, int, float, int, str, int]) -> bool:
        """Whether every job of queue ``name`` that the walk has not reached has a key below
        ``top`` (``policy.ordering``'s: share after admitting it, then priority, submit time
        and file order): by fair share, the largest share any of its kinds would give it now
        is below the top's; else its last job's key is below it."""
        state = self.state
        queue = state.queues[name]
        if not self.policy.fair_share:
            last = queue.pending[-1]  # its jobs enqueued since the walk began only come later
            return (0.0, last[0], last[1], last[2]) < top[:4]
        usage = (queue.usage[0], queue.usage[1], queue.usage[2])
        known = self.top_share.get(name)
        if known is None or known[0] != usage:
            # a kind's jobs share its request (its pod groups); cells only go away in a cycle
            requests = {cell.sample.request for cell in state.reason_cells.values() if cell.queue == name and cell.sample is not None}
            known = self.top_share[name] = (usage, max((quota.dominant_share(state, queue, r) for r in requests), default=0.0))
        return known[1] < top[0]

    def _finish_by_cells(self, queue: str) -> bool:
        """The rest of ``queue``'s jobs at once, when the kind of every job it has left is
        stable (a quota verdict no later admission can change, no queue left to preempt): the
        queue's reason cells are written instead of its jobs. True when done."""
        reservation = self.reservation
        needs = [need for need in self._needs(reservation) if need[0].queue == queue]
        stable = self.stable
        manual = self.state.queues[queue].approval == Approval.MANUAL
        reasons: list[PendingReason | None] = []
        for cell, kind, _ in needs:
            if not cell.waits_on_scheduler(manual):
                reasons.append(None)
                continue
            reason = stable.get(kind)
            if reason is None:
                return False
            reasons.append(reason)
        apart = self._apart_reasons(reservation, queue)
        if apart is None:
            return False
        self._write_cells(needs, reasons, apart)
        self.done.add(queue)
        return True

    def _needs(self, reservation: Reservation | None) -> list[Need]:
        needs = self.needs
        if needs is None or self.needs_for is not reservation:
            needs = self.needs = self._tail_needs(reservation)
            self.needs_for = reservation
        return needs

    def _write_cells(
        self,
        needs: list[Need],
        reasons: list[PendingReason | None],
        apart: list[tuple[Job, PendingReason]],
    ) -> None:
        tail_at = self.tail_at
        for (cell, _, _), reason in zip(needs, reasons):
            if reason is not None:
                cell.reason = reason
                cell.at = tail_at
        state = self.state
        for job, reason in apart:
            mark_waiting(job, reason)
            if not state.waits_on_operator(job) and not lost_to_a_node(job):
                state.apart.discard(job.id)

    def _tail_needs(self, reservation: Reservation | None) -> list[Need]:
        """Per reason cell of the pending jobs: its kind, and the guard values its jobs can
        have (guarded: the job would run past the reservation's start; read off the cell's
        bounds on the estimated runtime)."""
        state, now = self.state, self.now
        needs = []
        kinds = memo_of(state).cell_kinds
        for cell in state.reason_cells.values():
            kind = kinds.get(cell)
            if kind is None:
                assert cell.sample is not None
                kind = kinds[cell] = plan_of(state, cell.sample).kind
            if reservation is None:
                guards = UNGUARDED
            else:
                low = now + cell.min_runtime > reservation.start
                high = now + cell.max_runtime > reservation.start
                guards = (low,) if low == high else EITHER_GUARD
            needs.append((cell, kind, guards))
        return needs

    def _apart_reasons(self, reservation: Reservation | None, queue: str | None) -> list[tuple[Job, PendingReason]] | None:
        """The reasons of the jobs (of ``queue``, or all) that the walk has not reached and that
        are marked one by one: those waiting on an operator (``ClusterState.apart``) and the
        reservation's holder; None when one of them has no settled verdict."""
        state, now = self.state, self.now
        ids = list(state.apart)
        if reservation is not None:
            ids.append(reservation.job_id)
        stable = self.stable if not self.preemptors_left else {}
        out = []
        for jid in ids:
            job = state.jobs[jid]
            if job._cell is None or job._reason_at > self.tail_at or (queue is not None and job.queue != queue):
                continue  # not pending, marked by this cycle already, not in its walk, or not asked
            if job.held:
                out.append((job, PendingReason.HELD))
            elif not job.approved and state.queues[job.queue].approval == Approval.MANUAL:
                out.append((job, PendingReason.AWAITING_APPROVAL))
            else:
                kind = plan_of(state, job).kind
                if kind in stable:
                    out.append((job, stable[kind]))
                    continue
                guarded = held_back(job, reservation, state.jobs, now)
                known = self.settled.get((kind, guarded))
                if known is None or (known.passed and not self.passed_quota.issuperset(known.passed)):
                    return None
                out.append((job, known.reason))
        return out
