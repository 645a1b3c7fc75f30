"""Fragmentation-aware placement as a policy option (``Policy.fragmentation``).

Three jobs that only an A100 will do run on the A100 node; then a job that any GPU will do
arrives. Bin packing puts it on the tightest node, the A100 one, taking a GPU that the workload
seen so far can only use there; the FGD score puts it on the T4 node, whose free GPUs the
A100-only jobs could never use.
"""

from __future__ import annotations

import math
from dataclasses import replace

from usher.engine.controller import Controller
from usher.engine.policy import fragmentation, placement
from usher.engine.policy.fragmentation import MILLI, FragmentationModel, PodDemand
from usher.engine.policy.registry import get_policy
from usher.engine.scenario import parse_scenario

SCENARIO = """\
name: two-models
nodes:
  - {name: a100-node, gpus: 8, gpuModel: A100}
  - {name: t4-node, gpus: 8, gpuModel: T4}
queues: [{name: q}]
jobs:
  - {name: pinned-1, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: pinned-2, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: pinned-3, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: any-gpu, queue: q, submit: 60, duration: 3600, pods: [{gpu: 1}]}
"""


def _node_of(fragmentation: bool, job: str) -> str:
    ctrl = Controller(parse_scenario(SCENARIO, file="two-models.yaml"), replace(get_policy("usher"), fragmentation=fragmentation))
    while ctrl.step():
        pass
    state = ctrl.state
    run = state.job(job).runs[0]
    return state.nodes[run.placements[0].node_id].name


def test_bin_packing_takes_the_tightest_node_even_of_a_scarce_model() -> None:
    assert _node_of(False, "any-gpu") == "a100-node"


def test_fragmentation_keeps_the_scarce_model_for_the_jobs_that_need_it() -> None:
    assert _node_of(True, "any-gpu") == "t4-node"
    assert {_node_of(True, f"pinned-{i}") for i in (1, 2, 3)} == {"a100-node"}


def test_the_workload_is_learnt_from_the_submitted_jobs() -> None:
    ctrl = Controller(parse_scenario(SCENARIO, file="two-models.yaml"), replace(get_policy("usher"), fragmentation=True))
    ctrl.step()
    assert ctrl.state.workload is not None and ctrl.state.workload.seen == 3  # the jobs submitted at 0
    while ctrl.step():
        pass
    assert ctrl.state.workload.seen == 4
    off = Controller(parse_scenario(SCENARIO, file="two-models.yaml"), get_policy("kueue"))
    assert off.state.workload is None


# Two models as much in demand by the jobs pinned to them, but one has a single node: FGD's
# score is the same on both (each model's free GPUs are as useless to the other's jobs), so it
# cannot tell that the A100s will run out first. Protection can.
SCARCE = """\
name: scarce-model
nodes:
  - {name: a100-node, gpus: 8, gpuModel: A100}
  - {name: t4-1, gpus: 8, gpuModel: T4}
  - {name: t4-2, gpus: 8, gpuModel: T4}
  - {name: t4-3, gpus: 8, gpuModel: T4}
queues: [{name: q}]
jobs:
  - {name: a100-only-1, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: a100-only-2, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: t4-only-1, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [T4]}]}
  - {name: t4-only-2, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, gpuModel: [T4]}]}
  - {name: any-gpu, queue: q, submit: 60, duration: 3600, pods: [{gpu: 1}]}
"""


def _scarce_node_of(job: str) -> str:
    ctrl = Controller(parse_scenario(SCARCE, file="scarce-model.yaml"), get_policy("usher"))
    while ctrl.step():
        pass
    run = ctrl.state.job(job).runs[0]
    return ctrl.state.nodes[run.placements[0].node_id].name


def test_a_job_any_gpu_will_do_leaves_the_scarce_model_to_the_jobs_pinned_to_it() -> None:
    assert _scarce_node_of("any-gpu").startswith("t4-")
    assert {_scarce_node_of(f"a100-only-{i}") for i in (1, 2)} == {"a100-node"}


def test_protection_alone_picks_the_t4_node_in_use(monkeypatch) -> None:
    monkeypatch.setattr(placement, "BALANCE_SEVERAL_GPU_LIMIT", 0.0)  # no CPU balance
    assert _scarce_node_of("any-gpu") == "t4-1"


def test_without_protection_the_score_ties_and_the_scarce_node_in_use_wins(monkeypatch) -> None:
    monkeypatch.setattr(placement, "BALANCE_SEVERAL_GPU_LIMIT", 0.0)
    monkeypatch.setattr(fragmentation, "PROTECT_PRESSURE", math.inf)
    assert _scarce_node_of("any-gpu") == "a100-node"


