"""Preemption frees pod rules, not only capacity (issue 32; KAI#2115's reclaim that never succeeds).

A high-priority job with required anti-affinity against ``app=x`` finds an ``app=x`` pod on every
node, with GPUs to spare beside each: capacity is no obstacle, the rule is. The preemption search
must count the pods of the victims it lifts as gone for the preemptor's rules, evict just enough
of them (a bystander of another app stays), and, while the victims' pods are still being evicted
(terminating, still counted by kube-scheduler's rules for everyone else), count them as gone for
the preemptor alone. The rules are judged by the kube backend's ``podrules`` index, as on a cluster.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any

from usher.engine.backends.kube.podrules import parse_pod_rules
from usher.engine.backends.kube.podrules.pods import PodIndex, group_rules
from usher.engine.build import build_state
from usher.engine.core import Engine
from usher.engine.enums import EndReason, JobState
from usher.engine.scenario import parse_scenario
from usher.engine.state import ClusterState, Job

HOST = "kubernetes.io/hostname"
APART_FROM_X = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST}]}}}

SCENARIO = """
name: t
priorityClasses: {low: 1, high: 100}
nodes: [{name: a, gpus: 8}, {name: b, gpus: 8}]
queues:
  - {name: q, preemption: {withinQueue: LowerPriority}}
jobs:
  - {name: x-a, queue: q, priority: low, pods: [{gpu: 1}]}
  - {name: x-b, queue: q, priority: low, pods: [{gpu: 1}]}
  - {name: y-a, queue: q, priority: low, pods: [{gpu: 4}]}
  - {name: urgent, queue: q, priority: high, submit: 60, pods: [{gpu: 1}]}
"""


def pin(state: ClusterState, name: str, node: str) -> Job:
    job = state.job(name)
    job.groups = tuple(replace(g, eligible=frozenset({state.node_by_name[node]})) for g in job.groups)
    return job


def on_cluster(index: PodIndex, state: ClusterState, job: Job, labels: dict[str, str], terminating: bool = False) -> None:
    """The job's pods as the cluster shows them: on their nodes, with ``labels``."""
    run = job.current_run or job.runs[-1]
    keys = []
    for k, p in enumerate(run.placements):
        key = f"default/{job.name}-{k}"
        meta: dict[str, Any] = {"name": f"{job.name}-{k}", "namespace": "default", "labels": labels}
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        index.pod_changed(key, {"metadata": meta, "spec": {"nodeName": state.nodes[p.node_id].name},
                                "status": {"phase": "Running"}})
        keys.append(key)
    index.job_made(job.id, tuple(keys))


def with_rules(index: PodIndex, job: Job, spec: dict[str, Any], labels: dict[str, str]) -> Job:
    rules = group_rules(index, [("g0", "default", labels, parse_pod_rules(spec, labels)[0], None, ())], job.name)
    assert rules is not None
    job.groups = (replace(job.groups[0], rules=rules["g0"]),)
    return job


def running_cluster() -> tuple[ClusterState, Engine, PodIndex]:
    state = build_state(parse_scenario(textwrap.dedent(SCENARIO)))
    engine = Engine(state)
    pin(state, "x-a", "a")
    pin(state, "x-b", "b")
    pin(state, "y-a", "a")
    for name in ("x-a", "x-b", "y-a"):
        engine.submit(state.job(name), 0.0)
    engine.cycle(0.0)
    index = PodIndex()
    index.nodes = state.nodes
    index.engine_state = state
    on_cluster(index, state, state.job("x-a"), {"app": "x"})
    on_cluster(index, state, state.job("x-b"), {"app": "x"})
    on_cluster(index, state, state.job("y-a"), {"app": "y"})
    return state, engine, index


def test_a_preemptor_whose_anti_affinity_every_node_breaks_evicts_one_pod_it_repels_and_runs() -> None:
    state, engine, index = running_cluster()
    urgent = with_rules(index, state.job("urgent"), APART_FROM_X, {"app": "u"})
    engine.submit(urgent, 60.0)
    engine.cycle(60.0)
    assert urgent.state == JobState.RUNNING
    stopped = [j.name for j in state.jobs if j.runs and j.runs[-1].end_reason == EndReason.PREEMPTED]
    assert len(stopped) == 1 and stopped[0] in ("x-a", "x-b"), stopped  # one is enough; y-a frees nothing
    [p] = urgent.current_run.placements  # type: ignore[union-attr]
    victim = state.job(stopped[0])
    assert p.node_id == victim.runs[-1].placements[0].node_id  # where the evicted pod of app=x was
    assert state.job("y-a").state == JobState.RUNNING


def test_victims_being_evicted_count_as_gone_for_their_preemptor_only() -> None:
    state, engine, index = running_cluster()
    urgent = with_rules(index, state.job("urgent"), APART_FROM_X, {"app": "u"})
    engine.submit(urgent, 60.0)
    engine.cycle(60.0)
    [victim] = [j for j in state.jobs if j.runs and j.runs[-1].end_reason == EndReason.PREEMPTED]
    on_cluster(index, state, victim, {"app": "x"}, terminating=True)  # the eviction is under way
    freed = victim.runs[-1].placements[0].node_id
    # the preemptor, decided again (its binds called off, say), may still go where its victim goes
    again = urgent.groups[0].rules
    assert again is not None and freed in again.allowed(state.nodes, ())
    # anyone else with the same rule still finds the terminating pod there, as kube-scheduler does
    other = with_rules(index, state.job("y-a"), APART_FROM_X, {"app": "o"}).groups[0].rules
    assert other is not None and freed not in other.allowed(state.nodes, ())


def test_a_pod_made_anew_under_an_evicted_ones_name_counts_again() -> None:
    """A StatefulSet makes its evicted pod anew under the same name: the new pod is another
    job's, and the preemptor's rule finds it where it runs."""
    state, engine, index = running_cluster()
    urgent = with_rules(index, state.job("urgent"), APART_FROM_X, {"app": "u"})
    engine.submit(urgent, 60.0)
    engine.cycle(60.0)
    [victim] = [j for j in state.jobs if j.runs and j.runs[-1].end_reason == EndReason.PREEMPTED]
    freed = victim.runs[-1].placements[0].node_id
    rules = urgent.groups[0].rules
    assert rules is not None and freed in rules.allowed(state.nodes, ())
    index.job_made(len(state.jobs), index.job_pods[victim.id])  # the mirror's job of the pod made anew
    assert freed not in rules.allowed(state.nodes, ())
