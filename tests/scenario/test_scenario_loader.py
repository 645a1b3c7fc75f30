"""Loading scenario files: the spec's example, and every kind of bad input with path and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from usher.engine.scenario import Problem, Scenario, ScenarioError, load_scenario, parse_queue_config, parse_scenario

REPO = Path(__file__).resolve().parents[2]
SPEC_EXAMPLE = REPO / "fixtures" / "examples" / "spec-example.yaml"

HEAD = """\
name: t
topology: {levels: [usher/rack]}
priorityClasses: {low: 10}
nodes:
  - {name: n1, gpus: 8, cpu: 64, memory: 512Gi, gpuModel: H100}
  - {name: n2, gpus: 4, cpu: 32, memory: 1Ti, gpuModel: A100}
queues:
  - {name: q}
  - {name: r, quota: {gpu: 4}}
"""
"""Nine lines of a valid cluster (12 GPUs) that tests append jobs and events to."""


def problems(text: str) -> list[Problem]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="t.yaml")
    return caught.value.problems


def only(text: str) -> tuple[str, int | None, str]:
    found = problems(text)
    assert len(found) == 1, "\n".join(map(str, found))
    problem = found[0]
    assert problem.file == "t.yaml"
    return problem.path, problem.line, problem.message


# --- the spec's example -----------------------------------------------------------------


def test_spec_example_loads() -> None:
    scenario = load_scenario(SPEC_EXAMPLE)
    assert isinstance(scenario, Scenario)
    assert scenario.name == "two-teams"
    assert scenario.topology.levels == ["usher/block", "usher/rack", "kubernetes.io/hostname"]
    nodes = scenario.all_nodes()
    assert len(nodes) == 33 and sum(n.gpus for n in nodes) == 264
    assert nodes[0].name == "a-01" and nodes[0].labels["kubernetes.io/hostname"] == "a-01"
    assert nodes[0].nvlink_islands == [[0, 1, 2, 3], [4, 5, 6, 7]]
    by_name = {n.name: n for n in nodes}
    assert by_name["b-04"].labels["usher/rack"] == "b-rack1"
    assert by_name["b-05"].labels["usher/rack"] == "b-rack2"
    assert by_name["b-17"].labels["usher/block"] == "b-block2"
    queue = scenario.queues[0]
    assert queue.quota.gpu == 16 and queue.quota.cpu == 512_000 and queue.quota.memory == 4 * 2**40
    assert queue.borrowing_limit is not None and queue.borrowing_limit.gpu == 8
    assert queue.preemption.within_queue == "LowerPriority"
    job = scenario.jobs[0]
    assert scenario.priority_of(job) == 1000
    assert (job.duration, job.estimate, job.checkpoint_every, job.min_count) == (21600.0, 28800.0, 1800.0, 4)
    assert job.pods[0].topology is not None and job.pods[0].topology.required == "usher/rack"
    assert len(scenario.events) == 10
    # The example's job events name jobs it does not define: warnings, not errors.
    assert [w.path for w in scenario.warnings] == ["events[5].job", "events[6].job", "events[7].job", "events[8].job"]


def test_load_scenario_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "nope.yaml")


# --- YAML-level problems ------------------------------------------------------------------


def test_yaml_syntax_error_has_its_line() -> None:
    path, line, message = only("name: x\nnodes: []\n  queues: []\n")
    assert path == "" and line == 3 and message.startswith("YAML syntax error")


def test_syntax_error_names_where_the_unclosed_part_starts() -> None:
    path, line, message = only("name: x\njobs:\n  - {name: a, queue: q, pods: [{gpu: 1}]\n")
    assert (path, line) == ("", 4)
    assert message == (
        "YAML syntax error: did not find expected ',' or '}' (while parsing a flow mapping that starts on line 3)"
    )


def test_one_document_and_known_tags_only() -> None:
    assert only("---\nname: a\n---\nname: b\n") == (
        "",
        3,
        "a scenario file holds one YAML document; this starts another",
    )
    assert only("name: !foo x\n") == (
        "name",
        1,
        "cannot read this value: could not determine a constructor for the tag '!foo'",
    )


def test_duplicate_key() -> None:
    path, line, message = only(HEAD + "jobs: []\nqueues: []\n")
    assert (path, line) == ("queues", 11)
    assert message == "duplicate key 'queues' (first given on line 7)"


def test_duplicate_key_nested_and_cross_check_errors_together() -> None:
    found = problems(HEAD + "jobs:\n  - {name: j, queue: q, queue: r, pods: [{gpu: 9}]}\n")
    assert [(p.path, p.line) for p in found] == [("jobs[0].queue", 11), ("jobs[0].pods[0].gpu", 11)]
    assert found[0].message == "duplicate key 'queue' (first given on line 11)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("- a\n- b\n", "not a list"), ("just words\n", "not the value 'just words'"), ("", "empty"), ("# c\n", "empty")],
)
def test_top_level_must_be_a_mapping(text: str, fragment: str) -> None:
    path, line, message = only(text)
    assert path == "" and line in (1, None) and fragment in message


# --- schema problems ------------------------------------------------------------------------


def test_typo_field_reports_its_path_and_line() -> None:
    text = """\
