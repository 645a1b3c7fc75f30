"""Shared helpers: replay a scenario given as YAML text and look at the report."""

from __future__ import annotations

import textwrap
from typing import Any

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
