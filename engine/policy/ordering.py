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

from ..state import ClusterState, Job
from .quota import dominant_share


@dataclass(slots=True)
class AdmissionOrder:
    """An iterator over pending jobs in admission order; ``block(queue)`` ends a queue early."""

    state: ClusterState
    fair_share: bool = True
    #: one entry per queue: the key of its next job (share, -priority, submit, seq, queue, index)
    heap: list[tuple[float, int, float, int, str, int]] = field(default_factory=list)
    #: each queue's pending jobs as the order started
    snapshots: dict[str, list[tuple[int, float, int, int]]] = field(default_factory=dict)
    _blocked: set[str] = field(default_factory=set)
    #: per queue: the usage its shares were computed at, and the share per request
    shares: dict[str, tuple[list[int], dict[tuple[int, int, int], float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, q in self.state.queues.items():
            if q.pending:
                snap = list(q.pending)
                self.snapshots[name] = snap
                self._push(name, 0)

    def key(self, name: str, idx: int) -> tuple[float, int, float, int, str, int]:
        """The heap key of the queue's job at ``idx``, its share at the queue's usage now."""
        prio, submit, seq, jid = self.snapshots[name][idx]
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
        if idx < len(self.snapshots[name]):
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
            last = len(snapshot) - 1
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
