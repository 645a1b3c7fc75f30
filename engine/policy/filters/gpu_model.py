"""The GPU model as a placement feature: a pod with GPUs goes only on a model it accepts.

``PodGroup.models`` (None: any) against ``Node.gpu_model``; a pod without GPUs takes any node.
The capacity index is bucketed by model, so the hot path looks only at accepted models' buckets;
node lists (a domain's, a narrow pod's) are checked with ``accepts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup


def accepts(pod: PodGroup, node: Node) -> bool:
    """A pod with GPUs goes only on a node with a GPU model it accepts."""
    return not pod.gpu_milli or pod.models is None or node.gpu_model in pod.models


class GpuModel:
    name = "GpuModel"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return bool(pod.gpu_milli) and pod.models is not None

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        return accepts(pod, node)

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        return True

    @staticmethod
    def why(node: Node, pod: PodGroup) -> str | None:
        return None if accepts(pod, node) else "GPU model not accepted"
