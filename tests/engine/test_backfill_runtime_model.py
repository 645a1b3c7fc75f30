"""Run-time predictions learnt per queue for the ETAs (issue 33): a team that asks five times
the time it uses is read as such, without making an exact team's ETAs wrong. Reservations keep
the estimates themselves (upper bounds), so only the ETAs move."""

from __future__ import annotations

import pytest
from usher.engine.controller import Controller
from usher.engine.explain import explain_all
from usher.engine.policy import backfill
from usher.engine.scenario import parse_scenario


def scenario() -> str:
    lines = [
        "name: habits",
        "nodes: [{name: n1, gpus: 8}]",
        "queues: [{name: exact}, {name: over}]",
        "jobs:",
    ]
    # 20 runs of a team that overshoots 5x, 25 of one that estimates exactly, one after another
    lines += [f"  - {{name: o{i}, queue: over, submit: {i}, duration: 600, estimate: 3000, pods: [{{gpu: 8}}]}}" for i in range(20)]
    lines += [f"  - {{name: e{i}, queue: exact, submit: {20 + i}, duration: 600, estimate: 600, pods: [{{gpu: 8}}]}}" for i in range(25)]
    lines += [
        "  - {name: long-over, queue: over, submit: 100000, duration: 2000, estimate: 10000, pods: [{gpu: 8}]}",
        "  - {name: probe, queue: exact, submit: 100010, duration: 600, estimate: 600, pods: [{gpu: 8}]}",
    ]
    return "\n".join(lines) + "\n"


def eta_of_probe(model: backfill.RuntimeModel, monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """The probe's estimated start while ``long-over`` runs, and when it really started."""
    monkeypatch.setattr(backfill, "RUNTIME_MODEL", model)
    ctrl = Controller(parse_scenario(scenario(), file="habits.yaml"), "usher")
    while ctrl.now < 100010:
        ctrl.step()
    probe = ctrl.state.job("probe")
    eta = explain_all(ctrl.state, ctrl.now)[probe.id].estimated_start
    ctrl.run_to_end()
    assert eta is not None
    return eta, probe.runs[0].start


def test_a_queue_that_overshoots_gets_etas_from_its_own_record(monkeypatch: pytest.MonkeyPatch) -> None:
    eta, start = eta_of_probe(backfill.RuntimeModel.QUEUE, monkeypatch)
    assert start == 102000.0  # long-over ran 2000 s of the 10000 it asked
    assert eta == start


def test_one_scale_for_the_whole_cluster_misses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's method: most finished runs were exact, so the cluster's median says 1.0 and the
    ETA is 8000 s late; the learnt one above is right."""
    eta, start = eta_of_probe(backfill.RuntimeModel.CLUSTER, monkeypatch)
    assert eta == start + 8000.0


def test_each_queue_keeps_its_own_record() -> None:
    ctrl = Controller(parse_scenario(scenario(), file="habits.yaml"), "usher")
    while ctrl.now < 100010:
        ctrl.step()
    assert ctrl.state.runtime_scale("over") == pytest.approx(0.2)
    assert ctrl.state.runtime_scale("exact") == pytest.approx(1.0)
    assert ctrl.state.runtime_scale() == pytest.approx(1.0)
