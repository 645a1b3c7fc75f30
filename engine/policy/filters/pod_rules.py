"""Rules against other pods as a placement feature: where a pod may go given the pods around it.

A backend that knows the pods around judges a pod group's rules (pod affinity, anti-affinity and
topology spread, ``engine/podrules``; fed the cluster's pods by ``backends/kube/podrules``, a
replay's running jobs by ``podrules/replay``) and hands the engine a
``PlacementRules`` on the ``PodGroup``. What makes these rules unlike the other filters is that
the gang's own pods count as they are placed: a "one per node" gang's second pod may not go where
its first went. So the placer asks, before each pod of such a group, which nodes the rules allow
now (``narrowed``), given the job's pods placed so far in the attempt, and looks only there; the
gang is still placed all or none. A pod group without rules (``rules is None``) never reaches
this module: the hot path's filter list leaves it out (``registry.INDEXED``), so pods that carry
no rule pay nothing. ``why`` is what "why pending" counts per node, as things are. A preemption
search tells the rules which running jobs it has lifted (``gone``): their pods no longer count,
so a victim that blocks a rule is one whose eviction helps, as one that holds capacity is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup


def narrowed(pod: PodGroup, nodes: Sequence[Node], placed: Sequence[tuple[str, int]],
             gone: frozenset[int] = frozenset()) -> PodGroup:
    """``pod`` allowed only on the nodes its rules allow for one more pod now (its eligible
    nodes intersected with them), its preference tiers refined by the rules' own ranking
    (``PlacementRules.tiers``) within each tier it has: the backend's tiers come first. The
    pods of the jobs ``gone`` (victims a preemption search lifted) count as gone."""
    assert pod.rules is not None
    allowed = pod.rules.allowed(nodes, placed, gone)
    eligible = allowed if pod.eligible is None else pod.eligible & allowed
    own = [t & eligible for t in pod.preferred if t & eligible]
    ranked = pod.rules.tiers(nodes, placed, eligible, gone)
    if ranked:
        rest = eligible.difference(*own) if own else eligible
        refined = []
        for tier in [*own, rest]:
            left = tier
            for r in ranked:
                part = left & r
                if part:
                    refined.append(part)
                    left = left - part
            if left:
                refined.append(left)
        own = refined[:-1] if refined and refined[-1] <= rest else refined
    return replace(pod, eligible=eligible, preferred=tuple(own))


class PodRules:
    name = "PodRules"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return pod.rules is not None

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        return True

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        return pod.rules is None or pod.rules.refusal(node) is None

    @staticmethod
    def why(node: Node, pod: PodGroup) -> str | None:
        return None if pod.rules is None else pod.rules.refusal(node)
