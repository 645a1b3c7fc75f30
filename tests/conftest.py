"""Shared helpers: replay a scenario given as YAML text and look at the report."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from usher.engine.controller import Controller
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario


def replay(text: str, until: float | None = None, policy: str = "usher") -> dict[str, Any]:
    scenario = parse_scenario(textwrap.dedent(text), file="test.yaml")
    ctrl = Controller(scenario, policy, until=until)
    ctrl.run_to_end()
    return build_report(ctrl)


def job(report: dict[str, Any], name: str) -> dict[str, Any]:
    for j in report["jobs"]:
        if j["name"] == name:
            return j
    raise KeyError(name)


def nodes_of(run: dict[str, Any]) -> list[str]:
    return [p["node"] for p in run["placements"]]


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path, monkeypatch) -> None:
    """The operator's own console themes and keymap stay out of the tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def console():
    """A console on the demo at 3h10m: the controller loop runs but the replay is paused, so
    commands are carried out while simulated time stands still (``at=`` picks another moment)."""
    from demo_state import AT, demo_at

    from usher.console.app import UsherApp

    def make(**options) -> UsherApp:
        ctrl = demo_at(options.pop("at", AT))
        ctrl.paused = True
        return UsherApp(ctrl, speed=60.0, **options)

    return make
