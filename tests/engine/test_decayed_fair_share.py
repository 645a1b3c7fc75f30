"""Decayed fair share (issue 15): ``usageHalfLife`` makes a queue's recent use count in its share."""

from __future__ import annotations

import pytest

from usher.engine.controller import Controller
from usher.engine.scenario import ScenarioError, parse_scenario

WEEK_THEN_BOTH = """\
name: decay
nodeGroups: [{{prefix: n, count: 2, template: {{gpus: 8}}}}]
queues:
  - {{name: busy{extra}}}
  - {{name: fresh{extra}}}
jobs:
  - {{name: week, queue: busy, duration: 3d, pods: [{{count: 2, gpu: 8}}]}}
  - {{name: b1, queue: busy, submit: {later}, duration: 1h, pods: [{{gpu: 8}}]}}
  - {{name: b2, queue: busy, submit: {later}, duration: 1h, pods: [{{gpu: 8}}]}}
  - {{name: f1, queue: fresh, submit: {later}, duration: 1h, pods: [{{gpu: 8}}]}}
  - {{name: f2, queue: fresh, submit: {later}, duration: 1h, pods: [{{gpu: 8}}]}}
"""


def first_starts(text: str) -> dict[str, float]:
    ctrl = Controller(parse_scenario(text, file="decay.yaml"))
    ctrl.run_to_end()
    return {job.name: job.runs[0].start for job in ctrl.state.jobs}


def test_a_queue_that_used_the_cluster_all_along_yields_to_one_that_did_not() -> None:
    """Both queues want both nodes at 3d: the one that held them for three days waits."""
    with_decay = first_starts(WEEK_THEN_BOTH.format(extra=", usageHalfLife: 1d", later="3d"))
    assert with_decay["f1"] == with_decay["f2"] == 3 * 86400
    assert with_decay["b1"] == with_decay["b2"] == 3 * 86400 + 3600
    # without it, only what each holds now counts: they take turns
    plain = first_starts(WEEK_THEN_BOTH.format(extra="", later="3d"))
    assert sorted(plain.values())[1:] == [3 * 86400, 3 * 86400, 3 * 86400 + 3600, 3 * 86400 + 3600]
    assert plain["b1"] == 3 * 86400 and plain["f1"] == 3 * 86400


def test_old_use_is_forgotten_at_the_rate_of_the_half_life() -> None:
    """Ten half-lives after the week ends, the busy queue's past weighs 1/1024 of it."""
    text = WEEK_THEN_BOTH.format(extra=", usageHalfLife: 6h", later="5d12h")
    ctrl = Controller(parse_scenario(text, file="decay.yaml"))
    while ctrl.now < 3 * 86400:
        ctrl.step()
    busy = ctrl.state.queues["busy"]
    assert busy.past_gpu == pytest.approx(16000 * (1 - 0.5**12), rel=1e-9)  # 16 GPUs for 12 half-lives
    ctrl.engine.state.age_usage(3 * 86400 + 10 * 6 * 3600)
    assert busy.past_gpu == pytest.approx(16000 * (1 - 0.5**12) / 1024, rel=1e-9)


@pytest.mark.parametrize("value", ["0s", "-1h", "soon"])
def test_a_half_life_that_is_not_a_positive_duration_is_refused_with_its_place(value: str) -> None:
    text = WEEK_THEN_BOTH.format(extra=f", usageHalfLife: {value}", later="3d")
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, file="decay.yaml")
    assert "usageHalfLife" in str(err.value) and "decay.yaml" in str(err.value)
