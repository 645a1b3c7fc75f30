"""Admission order: which pending job a cycle considers next.

Within a queue, jobs go by priority, then submit time (then file order). Across the queues, the
next job is the head of the queue with the lowest dominant resource share over weight *after*
admitting that head (Kueue's fair sharing), ties broken by priority and submit time. Shares move
as jobs are admitted, so a queue's key is refreshed when it reaches the top of the heap.

With ``strict_fifo`` a queue stops at its first blocked job (Kueue's StrictFIFO); otherwise the
jobs behind a blocked head are still considered (BestEffortFIFO) and only a backfill reservation
can hold them back.

The gang cycle (``engine.cycle``) walks this same order inline, with a fast path for jobs whose
verdict is already known; ``AdmissionOrder`` serves the pod-by-pod cycle, explanations and
what-if questions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from ..state import ClusterState, Job
from .quota import dominant_share


#: pending jobs in a queue from which a lazy order reads it piecemeal
LAZY_FROM = 2048


@dataclass(slots=True)
class AdmissionOrder:
    """An iterator over pending jobs in admission order; ``block(queue)`` ends a queue early."""

    state: ClusterState
    fair_share: bool = True
    #: one entry per queue: the key of its next job (share, -priority, submit, seq, queue, index)
    heap: list[tuple[float, int, float, int, str, int]] = field(default_factory=list)
    #: each queue's pending jobs as the order started (with ``lazy``: the part read so far)
    snapshots: dict[str, list[tuple[int, float, int, int]]] = field(default_factory=dict)
    #: read each queue's snapshot only as far as asked (``grow``), not copied whole at the start:
    #: a cycle that ends early (reason cells) then costs nothing for the jobs it never reached.
    #: Jobs enqueued meanwhile are left out (``ClusterState.enqueued_since``), as from a copy; the
    #: owner ends it with ``close``
    lazy: bool = False
    #: each queue's number of pending jobs as the order started
    lengths: dict[str, int] = field(default_factory=dict)
    _blocked: set[str] = field(default_factory=set)
    #: per queue: the usage its shares were computed at, and the share per request
    shares: dict[str, tuple[list[int], dict[tuple[int, int, int], float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.lazy:
            self.state.enqueued_since = set()
        for name, q in self.state.queues.items():
            if q.pending:
                self.lengths[name] = len(q.pending)
                # a short queue is copied at once: reading it piecemeal would cost more
                self.snapshots[name] = [] if self.lazy and len(q.pending) > LAZY_FROM else list(q.pending)
                self._push(name, 0)

    def grow(self, name: str, idx: int) -> list[tuple[int, float, int, int]]:
        """The queue's snapshot, read at least to ``idx`` (or to its end)."""
        snap = self.snapshots[name]
        if idx < len(snap):
            return snap
        total = self.lengths[name]
        want = min(total, max(idx + 1, 2 * len(snap), 64)) - len(snap)
        pending = self.state.queues[name].pending
        # the rest of the queue as it was: what follows the last entry read, less the jobs
        # enqueued since the order started (a job read is the only kind that leaves meanwhile)
        rest = pending.irange(minimum=snap[-1], inclusive=(False, True)) if snap else iter(pending)
        fresh = self.state.enqueued_since
        if fresh:
            rest = (entry for entry in rest if entry[3] not in fresh)
        snap.extend(islice(rest, want))
        return snap

    def close(self) -> None:
        """A lazy order's owner is done with it: jobs enqueued from now on need no watching."""
        if self.lazy:
            self.state.enqueued_since = None

    def key(self, name: str, idx: int) -> tuple[float, int, float, int, str, int]:
        """The heap key of the queue's job at ``idx``, its share at the queue's usage now."""
        snap = self.snapshots[name]
        if idx >= len(snap):
            snap = self.grow(name, idx)
        prio, submit, seq, jid = snap[idx]
        share = 0.0
        if self.fair_share:
            request = self.state.jobs[jid].request
            queue = self.state.queues[name]
            memo = self.shares.get(name)
            if memo is None or memo[0] != queue.usage:
                memo = (list(queue.usage), {})
                self.shares[name] = memo
            share = memo[1].get(request)  # type: ignore[assignment]
            if share is None:
                share = memo[1][request] = dominant_share(self.state, queue, request)
        return (share, prio, submit, seq, name, idx)

    def _push(self, name: str, idx: int) -> None:
        if idx < self.lengths[name]:
            heapq.heappush(self.heap, self.key(name, idx))

    def block(self, queue: str) -> None:
        """Consider no more jobs of ``queue`` in this cycle."""
        self._blocked.add(queue)

    def __iter__(self) -> Iterator[Job]:
        heap = self.heap
        jobs = self.state.jobs
        fair_share = self.fair_share
        while heap:
            key = heapq.heappop(heap)
            name, idx = key[4], key[5]
            if name in self._blocked:
                continue
            if fair_share:
                fresh = self.key(name, idx)
                if fresh[0] > key[0] and heap and fresh > heap[0]:
                    heapq.heappush(heap, fresh)
                    continue
            snapshot = self.snapshots[name]
            last = self.lengths[name] - 1
            usage = self.state.queues[name].usage
            # Yield this queue's jobs for as long as its next one would be popped straight after
            # (its key below every other queue's): the same order as pushing and popping each.
            while True:
                following = self.key(name, idx + 1) if idx < last else None
                used = (usage[0], usage[1], usage[2])
                yield jobs[snapshot[idx][3]]
                if following is None or name in self._blocked:
                    break
                if heap and following > heap[0]:
                    heapq.heappush(heap, following)
                    break
                if fair_share and (usage[0], usage[1], usage[2]) != used:
                    fresh = self.key(name, idx + 1)
                    if fresh[0] > following[0] and heap and fresh > heap[0]:
                        heapq.heappush(heap, fresh)
                        break
                idx += 1


def queue_positions(state: ClusterState) -> dict[int, int]:
    """Position (from 1) of every pending job within its queue."""
    out: dict[int, int] = {}
    for q in state.queues.values():
        for pos, entry in enumerate(q.pending, start=1):
            out[entry[3]] = pos
    return out
