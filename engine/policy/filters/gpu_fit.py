"""GPU count as a placement feature: whole GPUs free, or one GPU with room for a share.

A pod of whole GPUs needs that many free on one node; a shared pod (``PodGroup.share``) needs
one GPU with that much left. The capacity index (nodes bucketed by whole GPUs free, and the nodes
with a partly used GPU) is this filter's ``now`` precomputed, so the hot path does not run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup


class GpuFit:
    name = "GpuFit"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return pod.gpu_milli > 0

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        if pod.whole_gpus:
            return node.gpu_count >= pod.whole_gpus
        return not pod.share or node.gpu_count > 0

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        if pod.whole_gpus:
            return node.whole_free >= pod.whole_gpus
        return not pod.share or max(node.gpu_free, default=0) >= pod.share

    @classmethod
    def why(cls, node: Node, pod: PodGroup) -> str | None:
        if not cls.ever(node, pod):
            return "too few GPUs on node"
        if not cls.now(node, pod):
            return "not enough free GPUs"
        return None
