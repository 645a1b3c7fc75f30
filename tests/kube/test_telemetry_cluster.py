"""`usher --telemetry URL` on a cluster: the controller's store fills from a scraped exporter."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from harness import Cluster, scenario_of

from usher.cluster import start_telemetry
from usher.engine.backends.http_server import HttpServer, Request, Response
from usher.engine.backends.telemetry.poller import parse_source
from usher.engine.telemetry import Metric

DCGM_PAGE = (Path(__file__).parents[1] / "telemetry" / "dcgm-exporter.txt").read_text()

SCENARIO = """
name: telemetry
nodes:
  - {name: gpu-node-01, gpus: 2, gpuModel: H100}
queues: [{name: default}]
"""


async def test_the_console_on_a_cluster_sees_the_exporters_figures_for_its_nodes(tmp_path: Path):
    cluster = Cluster(scenario_of(SCENARIO), tmp_path)
    await cluster.start()

    async def exporter(request: Request) -> Response:
        return Response(200, {"content-type": "text/plain; version=0.0.4"}, DCGM_PAGE.encode())

    server = HttpServer(exporter)
    port = await server.start()
    try:
        ctrl = await cluster.controller(schedule=False)
        args = argparse.Namespace(telemetry=[parse_source(f"http://127.0.0.1:{port}/metrics")], telemetry_interval=30.0)
        task = start_telemetry(args, ctrl)
        assert task is not None
        try:
            async with asyncio.timeout(10):
                while ctrl.telemetry.latest("gpu-node-01", 0) is None:
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        now = cluster.clock.now()
        assert "gpu-node-01" in ctrl.mirror.nodes
        assert ctrl.telemetry.value("gpu-node-01", 0, Metric.UTILIZATION, now) == 0.87
        assert ctrl.telemetry.value("gpu-node-01", 1, Metric.UTILIZATION, now) == 0.0
        assert ctrl.telemetry.stale_after >= 4 * 30.0, "four missed reads before a GPU shows stale"
    finally:
        await server.stop()
        await cluster.stop()

