"""One operator command, the same words on both backends: the quota form filled in the same way
on a replay and on a cluster (the sandbox) reports the amounts as the operator typed them, on the
status line, in the console's audit trail and, on a cluster, in the Kubernetes Event; the
ConfigMap holds them as a person writes them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import running_cluster, wait_for
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario

SCENARIO = """
name: words
nodeGroups:
  - {prefix: n, count: 2, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 16}}
jobs:
  - {name: train, queue: research, submit: 0, duration: 600, pods: [{name: w, count: 2, gpu: 4}]}
"""

#: what the operator types into research's quota form: GPUs, CPU and memory
TYPED = {"gpu": "80", "cpu": "96", "memory": "512Gi"}
WORDS = "set quota gpu=80, cpu=96, memory=512Gi"
GIB = 1 << 30


@asynccontextmanager
async def replay_console(tmp_path: Path) -> AsyncIterator[tuple[UsherApp, Any, Callable[[], list[str] | None]]]:
    ctrl = Controller(parse_scenario(SCENARIO, file="words.yaml"))
    ctrl.step()
    ctrl.paused = True  # commands are carried out while simulated time stands still
    app = UsherApp(ctrl, speed=60.0)
    async with app.run_test(size=(160, 44)) as pilot:
        yield app, pilot, lambda: None  # a replay records no Kubernetes Event


@asynccontextmanager
async def cluster_console(tmp_path: Path) -> AsyncIterator[tuple[UsherApp, Any, Callable[[], list[str] | None]]]:
    c = await running_cluster(SCENARIO, tmp_path)
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)

    def events() -> list[str]:
        return [e["message"] for e in c.server.store.list("events", "usher-system").objects() if e["reason"] == "UsherSetQuota"]

    try:
        async with app.run_test(size=(160, 44)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set() and "research" in ctrl.state.queues, pilot)
            yield app, pilot, events
            doc = yaml.safe_load(c.server.store.get("configmaps", "usher-queues", "usher-system")["data"]["queues.yaml"])
            assert doc["queues"][0]["quota"] == {"gpu": 80, "cpu": "96", "memory": "512Gi"}
    finally:
        await asyncio.sleep(0)
        await client.aclose()
        await c.stop()


@pytest.mark.parametrize("backend", [replay_console, cluster_console], ids=["replay", "cluster"])
async def test_a_quota_set_in_the_form_reads_as_typed_on_both_backends(backend, tmp_path: Path) -> None:
    async with backend(tmp_path) as (app, pilot, events):
        await pilot.press("2")
        table = app.query_one("#queue-table", RowTable)
        await wait_for(lambda: "research" in [r.key for r in table.rows], pilot)
        table.select_key("research")
        await pilot.pause()
        await pilot.press("e")
        await wait_for(lambda: bool(app.screen.query("#nominal-gpu")), pilot)
        for resource, text in TYPED.items():
            app.screen.query_one(f"#nominal-{resource}").value = text
        await pilot.pause()
        await pilot.click("#apply")
        state = app.controller.state
        await wait_for(lambda: state.queues["research"].nominal == (80_000, 96_000, 512 * GIB), pilot)
        await wait_for(lambda: "setQuota research" in str(app.query_one("#status").render()), pilot)
        assert str(app.query_one("#status").render()) == f"✓ setQuota research: {WORDS}"
        assert [e.result for e in state.audit if e.action == "setQuota"] == [WORDS]
        recorded = events()
        if recorded is not None:
            assert recorded == [f"operator: setQuota research: {WORDS}"]
        await pilot.press("6")  # the Events view lists it in the same words
        rows = app.query_one("#event-table", RowTable).rows
        assert [r.cells[-1] for r in rows if r.cells[2] == "setQuota"] == [WORDS]
