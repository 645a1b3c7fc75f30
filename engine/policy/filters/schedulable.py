"""Schedulability as a placement feature: no pod goes on a failed or cordoned node.

The capacity index holds schedulable nodes only, so the hot path never meets the others; the
filter is what ``diagnose`` counts them under.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...state import Node, PodGroup


class Schedulable:
    name = "NodeSchedulable"

    @staticmethod
    def trips(pod: PodGroup) -> bool:
        return True

    @staticmethod
    def ever(node: Node, pod: PodGroup) -> bool:
        return not (node.cordoned or node.failed)

    @staticmethod
    def now(node: Node, pod: PodGroup) -> bool:
        return True

    @staticmethod
    def why(node: Node, pod: PodGroup) -> str | None:
        if node.failed:
            return "node failed"
        if node.cordoned:
            return "node cordoned"
        return None
