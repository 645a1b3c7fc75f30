"""The paper's fragmentation measure: typical pods, a node's fragment, the numpy twin agrees."""

from __future__ import annotations

import numpy as np
import pytest

from usher.engine.policy.fragmentation import (
    MEMORY_UNIT,
    FragmentationModel,
    PodDemand,
    TypicalPod,
    WorkloadProfile,
    fgd_score,
    memory_units,
    typical_pods,
)
from usher.engine.policy.placement import Placer
from usher.engine.state import MEMORY_UNIT as state_memory_unit
from usher.engine.state import ClusterState, Node, PodGroup
from usher.fgd.cluster import FragmentArrays

ONE_GPU = PodDemand(cpu=4000, gpu_milli=1000, gpus=1)
HALF_GPU = PodDemand(cpu=2000, gpu_milli=600, gpus=1)
CPU_ONLY = PodDemand(cpu=8000, gpu_milli=0, gpus=0)


def test_typical_pods_cover_the_popular_demands_and_reweigh() -> None:
    counts = {ONE_GPU: 60.0, HALF_GPU: 36.0, CPU_ONLY: 4.0}
    typical = typical_pods(counts, popularity=0.95)
    assert [t.demand for t in typical] == [ONE_GPU, HALF_GPU]  # 96% covered; the rare CPU pod is out
    assert abs(sum(t.weight for t in typical) - 1.0) < 1e-12
    assert typical[0].weight == 60 / 96


def test_fragment_counts_what_typical_pods_cannot_use() -> None:
    model = FragmentationModel([TypicalPod(ONE_GPU, 0.5), TypicalPod(HALF_GPU, 0.5)])
    # GPUs free 1000 and 500: the whole-GPU pod cannot use the 500; nor can the 600-share pod.
    assert model.node_fragment("T4", 16000, [1000, 500]) == 500
    # Not enough CPU for either pod: every free GPU is fragment.
    assert model.node_fragment("T4", 1000, [1000, 500]) == 1500
    # Enough CPU for the share only (2000 <= cpu < 4000): the 1000 is fragment for the whole-GPU pod.
    assert model.node_fragment("T4", 3000, [1000, 500]) == 0.5 * 1500 + 0.5 * 500
    # A pod without GPUs can never use free GPUs.
    with_cpu_pod = FragmentationModel([TypicalPod(ONE_GPU, 0.5), TypicalPod(CPU_ONLY, 0.5)])
    assert with_cpu_pod.node_fragment("T4", 16000, [1000, 1000]) == 1000


def test_memory_spoken_for_makes_the_free_gpus_fragment() -> None:
    gib = 1 << 30
    heavy = PodDemand.of(1000, 4000, memory_bytes=48 * gib)
    assert heavy.memory == memory_units(48 * gib) == 48 * gib // MEMORY_UNIT
    model = FragmentationModel([TypicalPod(heavy, 0.5), TypicalPod(HALF_GPU, 0.5)])
    assert model.counts_memory
    # 40 GiB free: the heavy pod cannot use the whole GPU; the share pod, asking for no memory, can
    assert model.node_fragment("T4", 16000, [1000], memory_free=memory_units(40 * gib)) == 500
    assert model.node_fragment("T4", 16000, [1000], memory_free=memory_units(48 * gib)) == 0
    assert model.node_fragment("T4", 16000, [1000]) == 0  # memory not given: unbounded
    # placing a 10 GiB share where it leaves 40 GiB strands the GPU for the heavy pod
    share = PodDemand.of(400, 2000, memory_bytes=10 * gib)
    leaves_too_little, _ = model.best_placement("T4", 16000, (1000, 1000), share, memory_units(50 * gib))
    leaves_enough, _ = model.best_placement("T4", 16000, (1000, 1000), share, memory_units(58 * gib))
    assert leaves_too_little < leaves_enough


def test_counting_pods_leaves_gpus_beyond_what_the_cpu_holds_as_fragment() -> None:
    model = FragmentationModel([TypicalPod(PodDemand(16000, 1000, 1), 1.0)])
    eight = [1000] * 8
    assert model.node_fragment("G2", 40000, eight) == 0  # the paper's: one pod fits, all usable
    assert model.node_fragment("G2", 40000, eight, count_pods=True) == 6000  # two pods: six GPUs left
    assert model.node_fragment("G2", 128000, eight, count_pods=True) == 0
    # memory counts the same way: 40 GiB hold one pod of 32 GiB
    heavy = FragmentationModel([TypicalPod(PodDemand(1000, 1000, 1, None, 32), 1.0)])
    assert heavy.node_fragment("G2", 64000, [1000] * 4, memory_free=40, count_pods=True) == 3000


