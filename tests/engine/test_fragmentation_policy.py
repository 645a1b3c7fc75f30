"""Fragmentation-aware placement as a policy option (``Policy.fragmentation``).

Three jobs that only an A100 will do run on the A100 node; then a job that any GPU will do
arrives. Bin packing puts it on the tightest node, the A100 one, taking a GPU that the workload
seen so far can only use there; the FGD score puts it on the T4 node, whose free GPUs the
A100-only jobs could never use.
"""

from __future__ import annotations

from dataclasses import replace

from usher.engine.controller import Controller
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
