"""Inside one node: how a node scores for a pod, and which of its GPUs the pod takes.

Kept apart from ``placement`` (which chooses the node) because both halves read only one node
and a pod: NVLink islands (score a node by the tightest island that holds a multi-GPU pod, then
take that island's GPUs), bin packing (score by the GPUs left free), and shared GPUs (a share goes
onto a GPU already shared, best fit, so whole GPUs stay whole). The ``lowest_*`` pickers are the
baselines' placement, which ignores NVLink and sharing.
"""

from __future__ import annotations

from typing import Protocol

from ..state import MILLI, Node, PodGroup


# -- score plugins ------------------------------------------------------------------------


class ScorePlugin(Protocol):
    name: str
    weight: int

    def score(self, node: Node, pod: PodGroup) -> int:
        """0 to 100: how good the node is for the pod."""


class NvlinkIsland:
    """Prefers nodes where a multi-GPU pod fits inside one NVLink island, and tightly."""

    name = "NvlinkIsland"
    weight = 2

    def score(self, node: Node, pod: PodGroup) -> int:
        g = pod.whole_gpus
        if g <= 1 or len(node.islands) == 1:
            return 100
        best = None
        for island in node.islands:
            free = sum(1 for i in island if node.gpu_free[i] == MILLI)
            if free >= g and (best is None or free < best):
                best = free
        if best is None:
            return 0
        return 50 + (50 * g) // best


class GpuBinPack:
    """Prefers nodes left with the fewest free GPUs (keeps big holes for big jobs)."""

    name = "GpuBinPack"
    weight = 1

    def score(self, node: Node, pod: PodGroup) -> int:
        if node.gpu_count == 0:
            return 100
        left = node.whole_free - pod.whole_gpus
        return 100 - (100 * left) // node.gpu_count


SCORES: tuple[ScorePlugin, ...] = (NvlinkIsland(), GpuBinPack())


def total_score(node: Node, pod: PodGroup) -> int:
    return sum(p.weight * p.score(node, pod) for p in SCORES)


# -- inside one node ----------------------------------------------------------------------


def pick_whole_gpus(node: Node, g: int) -> list[int]:
    """The tightest NVLink island with ``g`` free GPUs; else the fewest islands that hold them."""
    free = node.gpu_free
    per_island = [[i for i in island if free[i] == MILLI] for island in node.islands]
    best: list[int] | None = None
    for cand in per_island:
        if len(cand) >= g and (best is None or len(cand) < len(best)):
            best = cand
    if best is not None:
        return best[:g]
    out: list[int] = []
    for cand in sorted(per_island, key=len, reverse=True):
        out.extend(cand[: g - len(out)])
        if len(out) == g:
            break
    return out


def pick_shared_gpu(node: Node, share: int) -> int | None:
    """A partly used GPU with room (least left over); else a whole GPU from the emptiest island."""
    free = node.gpu_free
    best = None
    for i, f in enumerate(free):
        if share <= f < MILLI and (best is None or f < free[best]):
            best = i
    if best is not None:
        return best
    island_best = None
    for island in node.islands:
        whole = [i for i in island if free[i] == MILLI]
        if whole and (island_best is None or len(whole) < len(island_best)):
            island_best = whole
    return island_best[0] if island_best else None


def lowest_whole_gpus(node: Node, g: int) -> list[int]:
    """The ``g`` free whole GPUs with the lowest indices (placement that ignores NVLink)."""
    return [i for i, f in enumerate(node.gpu_free) if f == MILLI][:g]


def lowest_shared_gpu(node: Node, share: int) -> int | None:
    """The GPU with the lowest index that has ``share`` free (shared or whole)."""
    return next((i for i, f in enumerate(node.gpu_free) if f >= share), None)