def test_a_pod_without_gpus_is_scored_by_the_pods_its_cpu_would_have_held() -> None:
    model = FragmentationModel([TypicalPod(PodDemand(16000, 1000, 1), 0.5), TypicalPod(CPU_ONLY, 0.5)])
    eight = (1000,) * 8
    beside_gpus, _ = model.best_placement("G2", 40000, eight, PodDemand(20000, 0, 0))
    to_spare, _ = model.best_placement("G2", 200000, eight, PodDemand(20000, 0, 0))
    assert to_spare == fgd_score(0) > beside_gpus


def test_memory_requests_round_up_to_the_unit_and_the_state_counts_in_the_same_one() -> None:
    assert PodDemand.of(1000, 4000, memory_bytes=5 * MEMORY_UNIT + 1).memory == 6
    assert PodDemand.of(0, 4000).memory == 0
    assert state_memory_unit == MEMORY_UNIT  # node shapes and pod demands must agree


def test_a_pod_asking_for_no_memory_fits_however_the_memory_is_counted() -> None:
    model = FragmentationModel([TypicalPod(PodDemand.of(1000, 4000, memory_bytes=MEMORY_UNIT), 0.5),
                                TypicalPod(PodDemand(4000, 1000, 1), 0.5)])
    # a unit less than none left (rounding a pod's request up and a node's memory down can do
    # that): the pod asking for no memory still uses the GPU, whether pods are counted or not
    assert model.node_fragment("T4", 16000, [1000], memory_free=-1) == 500
    assert model.node_fragment("T4", 16000, [1000], memory_free=-1, count_pods=True) == 500


def test_which_demands_are_typical_is_decided_without_memory() -> None:
    # one kind of pod asking for four amounts of memory, as common together as the other kinds
    variants = [PodDemand(4000, 1000, 1, None, gib) for gib in (16, 24, 32, 40)]
    counts = {**{v: 2.0 for v in variants}, PodDemand(8000, 1000, 2): 7.0, HALF_GPU: 5.0}
    typical = {t.demand: t.weight for t in typical_pods(counts, popularity=0.9)}
    # split by memory, the last variant would fall below the 90% cut; counted as one kind it is in
    assert all(typical[v] == 2 / 20 for v in variants)
    assert abs(sum(typical.values()) - 1.0) < 1e-12


def test_the_numpy_twin_refuses_a_model_that_counts_memory() -> None:
    model = FragmentationModel([TypicalPod(PodDemand.of(1000, 4000, memory_bytes=1 << 30), 1.0)])
    with pytest.raises(ValueError, match="memory-blind"):
        FragmentArrays(model, ["T4"])


def test_model_constraints_make_other_nodes_fragment() -> None:
    v100_only = PodDemand(4000, 1000, 1, frozenset({"V100M32"}))
    model = FragmentationModel([TypicalPod(v100_only, 1.0)])
    assert model.node_fragment("V100M32", 8000, [1000]) == 0
    assert model.node_fragment("T4", 8000, [1000]) == 1000


def test_score_prefers_the_placement_that_fragments_least() -> None:
    model = FragmentationModel([TypicalPod(ONE_GPU, 0.5), TypicalPod(HALF_GPU, 0.5)])
    # A 400-share on a node with GPUs free [1000, 400]: filling the 400 leaves a whole GPU.
    score, gpu_free = model.best_placement("T4", 16000, (1000, 400), PodDemand(2000, 400, 1))
    assert gpu_free == 400
    assert score > fgd_score(0)


def test_numpy_evaluation_matches_the_engine_on_random_nodes() -> None:
    rng = np.random.default_rng(7)
    demands = [PodDemand(int(c), int(m), 1) for c, m in zip(rng.integers(1, 30, 40) * 1000,
                                                               rng.choice([160, 250, 500, 810, 1000], 40))]
    demands += [PodDemand(8000, 1000, 2), PodDemand(32000, 0, 0), PodDemand(4000, 1000, 1, frozenset({"A10"}))] * 5
    model = FragmentationModel.from_demands(demands, popularity=1.0)
    arrays = FragmentArrays(model, ["A10", "T4"])
    free = rng.choice([0, 100, 250, 500, 750, 1000], size=(200, 8))
    cpu = rng.integers(0, 40, 200) * 1000
    node_model = rng.integers(0, 2, 200)
    count, usable = arrays.stats(free)
    fast = arrays.fragment(free.sum(axis=1), count, usable, cpu, node_model)
    slow = [model.node_fragment(["A10", "T4"][m], int(c), [int(x) for x in row])
            for row, c, m in zip(free, cpu, node_model)]
    assert np.allclose(fast, slow)


