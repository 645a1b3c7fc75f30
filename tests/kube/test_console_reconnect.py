"""The console on a cluster whose API server goes away and comes back on a wiped store (a sandbox
restarted): the header says ``reconnecting (Ns)``, then ``stale since …``, the views are dimmed;
once the server is back the informers list again, the header says ``live``, the old world's job
is over and a job submitted while the console was cut off is shown (and scheduled)."""

from __future__ import annotations

import asyncio

import pytest
from harness import running_cluster, wait_for
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.enums import JobState
from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.objects import JOB_NAMESPACE, pod_objects
from usher.sandbox.store import Store

SCENARIO = """
name: outage
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 2, layout: {usher/rack: 2}, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 16}}
jobs:
  - {name: train, queue: research, submit: 0, duration: 600, pods: [{name: w, count: 2, gpu: 4}]}
  - {name: late, queue: research, submit: 5000, duration: 100, pods: [{gpu: 1}]}
"""


@pytest.fixture
async def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = await running_cluster(SCENARIO, tmp_path)
    yield c
    await c.stop()


async def test_console_shows_a_lost_api_server_and_resyncs_when_it_is_back(cluster) -> None:
    c = cluster
    port = int(c.url.rsplit(":", 1)[1])
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)
    late = next(j for j in c.scenario.all_jobs() if j.name == "late")

    def bar() -> str:
        return app.bar_text().plain

    def dimmed() -> bool:
        return app.query_one("#views").has_class("-stale")

    def jobs() -> list[str]:
        return [r.key.rsplit("/", 1)[-1] for r in app.query_one("#job-table", RowTable).rows]

    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set(), pilot)
            await pilot.press("3")
            await wait_for(lambda: "train" in jobs(), pilot)
            assert " live " in f"{bar()} " and not dimmed()

            await c.server.stop()
            await wait_for(lambda: "reconnecting (" in bar() and dimmed(), pilot)
            assert " live " not in f"{bar()} "
            for informer in ctrl.informers:  # as if the outage had gone on for two minutes
                if informer.disconnected_since is not None:
                    informer.disconnected_since -= 120.0
            await wait_for(lambda: "stale since " in bar(), pilot)
            await pilot.pause(0.6)
            assert dimmed() and "stale since " in bar()

            # the API server comes back with an empty store; the cluster is set up again and a
            # job is submitted before the console has reconnected
            server = FakeApiServer(Store(clock=c.clock.now), tls=c.server.ca)  # the cluster's CA, as before
            server.too_large_wait = 0.1
            await server.start(port=port)
            c.server = server
            await c.world.setup()
            for pod in pod_objects(c.scenario, late):
                server.store.create("pods", pod, JOB_NAMESPACE)

            await wait_for(lambda: "late" in jobs(), pilot)
            await wait_for(lambda: not dimmed() and "reconnecting" not in bar() and "stale" not in bar(), pilot)
            assert " live " in f"{bar()} "
            # the old world's pods are gone: its job is over, not shown running any more
            await wait_for(lambda: sorted(ctrl.informers[1].cache) == ["default/late-pod-0"], pilot)
            await wait_for(lambda: all(j.state == JobState.FINISHED for j in ctrl.state.jobs if j.name.endswith("/train")), pilot)
            # and the scheduler, which was cut off too, places the job submitted meanwhile
            await wait_for(
                lambda: all(
                    p["spec"].get("nodeName")
                    for p in server.store.list("pods", JOB_NAMESPACE).objects()
                    if p["metadata"]["name"].startswith("late")
                ),
                pilot,
            )
    finally:
        await asyncio.sleep(0)
        await client.aclose()
