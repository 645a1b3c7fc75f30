"""Importing openb traces: the real Alibaba files, and malformed rows with file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from usher.engine.scenario import ScenarioError, load_scenario, parse_scenario

REPO = Path(__file__).resolve().parents[2]
SPEC_EXAMPLE = REPO / "fixtures" / "examples" / "spec-example.yaml"
OPENB = REPO.parent / "shared" / "traces" / "alibaba-gpu-v2023"
TRACE_ENTRY = (
    "traces:\n"
    "  - {format: openb, nodes: openb_node_list_gpu_node.csv, pods: openb_pod_list_default.csv, queue: team-a}\n"
)

needs_openb = pytest.mark.skipif(not OPENB.is_dir(), reason=f"trace files not found at {OPENB}")

SMALL = """\
name: small
nodes: [{name: n1, gpus: 8, cpu: 96, memory: 1Ti}]
queues: [{name: q}]
traces:
  - {format: openb, nodes: nodes.csv, pods: pods.csv, queue: q}
"""
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def _link_openb(folder: Path) -> None:
    for csv_file in OPENB.glob("*.csv"):
        (folder / csv_file.name).symlink_to(csv_file)


@needs_openb
def test_spec_example_with_its_trace_entry(tmp_path: Path) -> None:
    _link_openb(tmp_path)
    scenario_file = tmp_path / "two-teams.yaml"
    scenario_file.write_text(SPEC_EXAMPLE.read_text() + TRACE_ENTRY)
    scenario = load_scenario(scenario_file)

    nodes = scenario.all_nodes()
    assert len(nodes) == 1 + 32 + 1213
    assert len(scenario.trace_nodes) == 1213
    assert sum(n.gpus for n in scenario.trace_nodes) == 6212
    first = nodes[33]
    assert (first.name, first.gpus, first.gpu_model, first.cpu, first.memory) == (
        "openb-node-0000",
        2,
        "P100",
        64000,
        262144 * 2**20,
    )
    assert first.labels == {"kubernetes.io/hostname": "openb-node-0000"}

    jobs = scenario.all_jobs()
    assert len(jobs) == 1 + 8152 and jobs[0].name == "llm-pretrain"
    imported = jobs[1:]
    assert all(job.queue == "team-a" and len(job.pods) == 1 for job in imported)
    assert sum(1 for job in imported if job.pods[0].is_shared) == 3078
    pod0, pod1 = imported[0], imported[1]
    assert (pod0.name, pod0.submit, pod0.duration, pod0.estimate) == ("openb-pod-0000", 0.0, 12537496.0, 12537496.0)
    assert (pod0.pods[0].gpu, pod0.pods[0].cpu, pod0.pods[0].memory) == (1.0, 12000, 16384 * 2**20)
    assert (pod1.submit, pod1.duration, pod1.pods[0].gpu) == (427061.0, 12902960.0 - 427061.0, 0.46)
    assert max(job.pods[0].gpu for job in imported) == 8.0
    never_scheduled = [job for job in imported if job.duration is None]
    assert len(never_scheduled) == 897  # pending pods have no scheduled_time
    assert all(job.estimate is None for job in never_scheduled)
    assert (scenario.priority_of(pod0), pod0.preemptible) == (100, False)  # LS: latency-sensitive
    by_class = {(scenario.priority_of(job), job.preemptible) for job in imported}
    assert by_class == {(100, False), (50, False), (0, True)}


@needs_openb
def test_five_column_pod_list_and_prefix(tmp_path: Path) -> None:
    _link_openb(tmp_path)
    text = (
        "name: multi\nqueues: [{name: q}]\n"
        "traces:\n"
        "  - {format: openb, nodes: openb_node_list_all_node.csv}\n"
        "  - {format: openb, pods: openb_pod_list_multigpu20.csv, queue: q, prefix: m-}\n"
    )
    scenario = parse_scenario(text, base_dir=tmp_path)
    assert len(scenario.all_nodes()) == 1523 and scenario.jobs == []
    jobs = scenario.all_jobs()
    assert len(jobs) == 8324
    assert jobs[0].name == "m-openb-pod-0000"
    assert all(job.submit == 0.0 and job.duration is None for job in jobs)
    assert all(job.priority == 0 and job.preemptible for job in jobs), "no qos column: best effort"
    cpu_only = [n for n in scenario.all_nodes() if n.gpus == 0]
    assert cpu_only and all(n.gpu_model is None for n in cpu_only)


def test_small_trace(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODE_HEADER + "t1,32000,65536,4,V100M32\n")
    (tmp_path / "pods.csv").write_text(
        POD_HEADER
        + "p1,4000,1024,1,250,V100M32|T4,LS,Running,10,110,20\n"
        + "p2,4000,1024,2,1000,,BE,Pending,5,,\n"
        + "p3,0,0,0,0,,BE,Failed,,50,60\n"
    )
    (tmp_path / "s.yaml").write_text(SMALL)
    scenario = load_scenario(tmp_path / "s.yaml")
    assert [n.name for n in scenario.all_nodes()] == ["n1", "t1"]
    p1, p2, p3 = scenario.all_jobs()
    assert (p1.submit, p1.duration, p1.pods[0].gpu, p1.pods[0].gpu_model) == (10.0, 90.0, 0.25, ["V100M32", "T4"])
    assert p1.pods[0].name == "pod"
    assert (p2.submit, p2.duration, p2.pods[0].gpu, p2.pods[0].gpu_model) == (5.0, None, 2.0, [])
    assert (p3.submit, p3.duration, p3.pods[0].gpu) == (0.0, None, 0.0)
    assert [(j.priority, j.preemptible) for j in (p1, p2, p3)] == [(100, False), (0, True), (0, True)]


def test_malformed_rows_name_file_line_and_column(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(NODE_HEADER + "t1,32000,65536,4,V100M32\nt2,lots,65536,4,V100M32\n")
    pods.write_text(
        POD_HEADER
        + "p1,4000,1024,1,250,,LS,Running,10,110,20\n"
        + "p2,4000,1024,1\n"
        + "p3,4000,-1,1,250,,LS,Running,10,110,20\n"
        + "\n"
        + "p4,4000,1024,1,1500,,LS,Running,10,110,20\n"
        + ",4000,1024,1,500,,LS,Running,10,110,20\n"
        + "p6,4000,1024,1,500,,LS,Running,soon,110,20\n"
        + "p7,4000,1024,1,500,,Gold,Running,10,110,20\n"
    )
    (tmp_path / "s.yaml").write_text(SMALL)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path / "s.yaml")
    assert [(p.file, p.line, p.path, p.message) for p in caught.value.problems] == [
        (str(nodes), 3, "cpu_milli", "expected a whole number (got 'lots')"),
        (str(pods), 3, "", "expected 11 columns, got 4"),
        (str(pods), 4, "memory_mib", "must not be negative (got -1)"),
        (str(pods), 6, "gpu_milli", "must be 1000 or less for one GPU (got 1500)"),
        (str(pods), 7, "name", "a name is required"),
        (str(pods), 8, "creation_time", "expected a whole number (got 'soon')"),
        (str(pods), 9, "qos", "'Gold' is not a QoS class; expected one of LS, Guaranteed, Burstable, BE"),
    ]
    assert str(caught.value.problems[0]) == f"{nodes}:3: cpu_milli: expected a whole number (got 'lots')"


def test_missing_columns_and_files(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text("sn,gpu\nt1,4\n")
    (tmp_path / "s.yaml").write_text(SMALL)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path / "s.yaml")
    found = [(p.file, p.line, p.path, p.message) for p in caught.value.problems]
    assert found == [
        (
            str(tmp_path / "s.yaml"),
            5,
            "traces[0].pods",
            f"cannot read {tmp_path / 'pods.csv'}: No such file or directory",
        ),
        (str(tmp_path / "nodes.csv"), 1, "", "missing column(s) cpu_milli, memory_mib, model in the header row"),
    ]


def test_trace_entry_schema() -> None:
    text = (
        "name: x\nqueues: [{name: q}]\ntraces:\n"
        "  - {format: openb}\n"
        "  - {format: openb, pods: p.csv}\n"
        "  - {format: alibaba2020, nodes: n.csv}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text)
    assert [(p.path, p.line) for p in caught.value.problems] == [
        ("traces[0].nodes", 4),
        ("traces[1].queue", 5),
        ("traces[2].format", 6),
    ]


def test_trace_queue_and_names_are_cross_checked(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODE_HEADER + "n1,32000,65536,4,T4\n")
    (tmp_path / "pods.csv").write_text(POD_HEADER + "p1,4000,1024,1,250,,LS,Running,10,110,20\n")
    text = SMALL.replace("queue: q}", "queue: nope}") + "jobs: [{name: p1, queue: q, pods: [{gpu: 16}]}]\n"
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="s.yaml", base_dir=tmp_path)
    found = [(p.file, p.line, p.path, p.message) for p in caught.value.problems]
    assert found == [
        ("s.yaml", 5, "traces[0].queue", "unknown queue 'nope' (known: q)"),
        ("s.yaml", 6, "jobs[0].pods[0].gpu", "asks for 16 GPUs per pod, but the largest node has 8"),
        (str(tmp_path / "nodes.csv"), 2, "", "duplicate node name 'n1' (also nodes[0] (line 2))"),
        (str(tmp_path / "pods.csv"), 2, "", "duplicate job name 'p1' (also jobs[0] (line 6))"),
    ]
