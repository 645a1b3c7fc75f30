"""Pod rules in a replay: a scenario job's ``antiAffinity`` and ``spread`` (issue 32).

The scenario says in upstream's words what a pod spec says; the replay turns it into the engine's
pod rules, judged by the same code as on a cluster, so placement with rules is tested without a
cluster: one worker per node, a gang waiting whole with the rule named, keeping away from
another job's pods (and symmetrically, from a job whose anti-affinity picks it), spread over
zones, a preemption that frees the rule. Bad input is refused with its line and field path.
"""

from __future__ import annotations

import textwrap

import pytest

from usher.engine.build import build_state
from usher.engine.core import Engine
from usher.engine.enums import EndReason, JobState, PendingReason
from usher.engine.explain import message
from usher.engine.scenario import ScenarioError, parse_scenario
from usher.engine.state import ClusterState, Job

HEAD = """
name: rules
priorityClasses: {low: 1, high: 100}
nodes:
  - {name: n1, gpus: 8, labels: {zone: a}}
  - {name: n2, gpus: 8, labels: {zone: a}}
  - {name: n3, gpus: 8, labels: {zone: b}}
  - {name: n4, gpus: 8, labels: {zone: b}}
queues:
  - {name: q, preemption: {withinQueue: LowerPriority}}
jobs:
"""


def run(jobs: str, at: float = 0.0) -> tuple[ClusterState, Engine]:
    state = build_state(parse_scenario(textwrap.dedent(HEAD) + textwrap.indent(textwrap.dedent(jobs), "  ")))
    engine = Engine(state)
    for job in state.jobs:
        if job.submit <= at:
            engine.submit(job, job.submit)
    engine.cycle(at)
    return state, engine


def nodes_of(state: ClusterState, job: Job) -> list[str]:
    assert job.current_run is not None, job.pending_reason
    return sorted(state.nodes[p.node_id].name for p in job.current_run.placements)


def test_a_job_with_anti_affinity_on_its_own_pods_runs_one_pod_per_node() -> None:
    state, _ = run("""
    - name: vllm
      queue: q
      antiAffinity: [{topologyKey: kubernetes.io/hostname}]
      pods: [{count: 3, gpu: 1}]
    """)
    assert nodes_of(state, state.job("vllm")) == ["n1", "n2", "n3"]  # best fit alone packs them on n1


def test_a_one_per_node_gang_with_too_few_nodes_waits_whole_and_names_the_rule() -> None:
    state, _ = run("""
    - name: wide
      queue: q
      antiAffinity: [{topologyKey: kubernetes.io/hostname}]
      pods: [{count: 5, gpu: 1}]
    """)
    job = state.job("wide")
    assert job.current_run is None and all(n.whole_free == 8 for n in state.nodes)
    words = message(state, job, PendingReason.INSUFFICIENT_CAPACITY, 0.0)
    assert "with 4 of its 5 pods placed, anti-affinity with 4 pods of usher/job=wide (one per kubernetes.io/hostname)" in words


def test_anti_affinity_with_another_jobs_labels_and_its_symmetry() -> None:
    state, _ = run("""
    - {name: db, queue: q, labels: {app: db}, pods: [{gpu: 1}]}
    - name: web
      queue: q
      submit: 10
      antiAffinity: [{topologyKey: zone, labelSelector: {matchLabels: {app: db}}}]
      pods: [{gpu: 1}]
    - name: guard
      queue: q
      labels: {app: guard}
      antiAffinity: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {team: ml}}}]
      pods: [{gpu: 1}]
    - {name: ml, queue: q, submit: 10, labels: {team: ml}, pods: [{gpu: 6}]}
    """, at=10.0)
    [db] = nodes_of(state, state.job("db"))
    [guard] = nodes_of(state, state.job("guard"))
    zone = state.nodes[state.node_by_name[db]].labels["zone"]
    assert all(state.nodes[state.node_by_name[n]].labels["zone"] != zone for n in nodes_of(state, state.job("web")))
    # ml has no rule of its own: guard's anti-affinity keeps it off guard's node (best fit: there)
    assert nodes_of(state, state.job("ml")) != [guard]


def test_spread_over_zones_with_max_skew_one_is_met_by_the_whole_gang() -> None:
    state, _ = run("""
    - name: serve
      queue: q
      spread: [{topologyKey: zone, maxSkew: 1}]
      pods: [{count: 4, gpu: 2}]
    """)
    zones = sorted(state.nodes[state.node_by_name[n]].labels["zone"] for n in nodes_of(state, state.job("serve")))
    assert zones == ["a", "a", "b", "b"]


def test_a_preemption_frees_the_anti_affinity_rule_in_a_replay() -> None:
    state, engine = run("""
    - {name: x1, queue: q, priority: low, labels: {app: x}, pods: [{gpu: 6}]}
    - {name: x2, queue: q, priority: low, labels: {app: x}, pods: [{gpu: 6}]}
    - {name: x3, queue: q, priority: low, labels: {app: x}, pods: [{gpu: 6}]}
    - {name: x4, queue: q, priority: low, labels: {app: x}, pods: [{gpu: 6}]}
    - name: urgent
      queue: q
      priority: high
      submit: 60
      antiAffinity: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: x}}}]
      pods: [{gpu: 1}]
    """)
    urgent = state.job("urgent")
    engine.submit(urgent, 60.0)
    engine.cycle(60.0)
    preempted = [j for j in state.jobs if j.runs and j.runs[-1].end_reason == EndReason.PREEMPTED]
    assert urgent.state == JobState.RUNNING and len(preempted) == 1
    assert nodes_of(state, urgent) == [state.nodes[preempted[0].runs[-1].placements[0].node_id].name]


@pytest.mark.parametrize(("field", "expected"), [
    ("spread: [{topologyKey: zone, maxSkew: 0}]", "9: jobs[0].spread[0].maxSkew: must be greater than or equal to 1"),
    ("spread: [{topologyKey: zone}]", "9: jobs[0].spread[0].maxSkew: "),
    ("spread: [{topologyKey: zone, maxSkew: 1, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}]",
     "9: jobs[0].spread[0].minDomains: only with whenUnsatisfiable: DoNotSchedule"),
    ("spread: [{topologyKey: zone, maxSkew: 1, whenUnsatisfiable: Sometimes}]", "9: jobs[0].spread[0].whenUnsatisfiable: "),
    ("antiAffinity: [{labelSelector: {matchLabels: {app: x}}}]", "9: jobs[0].antiAffinity[0].topologyKey: "),
    ("antiAffinity: [{topologyKey: zone, labelSelector: {matchExpressions: [{key: app, operator: In}]}}]",
     "9: jobs[0].antiAffinity[0].labelSelector.matchExpressions[0]: operator In needs a non-empty values list"),
    ("labels: {usher/job: other}", "9: jobs[0].labels: usher/job is always the job's name ('j'); usher sets it"),
])
def test_bad_rules_are_refused_with_their_line_and_field(field: str, expected: str) -> None:
    text = textwrap.dedent("""\
        name: t
        nodes: [{name: n1, gpus: 8}]
        queues: [{name: q}]
        jobs:
          - name: j
            queue: q
            pods: [{gpu: 1}]
            # the field under test
            FIELD
        """).replace("FIELD", field)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, file="rules.yaml")
    assert f"rules.yaml:{expected}" in str(err.value), str(err.value)
