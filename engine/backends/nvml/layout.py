"""NVLink islands from which GPUs are linked: the layout the engine places multi-GPU pods by.

An island is a set of GPUs that reach each other over NVLink: GPUs linked directly, or through
the same NVSwitch fabric. ``islands_of`` takes the GPU count, the pairs found linked and the GPUs
with a link to an NVSwitch, and returns the islands as connected components (every GPU in
exactly one island, a GPU without NVLink alone in its own), each sorted, ordered by their lowest
GPU. Examples:

- an HGX H100 board: every GPU links to the NVSwitches: one island ``0,1,2,3,4,5,6,7``;
- two 4-GPU NVLink meshes: ``0,1,2,3;4,5,6,7``;
- PCIe only: ``0;1;2;3``.

Components are a slight over-approximation for partial meshes (DGX-1's hybrid cube mesh comes
out as one island though not every pair has a direct link); placement only needs "inside one
island beats across islands", which they give.
"""

from __future__ import annotations

from collections.abc import Iterable


def islands_of(count: int, linked: Iterable[tuple[int, int]], on_switch: Iterable[int] = ()) -> list[list[int]]:
    """Connected components of GPUs ``0..count-1`` under ``linked`` pairs and a shared NVSwitch fabric."""
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for a, b in linked:
        if 0 <= a < count and 0 <= b < count:
            join(a, b)
    switched = sorted(i for i in set(on_switch) if 0 <= i < count)
    for other in switched[1:]:
        join(switched[0], other)
    groups: dict[int, list[int]] = {}
    for i in range(count):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda island: island[0])
