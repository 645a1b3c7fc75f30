"""How close usher's estimated starts come true, measured over a replay.

At every moment a job is submitted, and at the first moment at least ``SAMPLE_EVERY`` simulated
seconds after the last sample, the recorder asks the start-time planner what the console and the
report would show (``explain.planner_order`` and ``backfill.estimate_starts``, the same calls),
and remembers for each waiting job the first estimate it was given and the estimates of the last
hour. Between moments nothing changes, so neither do the estimates. When the job starts, two of
them are scored against its start:

- the *first* estimate (given when it was submitted);
- the estimate it had *an hour before* it started (the last sample at least an hour earlier;
  only for jobs that waited that long).

The error is the estimate minus the start (negative: it started later than promised). A score
is *within 10%* when the error is at most a tenth of the time between the estimate and the start
(an estimate for in ten hours may be an hour off). A job the planner gave no estimate for (it
saw no time at which the job fits) is counted apart.

Sampling costs one planner run per sample, so the recorder is off unless asked for
(``usher replay --eta-accuracy``, ``bench/eta.py``). The planner places and takes back jobs on
the state, which can reorder the capacity indexes' sets, and placement samples nodes from them:
a replay that records (like a console whose ETAs are read) may place a few gangs on other nodes
of equal score than one that does not.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .explain import planner_order
from .policy.backfill import estimate_starts
from .state import ClusterState, Job

#: simulated seconds between samples
SAMPLE_EVERY = 300.0
#: how long before its start the second estimate is taken
HORIZON = 3600.0


@dataclass(slots=True)
class _Watch:
    """One waiting job's estimates so far."""

    #: (when, estimate or None) of the first sample that saw the job waiting
    first: tuple[float, float | None]
    #: the samples of the last hour, and the latest one before them
    recent: deque[tuple[float, float | None]] = field(default_factory=deque)
    before: tuple[float, float | None] | None = None


@dataclass(slots=True)
class Score:
    """One estimate against the start it was for."""

    given_at: float
    estimate: float | None
    started: float

    @property
    def error(self) -> float | None:
        return None if self.estimate is None else self.estimate - self.started

    @property
    def within_10_percent(self) -> bool:
        if self.estimate is None:
            return False
        return abs(self.estimate - self.started) <= 0.1 * max(0.0, self.started - self.given_at)


@dataclass(slots=True)
class EtaAccuracy:
    """Records estimates during a replay (``observe`` after each moment) and scores them."""

    next_sample: float = 0.0
    watching: dict[int, _Watch] = field(default_factory=dict)
    first: list[Score] = field(default_factory=list)
    hour_before: list[Score] = field(default_factory=list)

    def observe(self, state: ClusterState, now: float, submitted: bool) -> None:
        """Score the jobs that started since the last call; sample when a sample is due or a job
        was ``submitted`` (its first estimate is the one shown at its submission)."""
        for jid in [jid for jid in self.watching if state.jobs[jid].first_work_start is not None]:
            self._score(jid, state.jobs[jid])
        if now < self.next_sample and not submitted:
            return
        self.next_sample = now + SAMPLE_EVERY
        order = planner_order(state)
        starts = estimate_starts(state, order, now)
        for job in order:
            if job.first_work_start is not None:
                continue  # requeued after a run: only the wait for a first start is scored
            sample = (now, starts.get(job.id))
            watch = self.watching.get(job.id)
            if watch is None:
                watch = self.watching[job.id] = _Watch(sample)
            recent = watch.recent
            recent.append(sample)
            while recent and recent[0][0] <= now - HORIZON:
                watch.before = recent.popleft()

    def _score(self, jid: int, job: Job) -> None:
        watch = self.watching.pop(jid)
        started = job.first_work_start
        assert started is not None
        self.first.append(Score(watch.first[0], watch.first[1], started))
        candidates = [s for s in (watch.before, *watch.recent) if s is not None and s[0] <= started - HORIZON]
        if candidates:
            when, estimate = candidates[-1]
            self.hour_before.append(Score(when, estimate, started))

    def summary(self) -> dict[str, Any]:
        """The report's ``etaAccuracy``: per kind of estimate, how many, how far off, how many close."""
        return {
            "sampleEverySeconds": SAMPLE_EVERY,
            "first": summarise(self.first),
            "hourBefore": summarise(self.hour_before),
        }


def summarise(scores: list[Score]) -> dict[str, Any]:
    """How many scores, how many without an estimate, how far off (median, p90), how many close."""
    errors = sorted(abs(e) for s in scores if (e := s.error) is not None)
    late = [s for s in scores if s.error is not None and s.error < 0]
    return {
        "jobs": len(scores),
        "withoutEstimate": sum(1 for s in scores if s.estimate is None),
        "medianAbsErrorSeconds": _quantile(errors, 0.5),
        "p90AbsErrorSeconds": _quantile(errors, 0.9),
        "within10Percent": round(sum(1 for s in scores if s.within_10_percent) / len(errors), 4) if errors else None,
        "startedLaterThanEstimated": round(len(late) / len(errors), 4) if errors else None,
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)
