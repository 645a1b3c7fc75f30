"""A console watching a cluster (the scheduler runs beside it, as ``usher --no-ui`` does) lists
a preempted job once and words its request in pods and GPUs (issue 13, items 3 and 7).

A watching console's mirror finishes a gang's engine job when its pods are evicted and makes a
new one when the recreated pods bind: the console must still show one row per job, as it is now.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from harness import console_beside, wait_for
from usher.console.app import UsherApp
from usher.console.table import RowTable

PREEMPTION = """
name: preempt
topology: {levels: [kubernetes.io/hostname]}
priorityClasses: {low: 10, high: 1000}
nodeGroups:
  - {prefix: n, count: 2, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 16}, preemption: {withinQueue: LowerPriority}}
jobs:
  - {name: low, queue: research, submit: 0, priority: low, duration: 3000, pods: [{name: w, count: 2, gpu: 8}]}
  - {name: urgent, queue: research, submit: 600, priority: high, duration: 600, pods: [{name: w, count: 1, gpu: 8}]}
"""


@pytest.fixture
async def watched(tmp_path, monkeypatch):
    """The scheduler on the sandbox, and a console's controller watching beside it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    async with console_beside(PREEMPTION, tmp_path) as both:
        yield both


def job_rows(app: UsherApp) -> list[tuple[str, str]]:
    return [(r.key, r.cells[1]) for r in app.query_one("#job-table", RowTable).rows]


async def test_a_preempted_job_is_one_row_in_a_watching_console(watched) -> None:
    c, console = watched
    app = UsherApp(console, speed=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(lambda: console.synced.is_set(), pilot)
        await pilot.press("3")
        await wait_for(lambda: ("default/low", "Running") in job_rows(app), pilot)
        await c.play(until=600)  # urgent preempts low
        await wait_for(lambda: ("default/urgent", "Running") in job_rows(app), pilot)
        await wait_for(lambda: ("default/low", "Pending") in job_rows(app), pilot)
        assert [name for name, _ in job_rows(app)].count("default/low") == 1, job_rows(app)
        await c.play(until=1200)  # urgent ends; low runs again, on recreated pods
        await wait_for(lambda: ("default/low", "Running") in job_rows(app), pilot)
        rows = job_rows(app)
        assert sorted(rows) == [("default/low", "Running"), ("default/urgent", "Finished")], rows
        overview = app.model.overview(console.now)
        assert (overview.running, overview.finished) == (1, 1)
        # its details: what it asks for in pods and GPUs, and every run it had
        app.query_one("#job-table", RowTable).select_key("default/low")
        await pilot.press("enter")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "x g0" not in text and re.search(r"asks for +\d+ pods? x 8 GPUs\n", text), text
        assert "#1" in text and "#2" in text, text  # the run before the preemption, and this one


async def test_a_watching_console_logs_a_normal_bind_as_started_and_the_gang_whole(watched) -> None:
    c, console = watched
    task = asyncio.create_task(console.run())
    try:
        await asyncio.wait_for(console.synced.wait(), 10)
        await c.play(until=1200)  # low preempted by urgent, urgent done, low bound again
        for _ in range(100):
            await console.wait_idle()
            if any(e.target == "default/low" and e.action in ("started", "adopt") and e.time >= 1200 for e in console.state.audit):
                break
            await asyncio.sleep(0.05)
        again = [e for e in console.state.audit if e.target == "default/low" and e.time >= 1200]
        assert again and all(e.action == "started" for e in again), [(e.action, e.result) for e in again]
        gang = console.mirror.gangs["default/low"]
        assert gang.teardown is None, gang.teardown
        assert len(gang.job.current_run.placements) == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_pod_with_a_number_that_is_not_one_says_what_was_expected() -> None:
    """What lands in the pod's event and condition (and the console's reason) names the field
    and what it expected, never Python's "could not convert string to float"."""
    from usher.engine.backends.kube.objects import pod_view

    view = pod_view({
        "metadata": {"name": "p", "namespace": "default", "annotations": {"usher/gpu-fraction": "abc", "usher/gpus": "x,1"}},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]},
    })
    problem = view.problem or ""
    assert "could not convert" not in problem and "invalid literal" not in problem, problem
    assert "nvidia.com/gpu: 'lots' is not a whole number of GPUs" in problem, problem
    assert "usher/gpu-fraction: 'abc' is not a share of one GPU" in problem, problem
    assert "usher/gpus: 'x,1' is not a list of GPU indices" in problem, problem
