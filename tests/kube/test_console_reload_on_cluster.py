"""A queue config reload changes only what changed (issue 29, finding 5).

After each edit of ConfigMap usher-system/usher-queues the console's Events view gained an
``adopt ... found running on N nodes`` line for every running job, and finished jobs vanished
from the overview (``8 finished`` became ``1 finished``): the rebuild that follows a new config
derived the engine's state afresh from the pods and forgot what the pods no longer say. Here the
scheduler runs on the sandbox, a console watches it, and the config gains a queue.
"""

from __future__ import annotations

import pytest
from harness import console_beside, wait_for
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.controller import KubeController

RELOAD = """
name: reload
topology: {levels: [kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 2, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 16}}
jobs:
  - {name: short-a, queue: research, submit: 0, duration: 60, pods: [{gpu: 2}]}
  - {name: short-b, queue: research, submit: 0, duration: 90, pods: [{gpu: 2}]}
  - {name: short-c, queue: research, submit: 0, duration: 120, pods: [{gpu: 2}]}
  - {name: long-gang, queue: research, submit: 0, duration: 36000, pods: [{name: w, count: 2, gpu: 4}]}
  - {name: long-one, queue: research, submit: 0, duration: 36000, pods: [{gpu: 2}]}
"""

CONFIG = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
ADDED = "- {name: added, namespaceSelector: {}, quota: {gpu: 4}}\n"


@pytest.fixture
async def watched(tmp_path, monkeypatch):
    """The scheduler on the sandbox, and a console's controller watching beside it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    async with console_beside(RELOAD, tmp_path) as both:
        yield both


async def add_a_queue(c, name: str) -> None:
    """Append a queue to the config, through the API as ``kubectl edit`` would."""
    cm = (await c.world.http.get(CONFIG)).json()
    cm["data"]["queues.yaml"] = cm["data"]["queues.yaml"].rstrip("\n") + "\n" + ADDED.replace("added", name)
    assert (await c.world.http.put(CONFIG, json=cm)).status_code == 200


def running_starts(ctrl: KubeController) -> dict[str, float]:
    return {ctrl.state.jobs[i].name: ctrl.state.jobs[i].current_run.start for i in ctrl.state.running}


def overview_line(app: UsherApp) -> str:
    text = str(app.query_one("#overview-text").render())
    return next(line for line in text.splitlines() if line.startswith("jobs"))


def event_rows(app: UsherApp) -> list[tuple[str, ...]]:
    return [r.cells for r in app.query_one("#event-table", RowTable).rows]


async def test_a_config_reload_neither_adopts_known_jobs_again_nor_forgets_finished_ones(watched) -> None:
    c, console = watched
    app = UsherApp(console, speed=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(lambda: console.synced.is_set() and len(console.state.running) == 5, pilot)
        await c.play(until=600)  # the short jobs end as the console watches
        await wait_for(lambda: len(console.state.running) == 2, pilot)
        await pilot.pause(0.6)
        assert "2 running, 0 pending, 3 finished" in overview_line(app), overview_line(app)
        scheduler = c.controllers[0]
        starts = running_starts(scheduler)
        await pilot.press("6")
        await pilot.pause(0.6)
        before = event_rows(app)
        audits = {id(ctrl): len(ctrl.state.audit) for ctrl in (scheduler, console)}
        for name in ("added-1", "added-2", "added-3"):
            await add_a_queue(c, name)
            await wait_for(lambda: name in console.state.queues and name in scheduler.state.queues, pilot)
            await c.settle()
        await pilot.pause(0.6)
        # the Events view shows nothing new: no job was found anew, none started
        assert event_rows(app) == before, [r for r in event_rows(app) if r not in before]
        for ctrl in (scheduler, console):
            fresh = ctrl.state.audit[audits[id(ctrl)]:]
            assert not [e for e in fresh if e.action in ("adopt", "started")], fresh
        # the jobs that ran before the reloads run on as the same runs, from the same moment
        assert running_starts(scheduler) == starts and running_starts(console) == starts
        await pilot.press("1")
        await pilot.pause(0.6)
        assert "2 running, 0 pending, 3 finished" in overview_line(app), overview_line(app)
        # and a finished job's details still say where and when it ran
        await pilot.press("3")
        await pilot.pause(0.6)
        table = app.query_one("#job-table", RowTable)
        assert {r.key: r.cells[1] for r in table.rows} == {
            "default/short-a": "Finished", "default/short-b": "Finished", "default/short-c": "Finished",
            "default/long-gang": "Running", "default/long-one": "Running",
        }
        table.select_key("default/short-b")
        await pilot.press("enter")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "#1" in text and "n-" in text.split("Runs", 1)[1], text