def test_a_model_is_protected_by_its_pinned_demand_against_its_free_gpus() -> None:
    a100, t4, any_gpu = (PodDemand(1000, MILLI, 1, frozenset({"A100"})), PodDemand(1000, MILLI, 1, frozenset({"T4"})),
                         PodDemand(1000, MILLI, 1))
    model = FragmentationModel.from_demands([a100, t4, any_gpu, any_gpu, any_gpu], popularity=1.0)
    # each model is pinned by 20% of the GPU demand: short where it has few of the free GPUs
    assert model.protected_models({"A100": 6 * MILLI, "T4": 22 * MILLI}) == {"A100"}
    assert model.protected_models({"A100": 14 * MILLI, "T4": 14 * MILLI}) == frozenset()
    # a workload that pins no pod protects nothing
    assert FragmentationModel.from_demands([any_gpu]).protected_models({"A100": 1}) == frozenset()


# CPU balance: FGD's score ties between two empty nodes for a light pod, and the first node in
# order would take both light pods, leaving too little CPU beside its free GPUs for the hungry
# job. Kept near the cluster's CPU per GPU (80 cores / 8 GPUs), the first light pod goes to the
# lean node and the hungry job starts at once.
BALANCE = """\
name: cpu-balance
nodes:
  - {name: cpu-rich, gpus: 4, cpu: 64}
  - {name: cpu-lean, gpus: 4, cpu: 16}
queues: [{name: q}]
jobs:
  - {name: light-1, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, cpu: 8}]}
  - {name: light-2, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, cpu: 8}]}
  - {name: hungry, queue: q, submit: 60, duration: 3600, pods: [{gpu: 1, cpu: 50}]}
"""


def _starts(scenario: str) -> dict[str, tuple[float, str]]:
    ctrl = Controller(parse_scenario(scenario, file="scenario.yaml"), get_policy("usher"))
    while ctrl.step():
        pass
    state = ctrl.state
    return {job.name: (job.runs[0].start, state.nodes[job.runs[0].placements[0].node_id].name) for job in state.jobs}


def test_a_light_pod_leaves_cpu_beside_free_gpus_for_a_hungry_one() -> None:
    starts = _starts(BALANCE)
    assert starts["light-1"] == (0.0, "cpu-lean")
    assert starts["hungry"] == (60.0, "cpu-rich")


def test_without_cpu_balance_the_hungry_job_waits_an_hour(monkeypatch) -> None:
    monkeypatch.setattr(placement, "BALANCE_SEVERAL_GPU_LIMIT", 0.0)
    starts = _starts(BALANCE)
    assert starts["light-1"] == starts["light-2"] == (0.0, "cpu-rich")
    assert starts["hungry"] == (3600.0, "cpu-rich")


def test_cpu_balance_is_off_when_pods_of_several_gpus_are_much_of_the_demand() -> None:
    many_gpus = BALANCE.replace("name: light-2, queue: q, submit: 0, duration: 3600, pods: [{gpu: 1, cpu: 8}]",
                                "name: wide, queue: q, submit: 0, duration: 3600, pods: [{gpu: 2, cpu: 8}]")
    ctrl = Controller(parse_scenario(many_gpus, file="scenario.yaml"), get_policy("usher"))
    ctrl.step()
    assert ctrl.state.workload is not None
    model = ctrl.state.workload.model()
    assert model is not None and model.several_gpu_share >= placement.BALANCE_SEVERAL_GPU_LIMIT


# A wide pod that only one node can hold (120 cores; the lean nodes have 96): CPU balance alone
# would put light pods on that node, whose CPU per GPU is nearest the cluster's, and the second
# wide job would wait for them to end. The node is spared while others have room.
WIDE_HOST = "\n".join([
    "name: wide-host",
    "nodes:",
    "  - {name: big-cpu, gpus: 8, cpu: 128}",
    *(f"  - {{name: lean-{i}, gpus: 8, cpu: 96}}" for i in range(1, 5)),
    *(f"  - {{name: small-{i}, gpus: 2, cpu: 104}}" for i in range(1, 9)),
    "queues: [{name: q}]",
    "jobs:",
    "  - {name: wide-1, queue: q, submit: 0, duration: 30, pods: [{gpu: 8, cpu: 120}]}",
    *(f"  - {{name: light-{i}, queue: q, submit: 60, duration: 3600, pods: [{{gpu: 1, cpu: 4}}]}}" for i in range(1, 21)),
    "  - {name: wide-2, queue: q, submit: 120, duration: 3600, pods: [{gpu: 8, cpu: 120}]}",
]) + "\n"


def test_light_pods_spare_the_only_node_a_wide_pod_fits() -> None:
    starts = _starts(WIDE_HOST)
    assert all(node != "big-cpu" for name, (_, node) in starts.items() if name.startswith("light-"))
    assert starts["wide-2"] == (120.0, "big-cpu")


def test_without_sparing_it_the_wide_job_waits_for_the_light_ones(monkeypatch) -> None:
    monkeypatch.setattr(placement, "WIDE_HOST_SHARE", 0.0)
    starts = _starts(WIDE_HOST)
    assert any(node == "big-cpu" for name, (_, node) in starts.items() if name.startswith("light-"))
    assert starts["wide-2"][0] == 3660.0


