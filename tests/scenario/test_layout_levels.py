"""A node group's ``layout`` must name topology levels: a typo'd key (``usher/rak``) is refused by
``usher check`` with its file, line, path and the level meant, instead of leaving the nodes without
the level a gang requires (such a gang was then placed across nodes in no rack at all)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from usher.engine.scenario import ScenarioError, parse_scenario

TYPO = """\
name: rak
topology: {levels: [usher/block, usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - prefix: gpu
    count: 4
    layout: {usher/rak: 2, usher/block: 4}
    template: {gpus: 8}
queues: [{name: q}]
jobs:
  - {name: gang, queue: q, duration: 1h, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
"""


def test_usher_check_refuses_a_layout_key_that_is_no_level_with_the_place_and_the_level_meant(tmp_path: Path) -> None:
    (tmp_path / "rak.yaml").write_text(TYPO)
    out = subprocess.run([sys.executable, "-m", "usher", "check", "rak.yaml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "rak.yaml:6: nodeGroups[0].layout[\"usher/rak\"]: unknown topology level 'usher/rak' (did you mean "
        "'usher/rack'?); a layout labels nodes by topology level"
    ]


def test_a_layout_without_levels_says_to_define_them() -> None:
    text = "name: t\nnodeGroups: [{prefix: n, count: 2, layout: {usher/rack: 1}, template: {gpus: 8}}]\nqueues: [{name: q}]\njobs: []\n"
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="t.yaml")
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ('nodeGroups[0].layout["usher/rack"]', 2)
    assert problem.message == "'usher/rack' is not a topology level: topology levels are not defined (set topology.levels first)"


def test_layout_keys_that_are_levels_pass() -> None:
    scenario = parse_scenario(TYPO.replace("usher/rak:", "usher/rack:"), file="t.yaml")
    assert {n.labels["usher/rack"] for n in scenario.all_nodes()} == {"gpu-rack1", "gpu-rack2"}
