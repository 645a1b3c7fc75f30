"""The command line's one-line summaries count in words a person writes (issue 13, item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ONE_OF_EACH = """\
name: one
nodes: [{name: n1, gpus: 1}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, duration: 14h, pods: [{gpu: 1}]}
events:
  - {at: 1h, action: cordon, node: n1}
"""


def usher(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_check_counts_one_of_each_in_the_singular(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(ONE_OF_EACH)
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "1 node, 1 GPU, 1 queue, 1 job, 1 event" in out.stdout, out.stdout


def test_replay_says_how_far_it_went_as_a_duration(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(ONE_OF_EACH)
    out = usher("replay", "s.yaml", "--no-ui", "--report", "r.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "replayed to 14h in " in out.stderr and "50400s" not in out.stderr, out.stderr
