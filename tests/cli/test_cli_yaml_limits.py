"""`usher check` and `usher replay` on hostile YAML: exit 2 with the place and the limit, never a
traceback, never exit 1, and at once (the timeout marks only guard against a regression)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LOL = '["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
BOMB = f"a: &a {LOL}\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
"""The classic nine-level "billion laughs" (387M strings from ~400 bytes)."""

GOOD = """\
name: cli
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, duration: 1h, pods: [{count: 1, gpu: 4}]}
"""

CASES = {
    "bomb": (
        BOMB,
        "s.yaml:7: g[0]: aliases expand past 1,000,000 values (an alias bomb?); usher refuses documents this large",
    ),
    "deep": (
        "[" * 5_000 + "]" * 5_000,
        "s.yaml:1: [0][0]: lists and mappings nest more than 64 levels deep; usher refuses documents nested this deep",
    ),
    "count": (
        GOOD.replace("count: 1,", "count: 1e12,"),
        "s.yaml:5: jobs[0].pods[0].count: must be at most 100,000 (got 1e12); usher refuses larger values",
    ),
}


def usher(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(CASES))
def test_check_refuses_with_exit_2_and_the_place(tmp_path: Path, case: str) -> None:
    text, message = CASES[case]
    (tmp_path / "s.yaml").write_text(text)
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == message
    assert out.stdout == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_refuses_with_exit_2(tmp_path: Path, case: str) -> None:
    text, message = CASES[case]
    (tmp_path / "s.yaml").write_text(text)
    out = usher("replay", "s.yaml", "--no-ui", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == message


@pytest.mark.timeout(60)
def test_check_refuses_an_oversized_file(tmp_path: Path) -> None:
    with (tmp_path / "s.yaml").open("w") as handle:
        handle.write(GOOD)
        handle.write(("#" + "x" * 1023 + "\n") * (32 * 1024 + 1))
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "s.yaml: the file is over 32 MiB; usher refuses documents this large"


def test_check_still_accepts_a_good_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(GOOD)
    out = usher("check", "s.yaml", cwd=tmp_path)
    assert out.returncode == 0 and "1 node, 8 GPUs" in out.stdout
