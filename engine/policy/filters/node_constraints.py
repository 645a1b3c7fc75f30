"""Node constraints as a placement feature: selectors, affinity and taints, as node ids.

The backend matches a pod's constraints against its nodes (on a cluster: ``kube.constraints``)
and hands the engine the result, ``PodGroup.eligible`` (None: any node) with the words for the
nodes left out (``PodGroup.exclusions``). Here is only what the engine does with that set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup

#: the filter's words; ``explain`` says ``PodGroup.exclusions`` instead when the backend gave them
EXCLUDED = "excluded by its node constraints"


def allows(pod: PodGroup, node: Node) -> bool:
    return pod.eligible is None or node.id in pod.eligible


class NodeConstraints:
    name = "NodeConstraints"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return pod.eligible is not None

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        return allows(pod, node)

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        return True

    @staticmethod
    def why(node: Node, pod: PodGroup) -> str | None:
        return None if allows(pod, node) else EXCLUDED
