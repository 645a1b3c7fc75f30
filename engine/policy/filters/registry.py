"""The one filter list: what placing a pod and explaining why it does not fit both run.

``FILTERS`` is in kube-scheduler's order (cheap and static first). A filter is a feature module's
class with four parts (``Filter``); ``diagnose`` asks each its ``why`` over every node,
``never_fits`` its ``ever``, and the hot path its ``now``, compiled per pod by ``hot_checks``:
only the filters the capacity index does not already answer (``INDEXED``: it holds schedulable
nodes, bucketed by GPU model and whole GPUs free; node constraints come as the pod's
``eligible`` set, checked by ``node_allowed`` on node lists), and only those the pod can trip.
A new feature is a module beside the others and a line here; a test holds every filter's
``why`` to its ``ever`` and ``now``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .cpu_memory import CpuMemoryFit
from .extras import ExtraFit
from .gpu_fit import GpuFit
from .gpu_model import GpuModel, accepts
from .node_constraints import NodeConstraints, allows
from .pod_rules import PodRules
from .schedulable import Schedulable

if TYPE_CHECKING:
    from ...state import ClusterState, Node, PodGroup

#: one compiled hot-path check: whether the node has room for the pod now
Check = Callable[["Node", "PodGroup"], bool]


class Filter(Protocol):
    """One placement feature's filter (kube-scheduler's FilterPlugin, split in what does not
    change while the node stays as it is built and what does)."""

    name: str

    def trips(self, pod: PodGroup) -> bool:
        """Whether any node could fail the pod here (else the hot path skips the filter)."""

    def ever(self, node: Node, pod: PodGroup) -> bool:
        """Whether the node, empty, could hold the pod."""

    def now(self, node: Node, pod: PodGroup) -> bool:
        """Whether the node has room for the pod as things are (given ``ever``)."""

    def why(self, node: Node, pod: PodGroup) -> str | None:
        """None when ``ever`` and ``now`` hold, else the words for the first that does not."""


FILTERS: tuple[Filter, ...] = (
    Schedulable(), GpuModel(), NodeConstraints(), GpuFit(), CpuMemoryFit(), ExtraFit(), PodRules(),
)
#: the filters whose ``now`` the capacity index and ``node_allowed`` answer before a candidate
#: node reaches the hot path's checks (pod rules: the placer narrows such a pod's eligible nodes
#: to what they allow before each pod, ``pod_rules.narrowed``)
INDEXED = frozenset({Schedulable.name, GpuModel.name, NodeConstraints.name, GpuFit.name, PodRules.name})
_HOT: tuple[Filter, ...] = tuple(f for f in FILTERS if f.name not in INDEXED)
#: each hot filter with its bit, and the compiled checks for every set of bits (a pod's ``trips``)
_HOT_BITS: tuple[tuple[int, Filter], ...] = tuple((1 << i, f) for i, f in enumerate(_HOT))
_COMPILED: tuple[tuple[Check, ...], ...] = tuple(
    tuple(f.now for bit, f in _HOT_BITS if mask & bit) for mask in range(1 << len(_HOT))
)


def hot_checks(pod: PodGroup) -> tuple[Check, ...]:
    """The ``now`` checks a candidate node must pass for ``pod`` in the hot path: those of the
    filters the index does not answer that the pod can trip, in ``FILTERS`` order (compiled
    once for every combination, so a placement builds nothing)."""
    mask = 0
    for bit, f in _HOT_BITS:
        if f.trips(pod):
            mask |= bit
    return _COMPILED[mask]


def node_allowed(pod: PodGroup, node: Node) -> bool:
    """Whether the pod may ever go on the node by its GPU model and node constraints (the
    filters that depend on the pod alone, not on sizes); schedulability is checked apart."""
    return accepts(pod, node) and allows(pod, node)


def never_fits(node: Node, pod: PodGroup) -> bool:
    """Whether some filter rules the node out for the pod even were it empty."""
    for f in FILTERS:
        if not f.ever(node, pod):
            return True
    return False


def diagnose(state: ClusterState, pod: PodGroup) -> dict[str, int]:
    """Run every filter over every node: how many nodes each reason rules out (the first
    failing filter's words), and how many it ``fits``."""
    counts: dict[str, int] = {}
    for node in state.nodes:
        for f in FILTERS:
            reason = f.why(node, pod)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                break
        else:
            counts["fits"] = counts.get("fits", 0) + 1
    return counts
