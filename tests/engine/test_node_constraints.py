"""Node constraints in the engine: ``PodGroup.eligible`` (the nodes a backend allows a pod) and
``PodGroup.preferred`` (preference tiers) steer placement, waiting and the "why pending" text.

Scenario files have no syntax for constraints (they come from a backend, e.g. a Kubernetes
nodeSelector or taints), so these tests set them on the built jobs' pod groups.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace

from usher.engine.build import build_state
from usher.engine.core import Engine
from usher.engine.enums import JobState, PendingReason
from usher.engine.explain import explain_all
from usher.engine.policy.fragmentation import WorkloadProfile
from usher.engine.scenario import parse_scenario
from usher.engine.state import ClusterState, Job

FOUR_NODES = """
name: c
nodes:
  - {name: a1, gpus: 8}
  - {name: a2, gpus: 8}
  - {name: b1, gpus: 8}
  - {name: b2, gpus: 8}
queues: [{name: q}]
"""


def build(jobs: str, nodes: str = FOUR_NODES) -> tuple[ClusterState, Engine]:
    state = build_state(parse_scenario(textwrap.dedent(nodes) + textwrap.dedent(jobs)))
    return state, Engine(state)


def constrain(state: ClusterState, name: str, allowed: list[str] | None, note: str | None = None,
              preferred: list[list[str]] = ()) -> Job:
    """Give every pod group of job ``name`` the nodes it may go on (and preference tiers)."""
    job = state.job(name)
    eligible = frozenset(state.node_by_name[n] for n in allowed) if allowed is not None else None
    tiers = tuple(frozenset(state.node_by_name[n] for n in tier) for tier in preferred)
    job.groups = tuple(replace(g, eligible=eligible, preferred=tiers, exclusions=note) for g in job.groups)
    return job


def nodes_of(state: ClusterState, job: Job) -> list[str]:
    run = job.current_run
    assert run is not None
    return sorted(state.nodes[p.node_id].name for p in run.placements)


def submit_all(state: ClusterState, engine: Engine, now: float = 0.0) -> None:
    for job in state.jobs:
        engine.submit(job, now)


def test_a_pod_group_goes_only_on_its_eligible_nodes():
    state, engine = build("""
    jobs:
      - {name: j, queue: q, pods: [{count: 2, gpu: 4}]}
    """)
    job = constrain(state, "j", ["b1", "b2"])
    submit_all(state, engine)
    engine.cycle(0.0)
    assert job.state == JobState.RUNNING
    # Unconstrained, best fit would pack both pods onto one node; they may use b1 and b2 only.
    assert set(nodes_of(state, job)) <= {"b1", "b2"}


def test_the_same_gang_without_constraints_is_placed_as_before():
    state, engine = build("""
    jobs:
      - {name: j, queue: q, pods: [{count: 2, gpu: 4}]}
    """)
    submit_all(state, engine)
    engine.cycle(0.0)
    assert state.jobs[0].groups[0].eligible is None
    assert nodes_of(state, state.jobs[0]) == ["a1", "a1"]


def test_a_gang_waits_when_its_eligible_nodes_are_full_though_others_are_free():
    state, engine = build("""
    jobs:
      - {name: filler, queue: q, pods: [{count: 2, gpu: 8}]}
      - {name: picky, queue: q, submit: 1s, pods: [{count: 1, gpu: 8}]}
      - {name: anywhere, queue: q, submit: 2s, pods: [{count: 1, gpu: 8}]}
    """)
    filler = constrain(state, "filler", ["b1", "b2"])
    picky = constrain(state, "picky", ["b1", "b2"], note="2 nodes do not match its nodeSelector")
    submit_all(state, engine)
    engine.cycle(0.0)
    assert nodes_of(state, filler) == ["b1", "b2"]
    # a1 and a2 are free, but not for picky: it waits; an unconstrained job behind it starts.
    assert picky.state == JobState.PENDING
    assert picky.pending_reason == PendingReason.INSUFFICIENT_CAPACITY
    assert state.job("anywhere").state == JobState.RUNNING
    text = explain_all(state, 0.0)[picky.id].message
    assert text is not None
    assert "its node constraints allow 2 of 4 nodes (2 nodes do not match its nodeSelector)" in text
    assert "with 0 GPUs free on them" in text
    # the whole-cluster number is there too, so the user sees the room is elsewhere
    assert "8 GPUs free on all schedulable nodes" in text


def test_the_gang_starts_on_its_nodes_once_they_free_up():
    state, engine = build("""
    jobs:
      - {name: filler, queue: q, pods: [{count: 1, gpu: 8}]}
      - {name: picky, queue: q, submit: 1s, pods: [{count: 1, gpu: 8}]}
    """)
    filler = constrain(state, "filler", ["b2"])
    picky = constrain(state, "picky", ["b2"])
    submit_all(state, engine)
    engine.cycle(0.0)
    assert picky.state == JobState.PENDING
    engine.finish(filler, 60.0)
    engine.cycle(60.0)
    assert picky.state == JobState.RUNNING and nodes_of(state, picky) == ["b2"]


def test_no_eligible_node_can_ever_hold_the_pod_and_the_message_says_why():
    state, engine = build("""
    jobs:
      - {name: j, queue: q, pods: [{count: 1, gpu: 8}]}
    """)
    note = "4 nodes have a taint the pod does not tolerate (gpu=reserved:NoSchedule)"
    job = constrain(state, "j", [], note=note)
    submit_all(state, engine)
    engine.cycle(0.0)
    assert job.pending_reason == PendingReason.NO_MATCHING_NODES
    text = explain_all(state, 0.0)[job.id].message
    assert text is not None
    assert f"of 4 nodes, 4 excluded ({note})" in text


def test_required_topology_counts_only_eligible_nodes():
    state, engine = build("""
    jobs:
      - {name: j, queue: q, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
    """, nodes="""
    name: c
    topology: {levels: [usher/rack, kubernetes.io/hostname]}
    nodes:
      - {name: a1, gpus: 8, labels: {usher/rack: r1}}
      - {name: a2, gpus: 8, labels: {usher/rack: r1}}
      - {name: b1, gpus: 8, labels: {usher/rack: r2}}
      - {name: b2, gpus: 8, labels: {usher/rack: r2}}
    queues: [{name: q}]
    """)
    job = constrain(state, "j", ["a1", "b1"])
    submit_all(state, engine)
    engine.cycle(0.0)
    # Each rack has 16 GPUs free, but only 8 of them on nodes the gang may use.
    assert job.pending_reason == PendingReason.TOPOLOGY_UNSATISFIABLE
    text = explain_all(state, 0.0)[job.id].message
    assert text is not None and "the roomiest usher/rack has 8 GPUs free on nodes its node constraints allow (2 of 4)" in text


def test_preferred_tier_is_used_first_then_the_rest():
    state, engine = build("""
    jobs:
      - {name: first, queue: q, pods: [{count: 1, gpu: 8}]}
      - {name: second, queue: q, submit: 1s, pods: [{count: 1, gpu: 8}]}
    """)
    first = constrain(state, "first", None, preferred=[["b2"]])
    second = constrain(state, "second", None, preferred=[["b2"]])
    submit_all(state, engine)
    engine.cycle(0.0)
    assert nodes_of(state, first) == ["b2"]
    # b2 is taken: a preference is not a requirement, so the second goes elsewhere at once.
    assert second.state == JobState.RUNNING and nodes_of(state, second) != ["b2"]


def test_shared_gpu_pods_honour_eligible_nodes():
    state, engine = build("""
    jobs:
      - {name: s1, queue: q, pods: [{count: 1, gpu: 0.5}]}
      - {name: s2, queue: q, submit: 1s, pods: [{count: 1, gpu: 0.25}]}
    """)
    s1 = constrain(state, "s1", ["b1"])
    s2 = constrain(state, "s2", ["a2"])
    submit_all(state, engine)
    engine.cycle(0.0)
    # s2 would share s1's partly used GPU on b1 if it could; it may only use a2.
    assert nodes_of(state, s1) == ["b1"] and nodes_of(state, s2) == ["a2"]


def test_first_fit_pod_by_pod_and_fragmentation_aware_placement_honour_eligible_nodes():
    for policy, fragmentation in (("kueue", False), ("kube-default", False), ("usher", True)):
        state, _ = build("""
        jobs:
          - {name: j, queue: q, pods: [{count: 2, gpu: 2}]}
          - {name: k, queue: q, submit: 1s, pods: [{count: 1, gpu: 0.5}]}
        """)
        if fragmentation:
            state.enable_fragmentation(WorkloadProfile())
        engine = Engine(state, policy)
        j = constrain(state, "j", ["b2"])
        k = constrain(state, "k", ["a2"])
        submit_all(state, engine)
        engine.cycle(0.0)
        assert nodes_of(state, j) == ["b2", "b2"], policy
        assert nodes_of(state, k) == ["a2"], policy
