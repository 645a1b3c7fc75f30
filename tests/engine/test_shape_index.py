"""The free-capacity indexes stay true through allocate, release and cordons with fragmentation on.

With a workload profile, ``ClusterState.allocate`` and ``release`` move a node between node
shapes (``_shape_remove`` before the change, ``_shape_add`` after) and update the other indexes
in place (``_reindex``). A random walk of placements, releases and cordons checks, after every
step, each index against one computed afresh from the nodes: a stale index would make
placement skip free GPUs or pick a node that no longer fits.
"""

from __future__ import annotations

import random

from usher.engine.policy.fragmentation import PodDemand, WorkloadProfile
from usher.engine.state import MILLI, ClusterState, Node, node_shape


def _state() -> ClusterState:
    state = ClusterState("walk", [], {})
    models = ["A100", "A100", "T4", "T4", "T4", "H100"]
    for i, model in enumerate(models):
        gpus = 8 if model != "T4" else 2
        state.add_node(Node(id=i, name=f"n{i}", labels={}, gpu_model=model, gpu_memory=0, gpu_count=gpus,
                            islands=[list(range(gpus))], cpu=96_000, memory=384 << 30))
    state.finish_building()
    profile = WorkloadProfile()
    profile.observe(PodDemand.of(1000, 8000, memory_bytes=48 << 30))
    profile.observe(PodDemand.of(500, 4000, memory_bytes=8 << 30))
    state.enable_fragmentation(profile)
    return state


def _check(state: ClusterState) -> None:
    shapes: dict[tuple, list[tuple[int, int]]] = {}
    free_by_model: dict[str, int] = {}
    for node in state.nodes:
        if node.schedulable:
            shapes.setdefault(node_shape(node), []).append((state.tie_rank[node.id], node.id))
            free_by_model[node.gpu_model] = free_by_model.get(node.gpu_model, 0) + sum(node.gpu_free)
    assert state.shapes == {key: sorted(members) for key, members in shapes.items()}
    assert {m: f for m, f in state.free_by_model.items() if f} == {m: f for m, f in free_by_model.items() if f}
    schedulable = [n for n in state.nodes if n.schedulable]
    assert state.total_whole_free == sum(n.whole_free for n in schedulable)
    assert state.partial_nodes == {n.id for n in schedulable if n.has_partial()}
    for model, buckets in state.buckets.items():
        for whole, members in enumerate(buckets):
            assert members == {n.id for n in schedulable if n.gpu_model == model and n.whole_free == whole}


def test_indexes_match_the_nodes_after_every_step_of_a_random_walk() -> None:
    rng = random.Random(7)
    state = _state()
    held: list[tuple[Node, list[int], int, int, int]] = []
    for _ in range(3000):
        roll = rng.random()
        node = rng.choice(state.nodes)
        if roll < 0.5:
            share = rng.choice([0, 0, 250, 500])
            if share:
                gpus = [i for i, f in enumerate(node.gpu_free) if f >= share][:1]
            else:
                gpus = [i for i, f in enumerate(node.gpu_free) if f == MILLI][: rng.randint(1, 2)]
            cpu, memory = rng.randint(1, 8) * 1000, rng.randint(1, 48) << 30
            if gpus and node.cpu_free >= cpu and node.mem_free >= memory:
                state.allocate(node, gpus, share, cpu, memory)
                held.append((node, gpus, share, cpu, memory))
        elif roll < 0.9 and held:
            state.release(*held.pop(rng.randrange(len(held))))
        else:
            state.set_schedulable(node, cordoned=not node.cordoned)
        _check(state)
    assert held  # the walk did place pods
