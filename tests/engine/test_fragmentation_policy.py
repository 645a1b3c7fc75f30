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
from usher.engine.policy import fragmentation
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
    assert _scarce_node_of("any-gpu") == "t4-1"  # the T4 node in use, not the A100 one
    assert {_scarce_node_of(f"a100-only-{i}") for i in (1, 2)} == {"a100-node"}


def test_without_protection_the_score_ties_and_the_scarce_node_in_use_wins(monkeypatch) -> None:
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
