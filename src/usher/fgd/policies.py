"""The FGD paper's placement policies, our implementations of its definitions.

Each policy scores every feasible node the way the paper's simulator does: an integer score from
0 to 100 per node (kube-scheduler's score range; BestFit's is min-max normalised across the
nodes, as its NormalizeScore does), and the highest wins. Equal scores go to the node first in
a node order shuffled with the run's seed: the simulator prefixes node names with a seeded random
permutation and its scheduler takes the first of equal scores. (This matters: FGD's integer
score ties often, and consistent tie-breaking is what packs; with ties broken uniformly at random
it packs markedly worse, see docs/results.md, "FGD's ties".) Then a GPU is chosen on the node for
a shared pod; whole-GPU pods take the first free GPUs by index.

- ``random``: a feasible node at random; a shared pod on a random GPU that holds it.
- ``bestfit``: least CPU and GPU left after placing, each over the largest node (128 cores,
  8 GPUs), weighted half and half.
- ``dotprod`` (Tetris): the smallest dot product of the node's free (CPU, GPU) and the pod's
  demand, both over the largest node.
- ``gpupacking``: a shared GPU already in use first (the fuller the better), then free GPUs on
  a node already in use (the fewer the better), then an idle node (the fewer GPUs the better).
- ``gpuclustering``: a node already running pods of the same GPU kind (shared, 1, 2, 4 or 8
  GPUs) only, then with that kind among others, then an idle node, then any; within a tier the
  fuller node.
- ``fgd``: the placement (node and GPU) that increases the node's fragmentation the least,
  scored as ``100 * sigmoid(-increase / 1000)``.

All but ``random`` and ``fgd`` put a shared pod on the GPU with the least free that holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import numpy as np

from usher.engine.policy.fragmentation import PodDemand
from usher.engine.state import MILLI

from .cluster import SHARE_TAG, ClusterArrays

MAX_SPEC_CPU = 128_000
"""Millicores of the largest node, the normaliser of BestFit and DotProd."""
MAX_SPEC_GPU = 8 * MILLI
MAX_SCORE = 100

Choice = tuple[int, list[int]] | None
"""A node index and the GPU columns the pod takes there, or None when nothing fits."""


class PolicyName(StrEnum):
    RANDOM = "random"
    BESTFIT = "bestfit"
    DOTPROD = "dotprod"
    GPUPACKING = "gpupacking"
    GPUCLUSTERING = "gpuclustering"
    FGD = "fgd"
    USHER = "usher"


def _pick(cluster: ClusterArrays, candidates: np.ndarray, scores: np.ndarray) -> int:
    """The highest score; among equals, the node first in the run's node order."""
    best = candidates[scores == scores.max()]
    return int(best[np.argmin(cluster.rank[best])]) if len(best) > 1 else int(best[0])


def _gpus_for(cluster: ClusterArrays, node: int, demand: PodDemand) -> list[int]:
    if demand.gpus == 0:
        return []
    if demand.gpu_milli >= MILLI:
        return cluster.first_free_slots(node, demand.gpus)
    return [cluster.tightest_slot(node, demand.gpu_milli)]


