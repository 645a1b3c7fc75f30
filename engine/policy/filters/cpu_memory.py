"""CPU and memory as a placement feature: the node has (``ever``) and has left (``now``) them.

Checked on every candidate in the hot path (the capacity index knows only GPUs), even for a pod
that asks none: a node can be over-committed (pods another scheduler placed), and then it holds
no more pods until it is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup


class CpuMemoryFit:
    name = "CpuMemoryFit"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return True

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        return node.cpu >= pod.cpu and node.memory >= pod.memory

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        return node.cpu_free >= pod.cpu and node.mem_free >= pod.memory

    @staticmethod
    def why(node: Node, pod: PodGroup) -> str | None:
        if node.cpu < pod.cpu or node.memory < pod.memory:
            return "node too small (cpu/memory)"
        if node.cpu_free < pod.cpu:
            return "not enough free cpu"
        if node.mem_free < pod.memory:
            return "not enough free memory"
        return None
