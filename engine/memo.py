"""What the scheduling cycle and its policies remember between cycles, kept off ``ClusterState``.

``ClusterState`` is the cluster and its jobs; everything here is derived from it and may be
dropped at any moment between two cycles (``forget``) without changing a decision, only their
cost: each entry is keyed or checked by the state version it was computed at (``epoch``,
``capacity_changes``, ``quota_changes``, node count), or by what it was computed from (a job's
groups). The cycle reaches the memo of the state it runs on with ``memo_of``, so the policies it
calls (``quota``, ``preemption``, ``consolidation``, ``backfill``, ``placement``) need no memo
argument threaded through them; the memo lives as long as its state and is not pickled with it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plans import Plan
    from .state import ClusterState, ReasonCell

_WHOLE_FREE = attrgetter("whole_free")


@dataclass(slots=True)
class CycleMemo:
    """One state's memos (see the module docstring for what makes them safe to drop)."""

    #: per job id: its groups, minCount and the admission attempts the cycle makes for it
    #: (``kinds.plan_of``), computed once rather than on every cycle
    plans: dict[int, Plan] = field(default_factory=dict)
    #: the same plans by (queue, priority, minCount, groups): jobs alike share one
    plans_by_signature: dict[tuple, Plan] = field(default_factory=dict)
    #: the memo keys of those attempts, interned as small ints
    ids: dict[tuple, int] = field(default_factory=dict)
    #: a reason cell's kind (``plans.Plan.kind``), once a cycle asked
    cell_kinds: dict[ReasonCell, int] = field(default_factory=dict)
    #: failed preemption searches (``policy.preemption.find_victims``), kept until the epoch changes
    failed_searches: dict[tuple, tuple] = field(default_factory=dict)
    #: failed consolidation searches (``policy.consolidation``): (epoch, time, the domains and
    #: movers tried) by kind of gang
    failed_consolidations: dict[tuple, tuple] = field(default_factory=dict)
    #: ``policy.quota``'s share bases and cohort pools, valid while ``quota_version`` is the
    #: state's ``quota_changes``
    share_basis: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    pools: dict[tuple[str, int], float] = field(default_factory=dict)
    quota_version: int = 0
    #: ``most_whole_free``: (capacity_changes, most whole GPUs free in one domain) per level
    most_free: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: ``policy.quota.ending_by``'s last answer: (state epoch, running jobs, quota group, start)
    #: and the jobs ending by then
    ending: tuple[tuple, list] | None = None
    #: ``Placer._wide_hosts``: (fragmentation model, node count, node ids)
    wide_hosts: tuple[object, int, frozenset[int]] | None = None

    def quotas(self, state: ClusterState) -> CycleMemo:
        """This memo, its quota memos dropped if the queues' limits changed since they were made."""
        if self.quota_version != state.quota_changes:
            self.share_basis.clear()
            self.pools.clear()
            self.quota_version = state.quota_changes
        return self


_memos: weakref.WeakKeyDictionary[ClusterState, CycleMemo] = weakref.WeakKeyDictionary()


def _dead() -> None:
    return None


#: the last state asked for and its memo (a cycle asks for one state thousands of times)
_last: tuple[weakref.ref | object, CycleMemo | None] = (_dead, None)


def memo_of(state: ClusterState) -> CycleMemo:
    """The memo of ``state``, made empty the first time it is asked for."""
    global _last
    ref, memo = _last
    if memo is not None and ref() is state:  # type: ignore[operator]
        return memo
    memo = _memos.get(state)
    if memo is None:
        memo = _memos[state] = CycleMemo()
    _last = (weakref.ref(state), memo)
    return memo


def forget(state: ClusterState) -> None:
    """Drop every memo of ``state`` (the next cycle computes afresh, and decides the same)."""
    global _last
    _memos.pop(state, None)
    _last = (_dead, None)


def most_whole_free(state: ClusterState, level: int) -> int:
    """The most whole GPUs free in one domain of ``level`` (kept until capacity changes)."""
    most_free = memo_of(state).most_free
    cached = most_free.get(level)
    if cached is None or cached[0] != state.capacity_changes:
        cached = most_free[level] = (state.capacity_changes, max(map(_WHOLE_FREE, state.domains[level]), default=0))
    return cached[1]