name: typo
nodes:
  - name: n1
    gpus: 8
queues:
  - name: q
jobs:
  - name: j
    queue: q
    pods:
      - name: w
        count: 2
        gpu: 1
        gpuu: 1
"""
    assert only(text) == ("jobs[0].pods[0].gpuu", 14, "unknown field (did you mean gpu?)")


def test_unknown_top_level_field_lists_what_is_allowed() -> None:
    path, line, message = only(HEAD + "wibble: 1\n")
    assert (path, line) == ("wibble", 10)
    assert message.startswith("unknown field (allowed here: name, topology, priorityClasses, nodes")


def test_missing_field_points_at_the_parent() -> None:
    assert only(HEAD + "jobs:\n  - name: j\n    pods: [{}]\n") == ("jobs[0].queue", 11, "required field is missing")
    assert only("nodes: []\n") == ("name", 1, "required field is missing")


def test_fractional_gpu_above_one() -> None:
    text = HEAD + "jobs:\n  - name: j\n    queue: q\n    pods:\n      - gpu: 1.5\n"
    assert only(text) == (
        "jobs[0].pods[0].gpu",
        14,
        "must be a whole number or a share between 0 and 1 (got 1.5)",
    )
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="demo.yaml")
    assert str(caught.value) == (
        "demo.yaml:14: jobs[0].pods[0].gpu: must be a whole number or a share between 0 and 1 (got 1.5)"
    )


def test_bad_quota_resource_and_value() -> None:
    found = problems(HEAD.replace("quota: {gpu: 4}", "quota: {gpu: -4, gpus: 1, memory: 2Gb}"))
    assert [(p.path, p.line) for p in found] == [
        ("queues[1].quota.gpu", 9),
        ("queues[1].quota.memory", 9),
        ("queues[1].quota.gpus", 9),
    ]
    assert found[0].message == "must be a number of GPUs, 0 or more (got -4)"
    assert "not a memory quantity: '2Gb'" in found[1].message
    assert found[2].message == "unknown field (did you mean gpu?)"


def test_bad_enums_and_durations() -> None:
    text = HEAD.replace("- {name: q}", "- {name: q, approval: sometimes, preemption: {withinQueue: Always}}") + (
        "jobs:\n  - {name: j, queue: q, submit: soon, duration: 0, pods: [{}]}\n"
    )
    found = {p.path: (p.line, p.message) for p in problems(text)}
    assert found["queues[0].approval"] == (8, "must be 'auto' or 'manual' (got 'sometimes')")
    assert found["queues[0].preemption.withinQueue"][0] == 8
    assert "'LowerOrNewerEqualPriority'" in found["queues[0].preemption.withinQueue"][1]
    assert found["jobs[0].submit"][0] == 11 and "not a duration: 'soon'" in found["jobs[0].submit"][1]
    assert found["jobs[0].duration"] == (11, "must be longer than zero (got 0)")


def test_nvlink_not_a_partition() -> None:
    text = HEAD.replace("gpuModel: A100}", "gpuModel: A100,\n      nvlink: [[0, 1], [1, 2, 3]]}")
    path, line, message = only(text)
    assert (path, line) == ("nodes[1].nvlink", 7)
    assert message == "islands must split GPUs 0..3 with each GPU once: GPU 1 in more than one island"


def test_pod_topology_needs_exactly_one_mode() -> None:
    text = HEAD + (
        "jobs:\n  - name: j\n    queue: q\n    pods:\n      - topology: {required: usher/rack, preferred: usher/rack}\n"
    )
    path, line, message = only(text)
    assert (path, line) == ("jobs[0].pods[0].topology", 14)
    assert "exactly one of `required` or `preferred`" in message


def test_event_fields_must_match_the_action() -> None:
    text = HEAD + (
        "events:\n"
        "  - {at: 1h, action: drain, job: x}\n"
        "  - {at: 1h, action: setQuota, queue: q}\n"
        "  - {at: 1h, action: explode, node: n1}\n"
    )
    assert [(p.path, p.line, p.message) for p in problems(text)] == [
        ("events[0].node", 11, "required for action drain"),
        ("events[0].job", 11, "not used by action drain"),
        ("events[1].quota", 12, "required for action setQuota"),
        (
            "events[2].action",
            13,
            "must be 'drain', 'cordon', 'uncordon', 'fail', 'recover', 'approve', 'preempt', 'hold', "
            "'release' or 'setQuota' (got 'explode')",
        ),
    ]


def test_min_count_below_one_and_empty_pods() -> None:
    text = HEAD + "jobs:\n  - {name: j, queue: q, minCount: 0, pods: []}\n"
    assert [(p.path, p.line, p.message) for p in problems(text)] == [
        ("jobs[0].minCount", 11, "must be greater than or equal to 1 (got 0)"),
        ("jobs[0].pods", 11, "must not be empty"),
    ]


def test_every_schema_error_is_reported() -> None:
    text = """\
