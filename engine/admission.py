"""What a scheduling cycle hands back and needs from its owner, shared by both cycles.

``cycle`` (gangs admitted whole) and ``podcycle`` (pods bound one at a time, the default
kube-scheduler's way) both return a ``CycleResult`` of ``Decision``s and call back into an
``Admitter`` (the ``Engine``) to admit and stop jobs; ``mark_waiting`` records why a job waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import records
from .enums import DecisionKind, EndReason, JobState, MoveMode, PendingReason
from .state import Job, KeptRoom, PodPlacement, Vec

if TYPE_CHECKING:
    from .policy.backfill import Reservation


@dataclass(slots=True)
class Decision:
    """What the backend is asked to do for one job."""

    kind: DecisionKind
    job: Job
    placements: list[PodPlacement] = field(default_factory=list)
    reason: EndReason | None = None
    by: str | None = None
    #: for a bind: the job begins to work now (False: an incomplete gang took one more pod)
    starts_work: bool = True
    #: for a bind: the room kept for this moved job, which it takes now (a backend that cannot
    #: bind it keeps the room for it again)
    returning: KeptRoom | None = None


@dataclass(slots=True)
class CycleResult:
    decisions: list[Decision] = field(default_factory=list)
    reservation: Reservation | None = None
    #: pending jobs the gang cycle's walk reached one by one (tried, or marked with a known
    #: verdict); the rest it marked through their reason cells at once
    walked: int = 0

    @property
    def evicted(self) -> int:
        return sum(1 for d in self.decisions if d.kind == DecisionKind.EVICT)


_STATE_OF_REASON = {
    PendingReason.HELD: JobState.HELD,
    PendingReason.AWAITING_APPROVAL: JobState.AWAITING_APPROVAL,
}


def mark_waiting(job: Job, reason: PendingReason) -> None:
    """Record that ``job`` waits, and why (held and awaiting approval are states of their own)."""
    job._reason = reason  # the pending_reason setter, inlined: the cycle's hottest write
    job._reason_at = records.reason_stamp()
    if job.state != JobState.FINISHED:
        job.state = _STATE_OF_REASON.get(reason, JobState.PENDING)


class Admitter:
    """What the cycle needs from its owner: admitting and stopping jobs (see ``Engine``)."""

    #: how consolidation may move a running job here (``MoveMode``)
    moves: MoveMode = MoveMode.NEVER

    def admit(self, job: Job, placements: list[PodPlacement], request: Vec, now: float, result: CycleResult) -> None:
        raise NotImplementedError

    def stop(
        self, job: Job, now: float, reason: EndReason, by: str | None, result: CycleResult | None, note: bool = True
    ) -> float:
        raise NotImplementedError

    def bind_pod(
        self, job: Job, placement: PodPlacement, amount: Vec, now: float, completes: bool, result: CycleResult
    ) -> None:
        raise NotImplementedError

    def withdraw(self, job: Job) -> None:
        """Take a queued job out of its queue until it is submitted again."""
        raise NotImplementedError
