"""``y`` and ``l`` on a cluster (the sandbox's API server, usher scheduling): the selected job's
pods as YAML, read from the API, and their logs from ``pods/{name}/log``, a pod that has not
started saying why in the API server's words."""

from __future__ import annotations

from harness import ops_cluster, wait_for  # noqa: F401 (ops_cluster is the cluster fixture)
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController


def page(app: UsherApp) -> str:
    return str(app.screen.query_one("#page-text").render())


async def test_y_shows_the_pods_yaml_and_l_their_logs_from_the_api(cluster) -> None:
    c = cluster
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)
    pods = {p["metadata"]["name"]: p for p in c.server.store.list("pods", "default").objects()}
    train = sorted(n for n in pods if n.startswith("train-"))
    nb = next(n for n in pods if n.startswith("nb-"))
    assert len(train) == 2 and all(pods[n]["spec"].get("nodeName") for n in train)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set(), pilot)
            await pilot.press("3")
            table = app.query_one("#job-table", RowTable)
            await wait_for(lambda: any(r.key.endswith("train") for r in table.rows), pilot)
            table.select_key(next(r.key for r in table.rows if r.key.endswith("train")))
            await pilot.pause()

            reads = c.server.count("GET", f"/api/v1/namespaces/default/pods/{train[0]}")
            await pilot.press("y")
            await wait_for(lambda: type(app.screen).__name__ == "TextScreen", pilot)
            text = page(app)
            assert c.server.count("GET", f"/api/v1/namespaces/default/pods/{train[0]}") > reads  # from the API, now
            for name in train:
                assert f"name: {name}" in text
                assert f"nodeName: {pods[name]['spec']['nodeName']}" in text
            assert "kind: Pod" in text and "usher/gpus:" in text and "managedFields" not in text
            await pilot.press("escape")

            await pilot.press("l")
            await wait_for(lambda: type(app.screen).__name__ == "TextScreen", pilot)
            text = page(app)
            assert c.server.count("GET", "/api/v1/namespaces/default/pods/*/log", 200) == 2
            for name in train:
                node = pods[name]["spec"]["nodeName"]
                gpus = c.server.store.get("pods", name, "default")["metadata"]["annotations"]["usher/gpus"]
                assert f"── {name} " in text
                assert f"usher-sandbox: running on node {node} with 4 GPUs ({gpus})" in text
            await pilot.press("escape")

            # a pod not started: the API server's refusal (400), in its words
            table.select_key(next(r.key for r in table.rows if r.key.endswith("nb")))
            await pilot.pause()
            await pilot.press("l")
            await wait_for(lambda: type(app.screen).__name__ == "TextScreen", pilot)
            assert f"400 BadRequest: pod {nb} does not have a host assigned" in page(app)
            await pilot.press("escape")

            # RBAC that forbids reading logs: said, not a crash
            c.server.forbid("get", "pods", "log")
            await pilot.press("l")
            await wait_for(lambda: type(app.screen).__name__ == "TextScreen", pilot)
            assert "403 Forbidden" in page(app) and "pods/log" in page(app)
            await pilot.press("escape")
            assert app.is_running and type(app.screen).__name__ == "Screen"
    finally:
        await client.aclose()


async def test_y_for_a_job_whose_pods_are_gone_says_so(cluster) -> None:
    c = cluster
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = UsherApp(ctrl, speed=None)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set(), pilot)
            await pilot.press("3")
            table = app.query_one("#job-table", RowTable)
            await wait_for(lambda: any(r.key.endswith("train") for r in table.rows), pilot)
            table.select_key(next(r.key for r in table.rows if r.key.endswith("train")))
            await pilot.pause()
            c.server.inject("error", method="GET", path="/api/v1/namespaces/default/pods/train-*", status=404, times=2)
            await pilot.press("y")
            await wait_for(lambda: "YAML of" in str(app.status_text), pilot)
            assert "✗ YAML of" in str(app.status_text) and "are gone" in str(app.status_text)
            assert type(app.screen).__name__ == "Screen"
    finally:
        await client.aclose()
