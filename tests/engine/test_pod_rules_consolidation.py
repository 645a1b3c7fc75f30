"""Consolidation frees pod rules as preemption does (issue 32, KAI#2115's lesson for moves).

Four 8-GPU nodes in two racks, one long 4-GPU job on each: 8 GPUs free per rack. A gang of two
8-GPU pods needs one rack, and keeps away (required anti-affinity per rack) from ``app=db``.
Rack B holds a db job that may not move; rack A holds a db job that may. Only moving rack A's two
jobs into rack B lets the gang start, and only if the search counts the db job it lifts as gone
for the gang's rule, as it does for the room it frees.
"""

from __future__ import annotations

from usher.engine.controller import Controller
from usher.engine.enums import AuditAction
from usher.engine.scenario import parse_scenario

SCENARIO = """
name: db-apart
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 4, layout: {usher/rack: 2}, template: {gpus: 8}}
queues: [{name: research}]
jobs:
  - {name: db-a, queue: research, duration: 36000, checkpointEvery: 600, labels: {app: db}, pods: [{count: 1, gpu: 4}]}
  - {name: short-0, queue: research, duration: 100, pods: [{count: 1, gpu: 4}]}
  - {name: long-a, queue: research, duration: 36000, checkpointEvery: 600, pods: [{count: 1, gpu: 4}]}
  - {name: short-1, queue: research, duration: 100, pods: [{count: 1, gpu: 4}]}
  - {name: long-b, queue: research, duration: 36000, checkpointEvery: 600, pods: [{count: 1, gpu: 4}]}
  - {name: short-2, queue: research, duration: 100, pods: [{count: 1, gpu: 4}]}
  - {name: db-b, queue: research, duration: 36000, preemptible: false, labels: {app: db}, pods: [{count: 1, gpu: 4}]}
  - {name: short-3, queue: research, duration: 100, pods: [{count: 1, gpu: 4}]}
  - name: gang
    queue: research
    submit: 700
    duration: 3600
    antiAffinity: [{topologyKey: usher/rack, labelSelector: {matchLabels: {app: db}}}]
    pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]
"""


def _replay() -> Controller:
    ctrl = Controller(parse_scenario(SCENARIO, file="db-apart.yaml"), "usher")
    while ctrl.step():
        pass
    return ctrl


def _rack(ctrl: Controller, node_id: int) -> str:
    return ctrl.state.nodes[node_id].labels["usher/rack"]


def test_a_move_that_takes_a_repelling_job_out_of_the_rack_frees_the_rule() -> None:
    ctrl = _replay()
    runs = {job.name: job.runs for job in ctrl.state.jobs}
    db_b_rack = _rack(ctrl, runs["db-b"][0].placements[0].node_id)
    gang = runs["gang"][0]
    assert gang.start == 700.0, "the gang starts at once, not when a long job ends"
    (rack,) = {_rack(ctrl, p.node_id) for p in gang.placements}
    assert rack != db_b_rack
    # the db job of the gang's rack was moved out of it, beside the one that may not move
    assert len(runs["db-a"]) == 2 and runs["db-a"][0].by == "gang"
    assert {_rack(ctrl, p.node_id) for p in runs["db-a"][1].placements} == {db_b_rack}
    assert len(runs["db-b"]) == 1
    assert any(e.action == AuditAction.MOVE and e.target == "db-a" for e in ctrl.state.audit)
