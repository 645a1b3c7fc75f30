"""A job's page lists its pod rules (issue 32): a replay's antiAffinity and spread, in words."""

from __future__ import annotations

from usher.console.app import UsherApp
from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario

RULED = """\
name: ruled
nodes:
  - {name: n1, gpus: 8, labels: {zone: a}}
  - {name: n2, gpus: 8, labels: {zone: b}}
queues: [{name: q}]
jobs:
  - {name: db, queue: q, duration: 3h, labels: {app: db}, pods: [{gpu: 1}]}
  - name: serve
    queue: q
    duration: 3h
    antiAffinity: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}]
    spread: [{topologyKey: zone, maxSkew: 1}]
    pods: [{gpu: 1}]
"""


async def test_a_jobs_page_lists_its_anti_affinity_and_spread() -> None:
    ctrl = Controller(parse_scenario(RULED, file="ruled.yaml"), "usher")
    ctrl.step()
    app = UsherApp(ctrl, live=False)
    async with app.run_test(size=(140, 40)):
        details = app.job_details("serve").plain
        assert ("pod rules    anti-affinity with app=db per kubernetes.io/hostname; "
                "spread of usher/job=serve over zone, max skew 1\n") in details
        assert "pod rules" not in app.job_details("db").plain
