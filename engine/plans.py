"""How the cycle tries a job: its ``Attempt``s and its ``Plan`` (the attempts and the job's kind).

These records sit at the bottom of the engine because both sides need them: ``cycle`` builds
them (``kinds.plan_of``), and the cycle's memo (``memo.CycleMemo``, which the policies below the
cycle also read) keeps them. Keeping them here lets ``memo`` name them without importing the
cycle, which imports nearly the whole engine.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (milli-GPUs, millicores, bytes): the same shape as ``state.Vec``, named here so this module
#: imports nothing of the engine
Request = tuple[int, int, int]


@dataclass(slots=True, frozen=True)
class Attempt:
    """One way the cycle tries to admit a job: the full gang, or its ``minCount`` gang."""

    counts: tuple[int, ...]
    request: Request
    #: memo keys, small ints interned per state: quota verdicts by (queue, request); preemption
    #: by (queue, priority, request, groups); placement by (groups, counts)
    quota_key: int
    preempt_key: int
    shape: int


@dataclass(slots=True, frozen=True)
class Plan:
    """A job's attempts, and its kind: jobs of one kind get the same verdicts in a cycle."""

    groups: tuple
    min_count: int
    attempts: tuple[Attempt, ...]
    kind: int
