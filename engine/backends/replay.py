"""The replay backend: a scenario's submissions, events and job completions on a virtual clock.

Like trio's MockClock, time does not pass by itself: the controller asks for the next moment at
which anything happens and jumps there. At one moment, completions come first (they free
capacity), then the scenario's events in file order, then submissions; the controller then runs
a cycle. The backend carries out decisions by scheduling each bound job's completion
(``start + remaining work``); an evicted job's completion is simply forgotten.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import IntEnum

from ..core import Engine
from ..admission import Decision
from ..enums import DecisionKind
from ..scenario import Scenario
from ..scenario.models import EventSpec


class Kind(IntEnum):
    """What a timeline entry is; the value orders entries at one moment."""

    FINISH = 0
    EVENT = 1
    SUBMIT = 2


@dataclass(slots=True, frozen=True)
class Due:
    """One thing that happens now: a job finishes, an event fires, a job is submitted."""

    kind: Kind
    job_id: int = -1
    run_no: int = 0
    event: EventSpec | None = None


class ReplayBackend:
    def __init__(self, scenario: Scenario, engine: Engine) -> None:
        self.engine = engine
        self._heap: list[tuple[float, int, int, Due]] = []
        self._seq = 0
        for job in engine.state.jobs:
            self._push(job.submit, Due(Kind.SUBMIT, job.id))
        for event in scenario.events:
            self._push(event.at, Due(Kind.EVENT, event=event))

    def _push(self, at: float, due: Due) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, int(due.kind), self._seq, due))

    def next_time(self) -> float | None:
        """When the next thing happens, skipping completions of runs that were cut short."""
        heap = self._heap
        jobs = self.engine.state.jobs
        while heap and self._stale(heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[Due]:
        out: list[Due] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            out.append(heapq.heappop(heap)[3])
        return [d for d in out if not self._stale(d)]

    def _stale(self, due: Due) -> bool:
        """A completion of a run that was cut short (preempted, drained, failed)."""
        if due.kind != Kind.FINISH:
            return False
        job = self.engine.state.jobs[due.job_id]
        return len(job.runs) != due.run_no or job.current_run is None

    def apply(self, decisions: list[Decision], now: float) -> None:
        """Carry out decisions: a bind always succeeds here and its completion is scheduled."""
        for d in decisions:
            if d.kind == DecisionKind.BIND and d.starts_work:
                job = d.job
                if job.remaining is not None:
                    self._push(now + job.remaining, Due(Kind.FINISH, job.id, len(job.runs)))
