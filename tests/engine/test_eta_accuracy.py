"""ETA accuracy (issue 15): the recorder scores the estimates a user was shown, and the planner
learns how much users overshoot their estimates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from usher.engine.controller import Controller
from usher.engine.explain import explain_all
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario

ONE_NODE = """\
name: eta
nodeGroups: [{prefix: n, count: 1, template: {gpus: 8}}]
queues: [{name: q}]
jobs:
"""


def test_an_estimate_that_comes_true_scores_exactly() -> None:
    """B waits for A, whose estimate is its run time: B is told 2h and starts at 2h."""
    text = ONE_NODE + (
        "  - {name: a, queue: q, duration: 2h, estimate: 2h, pods: [{gpu: 8}]}\n"
        "  - {name: b, queue: q, submit: 60, duration: 1h, estimate: 1h, pods: [{gpu: 8}]}\n"
    )
    ctrl = Controller(parse_scenario(text, file="eta.yaml"))
    ctrl.record_eta_accuracy()
    ctrl.run_to_end()
    summary = build_report(ctrl)["summary"]["etaAccuracy"]
    assert summary["first"] == {
        "jobs": 1,
        "withoutEstimate": 0,
        "medianAbsErrorSeconds": 0.0,
        "p90AbsErrorSeconds": 0.0,
        "within10Percent": 1.0,
        "startedLaterThanEstimated": 0.0,
    }
    assert summary["hourBefore"]["jobs"] == 1 and summary["hourBefore"]["medianAbsErrorSeconds"] == 0.0


def test_an_estimate_off_by_an_hour_is_scored_so() -> None:
    """A says 3h and runs 2h: B is told 3h, starts at 2h, an hour earlier than estimated."""
    text = ONE_NODE + (
        "  - {name: a, queue: q, duration: 2h, estimate: 3h, pods: [{gpu: 8}]}\n"
        "  - {name: b, queue: q, submit: 60, duration: 1h, estimate: 1h, pods: [{gpu: 8}]}\n"
    )
    ctrl = Controller(parse_scenario(text, file="eta.yaml"))
    recorder = ctrl.record_eta_accuracy()
    ctrl.run_to_end()
    (score,) = recorder.first
    assert (score.given_at, score.estimate, score.started) == (60.0, 10800.0, 7200.0)
    assert score.error == 3600.0 and not score.within_10_percent
    assert build_report(ctrl)["summary"]["etaAccuracy"]["first"]["startedLaterThanEstimated"] == 0.0


def test_the_planner_scales_estimates_by_how_finished_runs_compared() -> None:
    """Twenty jobs that each run half their estimate: the next wait is told half the estimate."""
    text = ONE_NODE + "".join(
        f"  - {{name: s{i}, queue: q, submit: {i * 1000}, duration: 500, estimate: 1000, pods: [{{gpu: 8}}]}}\n" for i in range(20)
    ) + (
        "  - {name: long, queue: q, submit: 30000, duration: 4000, estimate: 8000, pods: [{gpu: 8}]}\n"
        "  - {name: next, queue: q, submit: 30010, duration: 60, estimate: 60, pods: [{gpu: 8}]}\n"
    )
    ctrl = Controller(parse_scenario(text, file="eta.yaml"))
    while ctrl.now < 30010:
        ctrl.step()
    assert ctrl.state.runtime_scale() == 0.5
    waiting = ctrl.state.jobs[ctrl.state.job_by_name["next"]]
    assert explain_all(ctrl.state, ctrl.now)[waiting.id].estimated_start == 30000 + 4000
    ctrl.run_to_end()
    assert waiting.runs[0].start == 34000


def test_replay_writes_eta_accuracy_into_the_report_only_when_asked(tmp_path: Path) -> None:
    scenario = tmp_path / "eta.yaml"
    scenario.write_text(ONE_NODE + "  - {name: a, queue: q, duration: 2h, estimate: 2h, pods: [{gpu: 8}]}\n"
                        "  - {name: b, queue: q, submit: 60, duration: 1h, estimate: 1h, pods: [{gpu: 8}]}\n")

    def replay(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "usher", "replay", str(scenario), *extra],
                              capture_output=True, text=True, timeout=120)

    plain = replay("--no-ui")
    assert plain.returncode == 0 and "etaAccuracy" not in json.loads(plain.stdout)["summary"]
    asked = replay("--no-ui", "--eta-accuracy")
    assert asked.returncode == 0
    assert json.loads(asked.stdout)["summary"]["etaAccuracy"]["first"]["jobs"] == 1
    refused = replay("--eta-accuracy")
    assert refused.returncode == 2 and "--no-ui" in refused.stderr and "Traceback" not in refused.stderr
