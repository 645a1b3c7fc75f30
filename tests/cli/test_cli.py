"""The command line as a user runs it: exit codes, messages, reports, from any directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = """\
name: cli
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, duration: 1h, pods: [{gpu: 4}]}
  - {name: b, queue: q, submit: 10m, duration: 1h, pods: [{gpu: 8}]}
"""

BAD = """\
name: cli
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - name: a
    queue: nope
    pods:
      - gpu: 1.5
        gpuu: 1
"""


def usher(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_check_accepts_a_good_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 0
    assert "1 node, 8 GPUs" in out.stdout and "2 jobs" in out.stdout


def test_check_lists_every_error_with_path_and_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(BAD)
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "s.yaml:8: jobs[0].pods[0].gpu" in out.stderr
    assert "s.yaml:9: jobs[0].pods[0].gpuu" in out.stderr


def test_yaml_syntax_error_exits_2_with_the_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("name: x\nnodes: [\n  {name: a\n")
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "s.yaml:" in out.stderr and "Traceback" not in out.stderr


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    out = usher("replay", "nowhere.yaml", "--no-ui", cwd=tmp_path)
    assert out.returncode == 2 and "nowhere.yaml" in out.stderr and "Traceback" not in out.stderr


def test_unknown_policy_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    out = usher("replay", "s.yaml", "--no-ui", "--policy", "magic", cwd=tmp_path)
    assert out.returncode == 2 and "magic" in out.stderr and "usher" in out.stderr


def test_replay_writes_the_report_and_is_byte_identical_for_the_same_seed(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    one = usher("replay", "s.yaml", "--no-ui", "--report", "one.json", "--seed", "7", cwd=tmp_path)
    two = usher("replay", "s.yaml", "--no-ui", "--report", "two.json", "--seed", "7", cwd=tmp_path)
    assert one.returncode == 0 and two.returncode == 0
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    report = json.loads((tmp_path / "one.json").read_text())
    assert list(report) == ["scenario", "policy", "seed", "version", "endTime", "jobs", "summary"]
    assert report["seed"] == 7 and report["policy"] == "usher"
    b = next(j for j in report["jobs"] if j["name"] == "b")
    assert b["runs"][0]["start"] == 3600.0
    assert set(report["summary"]) == {
        "gpuUtilization", "avgWaitSeconds", "p95WaitSeconds", "avgJctSeconds",
        "makespanSeconds", "preemptions", "finished", "pending", "gangsDeadlocked", "gpuHeldIdle", "moves",
    }


def test_until_stops_the_replay_and_leaves_jobs_running(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    out = usher("replay", "s.yaml", "--no-ui", "--until", "30m", cwd=tmp_path)
    assert out.returncode == 0
    report = json.loads(out.stdout)
    assert report["endTime"] == 1800.0
    a = next(j for j in report["jobs"] if j["name"] == "a")
    assert a["state"] == "Running" and a["runs"][0]["endReason"] == "Running"
    b = next(j for j in report["jobs"] if j["name"] == "b")
    assert b["state"] == "Pending" and b["estimatedStart"] == 3600.0


def test_demo_scenario_ships_with_the_package_and_replays_headless(tmp_path: Path) -> None:
    out = usher("demo", "--no-ui", "--report", "demo.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "demo.json").read_text())
    assert report["scenario"] == "demo"
    reasons = {j["endReason"] for job in report["jobs"] for j in job["runs"]}
    assert {"Finished", "Preempted", "NodeFailed", "Drained"} <= reasons


@pytest.mark.parametrize("policy", ["usher", "fifo"])
def test_named_policies_run(tmp_path: Path, policy: str) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    out = usher("replay", "s.yaml", "--no-ui", "--policy", policy, cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["policy"] == policy


def test_a_missing_kubeconfig_is_one_line_that_suggests_the_demo(tmp_path: Path) -> None:
    out = usher("--no-ui", "--kubeconfig", "missing.kubeconfig", cwd=tmp_path)
    assert out.returncode == 1
    assert "missing.kubeconfig" in out.stderr and "usher demo" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_an_unreachable_cluster_is_one_line_that_suggests_the_demo(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "kc").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    out = usher("--no-ui", "--kubeconfig", "kc", cwd=tmp_path)
    assert out.returncode == 1
    assert f"127.0.0.1:{port}" in out.stderr and "usher demo" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