name: many
nodes:
  - {name: a, gpus: two}
nodeGroups:
  - {prefix: g, count: 0, layout: {usher/rack: 0}}
queues:
  - {name: q, weight: 0}
jobs:
  - name: j
    queue: q
    preemptible: maybe
    pods: [{count: 0, cpu: lots}]
traces:
  - {format: csv, pods: x.csv}
"""
    found = [(p.path, p.line) for p in problems(text)]
    assert found == [
        ("nodes[0].gpus", 3),
        ("nodeGroups[0].count", 5),
        ('nodeGroups[0].layout["usher/rack"]', 5),
        ("queues[0].weight", 7),
        ("jobs[0].preemptible", 11),
        ("jobs[0].pods[0].count", 12),
        ("jobs[0].pods[0].cpu", 12),
        ("traces[0].format", 14),
    ]


# --- cross-checks ---------------------------------------------------------------------------


def test_duplicate_names() -> None:
    text = HEAD + (
        "  - {name: q}\n"  # line 10: a third queue, named like the first
        "nodeGroups:\n"
        "  - {prefix: n, count: 1}\n"
        "  - {prefix: n, count: 2}\n"  # line 13: n-01 again
        "jobs:\n"
        "  - {name: j, queue: q, pods: [{}]}\n"
        "  - {name: j, queue: q, pods: [{name: a}, {name: a}]}\n"
    )
    assert [(p.path, p.line, p.message) for p in problems(text)] == [
        ("queues[2].name", 10, "duplicate queue name 'q' (also queues[0].name (line 8))"),
        ("nodeGroups[1].prefix", 13, "duplicate node name 'n-01' (also nodeGroups[0] (line 12))"),
        ("jobs[1].name", 16, "duplicate job name 'j' (also jobs[0] (line 15))"),
        ("jobs[1].pods[1].name", 16, "duplicate pod name 'a' in job 'j'"),
    ]


def test_duplicate_explicit_node() -> None:
    text = HEAD.replace("{name: n2,", "{name: n1,")
    assert only(text) == ("nodes[1].name", 6, "duplicate node name 'n1' (also nodes[0] (line 5))")


def test_unknown_names() -> None:
    text = HEAD + (
        "jobs:\n"
        "  - {name: j, queue: qq, priority: urgent, pods: [{}]}\n"  # 11
        "events:\n"
        "  - {at: 1h, action: fail, node: n3}\n"  # 13
        "  - {at: 1h, action: setQuota, queue: zz, quota: {gpu: 1}}\n"  # 14
        "  - {at: 1h, action: hold, job: nobody}\n"  # 15: only a warning
    )
    assert [(p.path, p.line, p.message) for p in problems(text)] == [
        ("jobs[0].queue", 11, "unknown queue 'qq' (did you mean 'q'?)"),
        ("jobs[0].priority", 11, "unknown priority class 'urgent' (known: low)"),
        ("events[0].node", 13, "unknown node 'n3' (known: n1, n2)"),
        ("events[1].queue", 14, "unknown queue 'zz' (known: q, r)"),
    ]


def test_event_on_unknown_job_is_a_warning() -> None:
    scenario = parse_scenario(HEAD + "events:\n  - {at: 1h, action: approve, job: nobody}\n", file="t.yaml")
    assert [(w.path, w.line) for w in scenario.warnings] == [("events[0].job", 11)]


def test_topology_checks() -> None:
    text = HEAD + (
        "jobs:\n  - name: j\n    queue: q\n    pods:\n      - topology: {required: usher/block}\n"  # 14
    )
    assert only(text) == (
        "jobs[0].pods[0].topology.required",
        14,
        "unknown topology level 'usher/block' (did you mean 'usher/rack'?)",
    )
    no_levels = text.replace("topology: {levels: [usher/rack]}\n", "")
    assert only(no_levels) == (
        "jobs[0].pods[0].topology",
        13,
        "topology levels are not defined (set topology.levels first)",
    )


def test_min_count_above_pod_count() -> None:
    text = HEAD + "jobs:\n  - name: j\n    queue: q\n    minCount: 5\n    pods: [{count: 4}]\n"
    assert only(text) == ("jobs[0].minCount", 13, "minCount 5 is more than the job's 4 pods")


def test_work_that_can_never_fit() -> None:
    text = HEAD + (
        "jobs:\n"
        "  - name: big-pod\n"  # 11
        "    queue: q\n"
        "    pods:\n"
        "      - {gpu: 16, cpu: 65, memory: 2Ti}\n"  # 14
        "  - name: big-gang\n"  # 15
        "    queue: q\n"
        "    pods: [{count: 2, gpu: 8}]\n"
        "  - name: no-node-has-both\n"
        "    queue: q\n"
        "    pods: [{gpu: 8, memory: 600Gi}]\n"  # 20
        "  - name: gang-of-three\n"  # 21
        "    queue: q\n"
        "    minCount: 2\n"
        "    pods: [{count: 3, gpu: 8}]\n"
        "  - name: elastic\n"  # fits: one pod at a time is enough
        "    queue: q\n"
        "    minCount: 1\n"
        "    pods: [{count: 3, gpu: 8}]\n"
    )
    assert [(p.path, p.line, p.message) for p in problems(text)] == [
        ("jobs[0].pods[0].gpu", 14, "asks for 16 GPUs per pod, but the largest node has 8"),
        ("jobs[0].pods[0].cpu", 14, "asks for 65 CPU per pod, but the largest node has 64"),
        ("jobs[0].pods[0].memory", 14, "asks for 2Ti memory per pod, but the largest node has 1Ti"),
        ("jobs[1]", 15, "needs 16 whole GPUs at once (all 2 pods), but the cluster has 12"),
        ("jobs[2].pods[0]", 20, "no single node has 8 GPUs and 600Gi memory for one pod"),
        ("jobs[3]", 21, "needs 16 whole GPUs at once (minCount 2 of 3 pods), but the cluster has 12"),
    ]


def test_unknown_gpu_model_is_only_a_warning() -> None:
    scenario = parse_scenario(HEAD + "jobs:\n  - {name: j, queue: q, pods: [{gpu: 1, gpuModel: [B200]}]}\n")
    assert [(w.path, w.line) for w in scenario.warnings] == [("jobs[0].pods[0].gpuModel", 11)]


def test_nodes_without_limits_fit_anything() -> None:
    text = (
        "name: x\nnodes: [{name: a, gpus: 1}]\nqueues: [{name: q}]\n"
        "jobs:\n  - {name: j, queue: q, pods: [{gpu: 0.5, cpu: 1000, memory: 1Pi}]}\n"
    )
    assert parse_scenario(text).jobs[0].pods[0].gpu == 0.5


def test_shared_gpu_needs_a_gpu_node() -> None:
    text = "name: x\nnodes: [{name: a}]\nqueues: [{name: q}]\njobs:\n  - {name: j, queue: q, pods: [{gpu: 0.5}]}\n"
    assert only(text) == ("jobs[0].pods[0].gpu", 5, "asks for a share of a GPU, but no node has a GPU")


def test_all_cross_check_errors_in_one_file_are_reported() -> None:
    text = HEAD + (
        "jobs:\n"
        "  - {name: a, queue: nope, pods: [{}]}\n"
        "  - {name: b, queue: q, priority: nope, pods: [{gpu: 99}]}\n"
        "events:\n"
        "  - {at: 0, action: drain, node: nope}\n"
    )
    assert [p.path for p in problems(text)] == [
        "jobs[0].queue",
        "jobs[1].priority",
        "jobs[1].pods[0].gpu",
        "events[0].node",
    ]


def test_error_text_lists_each_problem_on_its_own_line() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(HEAD + "jobs:\n  - {name: a, queue: nope, pods: [{gpuu: 1}]}\n  - {queue: q, pods: [{}]}\n")
    lines = str(caught.value).splitlines()
    assert lines == [
        "<string>:11: jobs[0].pods[0].gpuu: unknown field (did you mean gpu?)",
        "<string>:12: jobs[1].name: required field is missing",
    ]


def test_problem_without_line() -> None:
    assert str(Problem("a.csv", "", None, "broken")) == "a.csv: broken"
    assert str(Problem("a.yaml", "jobs[0]", 3, "bad")) == "a.yaml:3: jobs[0]: bad"


def test_merge_keys_and_anchors() -> None:
    text = HEAD + ("jobs:\n  - &base {name: j1, queue: q, submit: 1h, pods: [{gpu: 1}]}\n  - {<<: *base, name: j2}\n")
    scenario = parse_scenario(text)
    assert [(j.name, j.submit) for j in scenario.jobs] == [("j1", 3600.0), ("j2", 3600.0)]


def test_queue_namespaces_in_a_replay_are_a_warning_and_in_a_queue_config_fine() -> None:
    text = "name: x\nnodes: [{name: a, gpus: 1}]\nqueues: [{name: q, namespaces: [research]}]\njobs: []\n"
    assert [(w.path, w.line) for w in parse_scenario(text).warnings] == [("queues[0].namespaces", 3)]
    assert parse_queue_config("queues: [{name: q, namespaces: [research]}]\n").queues[0].namespaces == ["research"]
