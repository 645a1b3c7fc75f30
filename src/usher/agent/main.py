"""The ``usher agent`` command: read once and print (``--once``), or run as the node's agent.

``--once`` opens NVML without watching XIDs, takes one reading, prints it (a table, or with
``--json`` one JSON document) and exits 0; without a driver or a GPU it exits 3 with one line
saying which (``NoGpuError``, turned into the exit code by ``usher.cli``).

Running, the agent reads the GPUs every ``--interval`` seconds (in a worker thread: NVML calls
block), serves ``/metrics``, ``/healthz`` and ``/readyz`` (ready after the first reading) on
``--metrics-port`` through the kube backend's ``HealthServer``, and keeps its Node's annotations
current (``NodePublisher``) unless ``--no-publish``, after taking back the critical XIDs its Node
kept from before it started (``NodePublisher.restore``). It stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time

from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.health import HealthServer
from usher.engine.backends.nvml.reader import GpuReading, NodeReading, NvmlReader

from usher.signals import cancel_on_signals

from .metrics import AgentMetrics
from .publish import NodePublisher, boot_id, node_annotations

log = logging.getLogger("usher.agent")

DEFAULT_PORT = 9401
"""The agent's /metrics port (the DCGM exporter's is 9400)."""
DEFAULT_INTERVAL = 10.0
NODE_ENV = "NODE_NAME"
"""Where the DaemonSet passes the node's name (the downward API's ``spec.nodeName``)."""
NA = "N/A"
GIB = 2**30


class AgentUsageError(Exception):
    """The agent was started in a way that cannot work (exit 2)."""


def node_name(args: argparse.Namespace) -> str | None:
    return args.node or os.environ.get(NODE_ENV) or None


def run_once(args: argparse.Namespace) -> int:
    """Print one reading and return the exit code; raises ``NoGpuError`` without a driver or GPU."""
    with NvmlReader(watch_xids=False) as reader:
        reading = reader.read()
    node = node_name(args)
    if args.json:
        doc = {"node": node, **reading.as_json(), "annotations": node_annotations(reading)}
        print(json.dumps(doc, indent=2))
    else:
        print(render(reading, node))
    return 0


def _figure(value: float | int | None, fmt: str) -> str:
    return NA if value is None else fmt.format(value)


def _memory(g: GpuReading) -> str:
    if g.memory_total is None:
        return NA
    used = NA if g.memory_used is None else f"{g.memory_used / GIB:.1f}"
    return f"{used}/{g.memory_total / GIB:.1f} GiB"


def render(reading: NodeReading, node: str | None) -> str:
    """A reading as a table for a person at the node's shell."""
    islands = NA if reading.islands is None else ";".join(",".join(map(str, i)) for i in reading.islands)
    lines = [
        f"node {node or '(no --node / $NODE_NAME)'}: driver {reading.driver or NA}, {len(reading.gpus)} GPUs, "
        f"NVLink islands {islands} (from {reading.layout_source})",
        f"{'GPU':<4}{'model':<28}{'util':>6}{'memory':>20}{'temp':>7}{'power':>9}  health",
    ]
    for g in reading.gpus:
        health = "ok" if g.healthy else "UNHEALTHY: " + "; ".join(g.problems)
        throttle = f" (throttled: {', '.join(g.throttle)})" if g.throttle else ""
        lines.append(
            f"{g.index:<4}{(g.name or NA)[:27]:<28}{_figure(g.utilization, '{:.0f}%'):>6}{_memory(g):>20}"
            f"{_figure(g.temperature, '{:.0f}C'):>7}{_figure(g.power, '{:.0f}W'):>9}  {health}{throttle}"
        )
    return "\n".join(lines)


class NodeAgent:
    """One node's agent: reads the GPUs, serves them, keeps the Node's annotations current."""

    def __init__(self, reader: NvmlReader, metrics: AgentMetrics, publisher: NodePublisher | None, interval: float) -> None:
        self.reader = reader
        self.metrics = metrics
        self.publisher = publisher
        self.interval = interval
        self.health = HealthServer(metrics)
        self.health.set_not_ready("the GPUs have not been read yet")

    async def start(self, host: str, port: int) -> int:
        """Serve /metrics, /healthz and /readyz; returns the port."""
        return await self.health.start(host, port)

    async def read_once(self) -> NodeReading:
        """Read the GPUs (in a worker thread), show the reading on /metrics, publish it; the
        XIDs kept on the Node are taken back first, before the first reading that is published."""
        if self.publisher is not None:
            await self.publisher.restore(self.reader)
        reading = await asyncio.to_thread(self.reader.read)
        self.metrics.update(reading, time.time())
        self.health.set_ready()
        if self.publisher is not None:
            await self.publisher.publish(reading)
        return reading

    async def run(self) -> None:
        """Read every ``interval`` seconds until cancelled."""
        while True:
            await self.read_once()
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        await self.health.stop()


async def run_agent(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; raises ``NoGpuError`` without a driver or GPU."""
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.debug else logging.WARNING)
    node = node_name(args)
    if node is None and not args.no_publish:
        raise AgentUsageError(f"no node to publish to: pass --node or set ${NODE_ENV} (the DaemonSet sets it), or --no-publish")
    reader = NvmlReader()
    await asyncio.to_thread(reader.open)
    client: KubeClient | None = None
    agent: NodeAgent | None = None
    try:
        publisher = None
        if node is not None and not args.no_publish:
            client = await KubeClient.connect(args.kubeconfig, args.context)
            publisher = NodePublisher(client, node, boot_id())
        agent = NodeAgent(reader, AgentMetrics(node or os.uname().nodename), publisher, args.interval)
        port = await agent.start(args.metrics_host, args.metrics_port)
        log.info("usher agent on %s: /metrics on :%d, reading every %gs%s", agent.metrics.node, port, args.interval,
                 "" if publisher else " (not publishing to the Node)")
        cancel_on_signals()
        try:
            await agent.run()
        except asyncio.CancelledError:
            log.info("stopping")
    finally:
        if agent is not None:
            await agent.stop()
        if client is not None:
            await client.aclose()
        await asyncio.to_thread(reader.close)
    return 0