def choose_random(cluster: ClusterArrays, demand: PodDemand, memory: int, rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    node = int(candidates[int(rng.integers(len(candidates)))])
    if demand.gpus and demand.gpu_milli < MILLI:
        slots = np.flatnonzero(cluster.free[node] >= demand.gpu_milli)
        return node, [int(slots[int(rng.integers(len(slots)))])]
    return node, _gpus_for(cluster, node, demand)


def choose_bestfit(cluster: ClusterArrays, demand: PodDemand, memory: int, rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    left = (0.5 * (cluster.cpu_free[candidates] - demand.cpu) / MAX_SPEC_CPU
            + 0.5 * (cluster.gpu_free[candidates] - demand.gpu_milli * demand.gpus) / MAX_SPEC_GPU)
    raw = ((1.0 - left) * MAX_SCORE).astype(np.int64)
    low, high = raw.min(), raw.max()
    scores = (raw - low) * MAX_SCORE // (high - low) if high > low else np.zeros_like(raw)
    node = _pick(cluster, candidates, scores)
    return node, _gpus_for(cluster, node, demand)


def choose_dotprod(cluster: ClusterArrays, demand: PodDemand, memory: int, rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    dot = (cluster.cpu_free[candidates] / MAX_SPEC_CPU * (demand.cpu / MAX_SPEC_CPU)
           + cluster.gpu_free[candidates] / MAX_SPEC_GPU * (demand.gpu_milli * demand.gpus / MAX_SPEC_GPU)) / 2
    scores = (MAX_SCORE * (1.0 - dot)).astype(np.int64)
    node = _pick(cluster, candidates, scores)
    return node, _gpus_for(cluster, node, demand)


def choose_gpupacking(cluster: ClusterArrays, demand: PodDemand, memory: int, rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    if demand.gpus == 0:
        scores = np.zeros(len(candidates), dtype=np.int64)
    else:
        whole = cluster.whole_free[candidates]
        idle = whole == cluster.nodes.gpus[candidates]
        idle_score = np.maximum(MAX_SCORE // 3 - whole, whole)
        if demand.gpu_milli >= MILLI:
            used_score = np.full(len(candidates), max(MAX_SCORE // 2 - demand.gpus, MAX_SCORE // 3))
        else:
            free = cluster.free[candidates]
            tightest = np.where(free >= demand.gpu_milli, free, MILLI + 1).min(axis=1)
            shared_score = np.maximum(MAX_SCORE - (tightest * 100 // MILLI) // 10, MAX_SCORE // 2)
            used_score = np.where(tightest == MILLI, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), shared_score)
        scores = np.where(idle, idle_score, used_score)
    node = _pick(cluster, candidates, scores)
    return node, _gpus_for(cluster, node, demand)


def choose_gpuclustering(cluster: ClusterArrays, demand: PodDemand, memory: int,
                         rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    if demand.gpus == 0:
        scores = np.zeros(len(candidates), dtype=np.int64)
    else:
        kinds = cluster.kinds[candidates]
        present = (kinds > 0).sum(axis=1)
        same = kinds[:, SHARE_TAG if demand.gpu_milli < MILLI else demand.gpus] > 0
        quarter = MAX_SCORE // 4
        fullness = quarter * (MAX_SPEC_GPU - cluster.gpu_free[candidates]) // MAX_SPEC_GPU
        tier = np.where(same, np.where(present == 1, 3, 2), np.where(present == 0, 1, 0))
        scores = fullness + tier * quarter
    node = _pick(cluster, candidates, scores)
    return node, _gpus_for(cluster, node, demand)


def _sigmoid_score(decrease: np.ndarray) -> np.ndarray:
    return (MAX_SCORE / (1.0 + np.exp(-decrease / MILLI))).astype(np.int64)


def choose_fgd(cluster: ClusterArrays, demand: PodDemand, memory: int, rng: np.random.Generator) -> Choice:
    candidates = np.flatnonzero(cluster.feasible(demand, memory))
    if len(candidates) == 0:
        return None
    frag = cluster.frag
    model = cluster.nodes.model[candidates]
    cpu_after = cluster.cpu_free[candidates] - demand.cpu
    if demand.gpus == 0 or demand.gpu_milli >= MILLI:
        k = demand.gpus
        after = frag.fragment(cluster.gpu_free[candidates] - k * MILLI, cluster.count[candidates] - k,
                              cluster.usable[candidates] - k * MILLI, cpu_after, model)
        scores = _sigmoid_score(cluster.fragment[candidates] - after)
        node = _pick(cluster, candidates, scores)
        return node, _gpus_for(cluster, node, demand)
    # A shared pod: every distinct free amount on each node is an option (the lowest GPU index).
    share = demand.gpu_milli
    free = cluster.free[candidates]
    rows, cols = np.nonzero(free >= share)
    codes = rows * (2 * MILLI) + free[rows, cols]
    _, first = np.unique(codes, return_index=True)
    rows, cols = rows[first], cols[first]
    before = free[rows, cols]
    after_free = before - share
    was = before[:, None] >= frag.share[None, :]
    now = after_free[:, None] >= frag.share[None, :]
    count = cluster.count[candidates[rows]] - was + now
    usable = cluster.usable[candidates[rows]] - was * before[:, None] + now * after_free[:, None]
    after = frag.fragment(cluster.gpu_free[candidates[rows]] - share, count, usable, cpu_after[rows], model[rows])
    option_scores = _sigmoid_score(cluster.fragment[candidates[rows]] - after)
    node_scores = np.full(len(candidates), -1, dtype=np.int64)
    np.maximum.at(node_scores, rows, option_scores)
    node = _pick(cluster, candidates, node_scores)
    where = candidates[rows] == node
    best = option_scores[where] == node_scores[candidates == node][0]
    return node, [int(cols[where][best].min())]


Chooser = Callable[[ClusterArrays, PodDemand, int, np.random.Generator], Choice]

CHOOSERS: dict[PolicyName, Chooser] = {
    PolicyName.RANDOM: choose_random,
    PolicyName.BESTFIT: choose_bestfit,
    PolicyName.DOTPROD: choose_dotprod,
    PolicyName.GPUPACKING: choose_gpupacking,
    PolicyName.GPUCLUSTERING: choose_gpuclustering,
    PolicyName.FGD: choose_fgd,
}
