"""`--policy` names every baseline on a replay; on a cluster, pod-by-pod kube-default is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GANGS = """\
name: cli
nodeGroups: [{prefix: n, count: 2, template: {gpus: 8}}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, duration: 1h, pods: [{count: 2, gpu: 6}]}
  - {name: b, queue: q, duration: 1h, pods: [{count: 2, gpu: 6}]}
"""


def usher(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("policy", "deadlocked"), [("kueue", 0), ("volcano", 0), ("slurm", 0), ("kube-default", 2)])
def test_replay_under_a_baseline_names_it_and_counts_deadlocked_gangs(tmp_path: Path, policy: str, deadlocked: int) -> None:
    (tmp_path / "s.yaml").write_text(GANGS)
    out = usher("replay", "s.yaml", "--no-ui", "--policy", policy, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["policy"] == policy
    assert report["summary"]["gangsDeadlocked"] == deadlocked


def test_kube_default_is_refused_on_a_cluster_with_one_line(tmp_path: Path) -> None:
    out = usher("--no-ui", "--policy", "kube-default", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "kube-default" in out.stderr
