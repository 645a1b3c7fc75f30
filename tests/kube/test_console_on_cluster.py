"""The console attached to a cluster (the sandbox's fake API server), as ``usher`` runs it:
it shows what the scheduler did, its actions become API writes, and actions the operator's RBAC
forbids are disabled with the reason before anyone tries them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import yaml

from harness import ops_cluster, running_cluster, wait_for  # noqa: F401 (ops_cluster is the cluster fixture)
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController


async def test_console_on_a_cluster_acts_through_the_api_and_respects_rbac(cluster) -> None:
    c = cluster
    c.server.forbid("create", "pods", "eviction")  # this operator may not evict: no preempt, no drain
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set() and app.forbidden, pilot)
            assert app.check_action("preempt", ()) is None and app.check_action("drain", ()) is None
            assert "pods/eviction" in (app.disabled_reason("drain") or "")
            await pilot.press("4")
            assert app.check_action("cordon", ()) is True
            await pilot.press("question_mark")
            await pilot.pause()
            help_text = str(app.screen.query_one("#page-text").render())
            assert "Drain" in help_text and "disabled: your RBAC does not allow create on pods/eviction" in help_text
            await pilot.press("escape")
            # the scheduler ran the gang; the console sees it through the API
            await pilot.press("3")
            table = app.query_one("#job-table", RowTable)
            await wait_for(lambda: any(r.key.endswith("train") for r in table.rows), pilot)
            nb = next(r.key for r in table.rows if r.key.endswith("nb"))
            table.select_key(nb)
            await pilot.press("a")
            # the approval is the operator's, kept where tenants cannot write: not on the pods
            await wait_for(
                lambda: nb in yaml.safe_load(
                    c.server.store.get("configmaps", "usher-decisions", "usher-system")["data"]["decisions.yaml"]
                )["approved"],
                pilot,
            )
            assert not any("usher/approved" in (p["metadata"].get("annotations") or {})
                           for p in c.server.store.list("pods", "default").objects())
            await pilot.press("4")
            app.query_one("#node-table", RowTable).select_key("n-01")
            await pilot.press("c")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(lambda: c.server.store.get("nodes", "n-01")["spec"].get("unschedulable") is True, pilot)
            events = {e["reason"] for e in c.server.store.list("events", None).objects()}
            assert {"UsherApprove", "UsherCordon"} <= events
            await wait_for(lambda: any(e.action == "cordon" for e in ctrl.state.audit), pilot)
    finally:
        await asyncio.sleep(0)
        await client.aclose()


class FailsOnce(KubeController):
    """A controller whose first run dies of a bug (what the console must outlive)."""

    runs = 0

    async def run(self, speed: float | None = None) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("a bug in the controller")
        await super().run(speed)


async def test_a_controller_that_dies_does_not_take_the_console_down(cluster) -> None:
    client = await KubeClient.connect(str(cluster.kubeconfig))
    ctrl = FailsOnce(client, identity="console", clock=cluster.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(lambda: "the controller stopped: a bug in the controller" in str(app.status_text), pilot)
            assert "starting it again" in str(app.status_text)
            await wait_for(lambda: ctrl.runs == 2 and ctrl.synced.is_set(), pilot)
            await pilot.press("3")
            table = app.query_one("#job-table", RowTable)
            await wait_for(lambda: any(r.key.endswith("train") for r in table.rows), pilot)
            assert app.is_running
    finally:
        await client.aclose()


VERDICTS = """
name: verdicts
nodeGroups:
  - {prefix: n, count: 2, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 8}}
  - {name: product, namespaceSelector: {}, quota: {gpu: 8}, approval: manual}
jobs:
  - {name: train, queue: research, submit: 0, duration: 600, pods: [{name: w, count: 2, gpu: 4}]}
  - {name: more, queue: research, submit: 0, duration: 600, pods: [{name: w, count: 1, gpu: 4}]}
  - {name: nb, queue: product, submit: 0, duration: 100, pods: [{gpu: 1}]}