def test_a_pod_without_gpus_goes_where_the_least_gpu_is_left_when_scores_tie() -> None:
    """Best fit among equal scores: the emptier node stays whole, whatever the tie order says."""
    state = ClusterState("t", [], {})
    for i in range(2):
        state.add_node(Node(id=i, name=f"n{i}", labels={}, gpu_model="T4", gpu_memory=0, gpu_count=2,
                            islands=[[0, 1]], cpu=64000, memory=1 << 30))
    state.finish_building()
    profile = WorkloadProfile()
    profile.observe(PodDemand(4000, 1000, 1))
    profile.observe(PodDemand(2000, 0, 0))
    state.enable_fragmentation(profile, tie_rank=[0, 1])  # n0 first on ties
    state.allocate(state.nodes[1], [0], 0, 4000, 1024)  # n1 runs a one-GPU pod
    cpu_only = PodGroup("cpu", 1, 0, 2000, 1024, None)
    assert Placer(state).choose_node(cpu_only).name == "n1"


def test_stranded_is_free_gpu_that_the_pods_sized_for_it_cannot_use_for_cpu_or_memory() -> None:
    model = FragmentationModel([TypicalPod(PodDemand(11000, 470, 1), 0.5), TypicalPod(PodDemand(3000, 810, 1), 0.5)])
    assert model.stranded("G2", 5000, (530,)) == 530  # the 470 share needs 11 cores; the 810 is too big
    assert model.stranded("G2", 12000, (530,)) == 0
    assert model.stranded("G2", 5000, (1000, 530)) == 530  # the 810 share fits the whole GPU and 5 cores
    assert model.stranded("G2", 2000, (1000, 530)) == 1530
    assert model.stranded("G2", 2000, (100,)) == 0  # no pod is sized for it: fragment, but not stranded
    heavy = FragmentationModel([TypicalPod(PodDemand(4000, 470, 1, None, 46 * 1024), 1.0)])
    assert heavy.stranded("G2", 64000, (530,), memory_free=20 * 1024) == 530


def _stranding_state(cpu_only_pods: int) -> ClusterState:
    """n0 has GPUs free (1000, 530) beside 14 cores, n1 two whole GPUs beside 64 cores."""
    state = ClusterState("t", [], {})
    for i in range(2):
        state.add_node(Node(id=i, name=f"n{i}", labels={}, gpu_model="G2", gpu_memory=0, gpu_count=2,
                            islands=[[0, 1]], cpu=64000, memory=1 << 40))
    state.finish_building()
    profile = WorkloadProfile(popularity=1.0)
    profile.observe(PodDemand(4000, 1000, 1), 90)
    profile.observe(PodDemand(11000, 470, 1), 5)
    profile.observe(PodDemand(8000, 1000, 2), 5)
    if cpu_only_pods:
        profile.observe(PodDemand(64000, 0, 0), cpu_only_pods)
    state.enable_fragmentation(profile, tie_rank=[0, 1])
    state.allocate(state.nodes[0], [1], 470, 50000, 1024)
    return state


def test_a_gpu_pod_does_not_take_the_cores_a_half_used_gpu_needs() -> None:
    # FGD's score puts the pod on n0 (the 530 left is fragment for most pods anyway), leaving
    # 10 cores: too few for the 470 share, the only typical pod the 530 fits
    state = _stranding_state(0)
    model = state.workload.model()
    assert model.cpu_per_gpu < state.cpu_per_gpu
    pod = PodGroup("one", 1, 1000, 4000, 1024, None)
    demand = PodDemand(4000, 1000, 1)
    n0 = model.best_placement("G2", 14000, (1000, 530), demand, None)[0]
    n1 = model.best_placement("G2", 64000, (1000, 1000), demand, None)[0]
    assert n0 > n1
    assert Placer(state).choose_node(pod).name == "n1"


def test_where_cpu_is_the_scarcer_resource_stranded_gpus_are_not_counted() -> None:
    state = _stranding_state(100)
    assert state.workload.model().cpu_per_gpu > state.cpu_per_gpu
    assert Placer(state).choose_node(PodGroup("one", 1, 1000, 4000, 1024, None)).name == "n0"
