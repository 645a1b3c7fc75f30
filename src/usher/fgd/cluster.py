"""The simulated cluster of the FGD comparison: free capacity per node and GPU, as arrays.

``ClusterArrays`` holds, per node, the free milli-GPUs of each GPU (a row of an ``N x 8``
matrix, unused columns 0), free CPU and memory, and what the policies score on: whole GPUs
free, total GPU free, the GPU-pod kinds already there (for GPU clustering). It also keeps the
fragmentation of every node against the workload's typical pods up to date *incrementally*:
per node and per demand group of the ``FragmentationModel`` it stores how many GPUs have at
least the group's share free and how much they have, so a placement recomputes one row and a
policy can evaluate "fragment after placing this pod here" for every candidate at once.
"""

from __future__ import annotations

import numpy as np

from usher.engine.policy.fragmentation import FragmentationModel, PodDemand
from usher.engine.state import MILLI

from .workload import MAX_GPUS_PER_NODE, NodeList

SHARE_TAG = 0
"""Column of ``kinds`` counting shared-GPU pods; column k counts k-GPU pods."""


class FragmentArrays:
    """A ``FragmentationModel`` evaluated with numpy over many nodes at once."""

    def __init__(self, model: FragmentationModel, node_models: list[str]) -> None:
        if model.counts_memory:
            raise ValueError("FragmentArrays counts CPU and GPUs only, as FGD does: build its model from memory-blind demands")
        groups = model.groups
        self.share = np.array([g.gpu_milli for g in groups], dtype=np.int64)
        self.need = np.array([g.gpus for g in groups], dtype=np.int64)
        self.accepts = np.array(
            [[g.models is None or name in g.models for g in groups] for name in node_models], dtype=bool
        ).reshape(len(node_models), len(groups))
        thresholds = sorted({c for g in groups for c in g.cpu_thresholds})
        self.thresholds = np.array(thresholds, dtype=np.int64)
        table = np.zeros((len(groups), len(thresholds) + 1))
        for gi, g in enumerate(groups):
            for k, cpu in enumerate(thresholds):
                table[gi, k + 1] = g.weight_fitting_cpu(cpu)
        self.cpu_weight = table.T.copy()  # (K+1, G): weight of the group's pods that fit this CPU

    def stats(self, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row and group: GPUs with at least the group's share free, and their free sum."""
        enough = free[:, :, None] >= self.share[None, None, :]
        return enough.sum(axis=1), (free[:, :, None] * enough).sum(axis=1)

    def fragment(self, total: np.ndarray, count: np.ndarray, usable: np.ndarray,
                 cpu_free: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Fragment (milli-GPUs) from the per-group stats: total minus what typical pods could use."""
        weight = self.cpu_weight[np.searchsorted(self.thresholds, cpu_free, side="right")]
        fits = (count >= self.need) & self.accepts[model]
        return total - (weight * fits * usable).sum(axis=1)


class ClusterArrays:
    """Free capacity of every node, with fragmentation kept current."""

    def __init__(self, nodes: NodeList, fragmentation: FragmentationModel, order_seed: int = 0) -> None:
        n = len(nodes.names)
        #: each node's place in the run's node order (ties between equal scores go to the first)
        self.rank = np.random.default_rng(order_seed).permutation(n)
        self.nodes = nodes
        self.free = np.zeros((n, MAX_GPUS_PER_NODE), dtype=np.int64)
        for i, g in enumerate(nodes.gpus):
            self.free[i, :g] = MILLI
        self.cpu_free = nodes.cpu.copy()
        self.mem_free = nodes.memory.copy()
        self.whole_free = nodes.gpus.copy()
        self.gpu_free = nodes.gpus * MILLI
        self.kinds = np.zeros((n, MAX_GPUS_PER_NODE + 1), dtype=np.int64)
        self.total_milli = int(nodes.gpus.sum()) * MILLI
        self.used_milli = 0
        self.frag = FragmentArrays(fragmentation, nodes.models)
        self.count, self.usable = self.frag.stats(self.free)
        self.fragment = self.frag.fragment(self.gpu_free, self.count, self.usable, self.cpu_free, nodes.model)
        self.fragment_total = float(self.fragment.sum())

    def feasible(self, demand: PodDemand, memory: int) -> np.ndarray:
        """Nodes where the pod fits now (CPU, memory, GPU model, GPUs)."""
        ok = (self.cpu_free >= demand.cpu) & (self.mem_free >= memory)
        if demand.gpus == 0:
            return ok
        if demand.models is not None:
            accepted = np.array([m in demand.models for m in self.nodes.models])
            ok &= accepted[self.nodes.model]
        if demand.gpu_milli >= MILLI:
            return ok & (self.whole_free >= demand.gpus)
        return ok & (self.free >= demand.gpu_milli).any(axis=1)

    def take(self, node: int, slots: list[int], demand: PodDemand, memory: int) -> None:
        """Place the pod on ``node``, on GPU columns ``slots`` (whole GPUs, or one shared)."""
        row = self.free[node]
        for s in slots:
            if row[s] == MILLI:
                self.whole_free[node] -= 1
            row[s] -= demand.gpu_milli
        milli = demand.gpu_milli * demand.gpus
        self.gpu_free[node] -= milli
        self.used_milli += milli
        self.cpu_free[node] -= demand.cpu
        self.mem_free[node] -= memory
        if demand.gpus:
            self.kinds[node, SHARE_TAG if demand.gpu_milli < MILLI else demand.gpus] += 1
        count, usable = self.frag.stats(row[None, :])
        self.count[node], self.usable[node] = count[0], usable[0]
        new = float(self.frag.fragment(self.gpu_free[node:node + 1], count, usable,
                                       self.cpu_free[node:node + 1], self.nodes.model[node:node + 1])[0])
        self.fragment_total += new - self.fragment[node]
        self.fragment[node] = new

    def first_free_slots(self, node: int, k: int) -> list[int]:
        """The first ``k`` wholly free GPUs of a node, by index."""
        return [int(s) for s in np.flatnonzero(self.free[node] == MILLI)[:k]]

    def tightest_slot(self, node: int, share: int) -> int:
        """The GPU with the least free that still holds ``share`` (lowest index on ties)."""
        row = self.free[node]
        candidates = np.where(row >= share, row, MILLI + 1)
        return int(np.argmin(candidates))