"""


@asynccontextmanager
async def console_on(text: str, tmp_path, monkeypatch) -> AsyncIterator[tuple[Any, KubeController, UsherApp, Any]]:
    """The scenario with the scheduler running, and a console watching it (synced)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = await running_cluster(text, tmp_path)
    client = await KubeClient.connect(str(c.kubeconfig))
    console = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(console, speed=None)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(lambda: console.synced.is_set(), pilot)
            yield c, console, app, pilot
    finally:
        await client.aclose()
        await c.stop()


async def test_the_console_shows_the_schedulers_verdict_of_every_waiting_job(tmp_path, monkeypatch) -> None:
    async with console_on(VERDICTS, tmp_path, monkeypatch) as (c, console, app, pilot):
        def conditions() -> dict[str, str]:
            """The engine reason each waiting job's pods carry (its PodScheduled message's head)."""
            out = {}
            for p in c.server.store.list("pods", "default").objects():
                cond = next((x for x in p["status"].get("conditions") or [] if x["type"] == "PodScheduled"), None)
                if cond is not None and cond["status"] == "False":
                    out[p["metadata"]["labels"]["sandbox.usher/job"]] = cond["message"].split(":", 1)[0]
            return out

        def rows() -> dict[str, str]:
            now = console.now
            return {r.name.split("/", 1)[1]: r.reason for r in app.model.job_rows(now) if str(r.state) == "Pending"}

        await wait_for(lambda: len(conditions()) == 2 and rows() == conditions(), pilot)
        assert conditions() == {"more": "WaitingForQuota", "nb": "AwaitingApproval"}


async def test_the_console_lists_the_schedulers_decisions(tmp_path, monkeypatch) -> None:
    async with console_on(VERDICTS, tmp_path, monkeypatch) as (_, console, app, pilot):
        # the scheduler bound train's two pods (nb waits for approval, more for quota)
        def decided() -> list:
            return [e for e in console.state.audit if e.actor == "scheduler" and e.action == "Scheduled"]

        await wait_for(lambda: len(decided()) == 2, pilot)
        assert all(e.target.startswith("default/train-") and "Successfully assigned" in e.result for e in decided())
        await pilot.press("6")  # the Events view lists them beside the operators' own actions
        table = app.query_one("#event-table", RowTable)
        await wait_for(lambda: sum("Scheduled" in r.cells for r in table.rows) == 2, pilot)


async def test_the_console_preempts_and_drains_through_the_api_though_it_schedules_nothing(cluster) -> None:
    """The console's controller does not schedule (it is no leader), yet an operator's preempt
    and drain are carried out: the API server checks the operator's own permission."""
    from usher.engine.channel import Command
    from usher.engine.enums import Action

    c = cluster
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    task = asyncio.create_task(ctrl.run())
    try:
        await asyncio.wait_for(ctrl.synced.wait(), 10)
        evictions = lambda: sum(1 for r in c.server.requests if r.path.endswith("/eviction") and r.status == 201)  # noqa: E731
        before = evictions()
        said = await asyncio.wait_for(ctrl.post(Command(Action.PREEMPT, job="default/train", actor="ops")), 10)
        assert said.startswith("preempted and requeued") and evictions() == before + 2
        await c.settle()
        await wait_for_bound(c, "train-")  # made anew, and bound again by the scheduler
        node = next(p["spec"]["nodeName"] for p in c.server.store.list("pods", "default").objects()
                    if p["metadata"]["name"].startswith("train-") and p["spec"].get("nodeName")
                    and not p["metadata"].get("deletionTimestamp"))
        said = await asyncio.wait_for(ctrl.post(Command(Action.DRAIN, node=node, actor="ops")), 10)
        assert said.startswith("drained; requeued 1 job") and "could not evict" not in said, said
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()


async def wait_for_bound(c, prefix: str) -> None:
    for _ in range(200):
        if any(p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
               for p in c.server.store.list("pods", "default").objects() if p["metadata"]["name"].startswith(prefix)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no pod {prefix}* was bound")