def test_cpu_balance_is_off_while_some_pods_are_pinned_to_gpu_models() -> None:
    pinned = (BALANCE.replace("cpu: 64}", "cpu: 64, gpuModel: T4}").replace("cpu: 16}", "cpu: 16, gpuModel: T4}")
              .replace("pods: [{gpu: 1, cpu: 8}]}\n  - {name: hungry", "pods: [{gpu: 1, cpu: 8, gpuModel: [T4]}]}\n  - {name: hungry"))
    starts = _starts(pinned)
    assert starts["light-1"] == (0.0, "cpu-rich")  # protection alone, as without balance
    assert starts["hungry"][0] == 3600.0


# Memory, which FGD's fragment does not count: a heavy pod (90 GiB) fits once on either node,
# a light one (30 GiB) beside it on the 170 GiB node only. Memory-blind, the light pod takes the
# first node and leaves a GPU beside 80 GiB that no heavy pod can use; the second heavy job then
# waits an hour for it. Counting memory, the light pod goes where a heavy one still fits beside it.
MEMORY = """\
name: memory
nodes:
  - {name: mem-lean, gpus: 2, cpu: 64, memory: 110Gi}
  - {name: mem-rich, gpus: 2, cpu: 64, memory: 170Gi}
queues: [{name: q}]
jobs:
  - {name: heavy-0, queue: q, submit: 0, duration: 10, pods: [{gpu: 1, cpu: 8, memory: 90Gi}]}
  - {name: light, queue: q, submit: 20, duration: 3600, pods: [{gpu: 1, cpu: 8, memory: 30Gi}]}
  - {name: heavy-1, queue: q, submit: 60, duration: 3600, pods: [{gpu: 1, cpu: 8, memory: 90Gi}]}
  - {name: heavy-2, queue: q, submit: 60, duration: 3600, pods: [{gpu: 1, cpu: 8, memory: 90Gi}]}
"""


def test_a_light_pod_leaves_memory_beside_a_free_gpu_for_a_heavy_one() -> None:
    starts = _starts(MEMORY)
    assert starts["light"] == (20.0, "mem-rich")
    assert starts["heavy-1"][0] == starts["heavy-2"][0] == 60.0
    assert {starts["heavy-1"][1], starts["heavy-2"][1]} == {"mem-lean", "mem-rich"}


def test_memory_blind_the_light_pod_strands_a_gpu_and_a_heavy_job_waits(monkeypatch) -> None:
    monkeypatch.setattr(fragmentation, "memory_units", lambda memory_bytes: 0)  # FGD's view: no memory
    starts = _starts(MEMORY)
    assert starts["light"] == (20.0, "mem-lean")
    assert sorted(start for name, (start, _) in starts.items() if name.startswith("heavy-") and name != "heavy-0") == [60.0, 3620.0]


# A pod without GPUs: the paper's fragment asks only whether one GPU pod still fits beside the
# free GPUs, so 30 of the lean node's 48 cores look as harmless as 30 of the rich node's 128, and
# the lean node, first in order, takes the CPU job; then it holds one 10-core GPU pod where it
# held four, and three GPU jobs wait an hour. Counting how many GPU pods the CPU left holds, the
# CPU job goes where CPU is to spare.
CPU_ONLY = """\
name: cpu-only
nodes:
  - {name: cpu-lean, gpus: 4, cpu: 48}
  - {name: cpu-rich, gpus: 4, cpu: 128}
queues: [{name: q}]
jobs:
  - {name: gpu-0, queue: q, submit: 0, duration: 10, pods: [{gpu: 1, cpu: 10}]}
  - {name: cpu-job, queue: q, submit: 20, duration: 3600, pods: [{cpu: 30}]}
""" + "".join(f"  - {{name: gpu-{i}, queue: q, submit: 60, duration: 3600, pods: [{{gpu: 1, cpu: 10}}]}}\n"
              for i in range(1, 9))


def test_a_cpu_only_pod_takes_cpu_where_gpu_pods_do_not_need_it() -> None:
    starts = _starts(CPU_ONLY)
    assert starts["cpu-job"] == (20.0, "cpu-rich")
    assert all(starts[f"gpu-{i}"][0] == 60.0 for i in range(1, 9))


def test_by_the_papers_fragment_the_cpu_only_pod_strands_gpus(monkeypatch) -> None:
    monkeypatch.setattr(fragmentation, "COUNT_PODS_WITHOUT_GPUS", False)
    starts = _starts(CPU_ONLY)
    assert starts["cpu-job"] == (20.0, "cpu-lean")
    assert sorted(starts[f"gpu-{i}"][0] for i in range(1, 9)) == [60.0] * 5 + [3620.0] * 3
