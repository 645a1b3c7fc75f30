"""Key bursts against a cluster (the sandbox's API server): the console attached to it, as
``usher`` runs it, handles commands, pastes and an action with its dialog typed in one burst each
as the same keys typed slowly, and stays alive and consistent. (The replay: tests/console/
test_keybursts.py, whose helpers these are.)"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "console"))

from bursts import BurstApp, check, paste, parse, send, settle  # noqa: E402
from harness import ops_cluster, wait_for  # noqa: E402,F401 (ops_cluster is the cluster fixture)
from usher.console.app import View  # noqa: E402
from usher.engine.backends.kube.client import KubeClient  # noqa: E402
from usher.engine.backends.kube.controller import KubeController  # noqa: E402


async def test_bursts_on_a_cluster_act_as_typed_slowly(cluster) -> None:
    c = cluster
    client = await KubeClient.connect(str(c.kubeconfig))
    ctrl = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    app = BurstApp(ctrl, speed=None)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(lambda: ctrl.synced.is_set(), pilot)
            send(app, parse(":queues\r"))  # the burst: it quit the console
            await settle(pilot, app)
            assert app.view == View.QUEUES and app.quit_keys == 0
            send(app, parse(":nodes\r/n-01\r", "c", "y"))
            await settle(pilot, app)
            await wait_for(lambda: c.server.store.get("nodes", "n-01")["spec"].get("unschedulable") is True, pilot)
            send(app, parse(paste(":jobs\n/train\n")))
            await settle(pilot, app)
            assert app.view == View.JOBS and app.filters[View.JOBS] == "train"
            send(app, parse(paste("drain"), ":events\r"))
            await settle(pilot, app)
            assert app.view == View.EVENTS
            assert c.server.store.get("nodes", "n-02")["spec"].get("unschedulable") is not True
            result = check(app)
            assert result, result.problems
    finally:
        await asyncio.sleep(0)
        await client.aclose()
