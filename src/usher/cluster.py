"""``usher`` against a cluster: the headless controller (``--no-ui``) and the attached console.

Both connect with the current kubeconfig context (or ``--kubeconfig`` / ``--context``, or the
in-cluster service account) and run the same ``KubeController``. Headless, it also serves
``/metrics``, ``/healthz`` and ``/readyz`` and stops cleanly on SIGTERM, giving up its Lease so
the standby replica takes over at once. With ``--telemetry URL`` (repeatable) a
``TelemetryPoller`` reads those GPU telemetry sources into the controller's ``telemetry`` store
every ``--telemetry-interval`` seconds, for the console's heatmap and sparklines.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket

from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.backends.kube.health import HealthServer
from usher.engine.backends.kube.metrics import ControllerMetrics
from usher.engine.backends.telemetry.poller import TelemetryPoller
from usher.signals import cancel_on_signals

log = logging.getLogger("usher")


def identity() -> str:
    """The leader-election identity: the pod's name in a cluster, else host and process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


async def _connect(args: argparse.Namespace) -> KubeClient:
    return await KubeClient.connect(args.kubeconfig, args.context)


STALE_READS = 4
"""A GPU whose source has not answered for this many intervals shows as stale."""


def start_telemetry(args: argparse.Namespace, ctrl: KubeController) -> asyncio.Task[None] | None:
    """Poll the ``--telemetry`` sources into ``ctrl.telemetry``; None when there are none."""
    if not args.telemetry:
        return None
    interval = args.telemetry_interval
    ctrl.telemetry.stale_after = max(ctrl.telemetry.stale_after, STALE_READS * interval)
    poller = TelemetryPoller(args.telemetry, ctrl.telemetry, clock=ctrl.clock, interval=interval)
    log.info("telemetry from %s every %gs", ", ".join(s.name for s in poller.sources), interval)
    task = asyncio.create_task(poller.run())
    task.add_done_callback(_poller_ended)
    return task


def _poller_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("telemetry polling stopped: %r", task.exception(), exc_info=task.exception())


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class ServeError(Exception):
    """usher cannot serve what it was asked to (its metrics port is taken); ``str`` is the one line to print."""


async def _listen(health: HealthServer, host: str, port: int) -> int:
    try:
        return await health.start(host, port)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            why = "address already in use (another usher --no-ui? choose another with --metrics-port)"
        raise ServeError(f"--metrics-port {port}: cannot listen on {host}:{port}: {why}") from exc


async def run_headless(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.debug else logging.WARNING)  # a line per request is noise
    client = await _connect(args)
    try:
        return await _serve(args, client)
    finally:
        await client.aclose()


async def _serve(args: argparse.Namespace, client: KubeClient) -> int:
    """The controller with its health server, until cancelled; the caller closes ``client``."""
    metrics = ControllerMetrics()
    health = HealthServer(metrics)
    health.set_not_ready("listing nodes and pods")
    port = await _listen(health, args.metrics_host, args.metrics_port)
    ctrl = KubeController(
        client, identity=identity(), policy=args.policy, metrics=metrics, schedule=not args.readonly, readonly=args.readonly,
        health=health,
    )
    log.info("usher %s against %s; metrics on :%d", ctrl.identity, client.host, port)
    cancel_on_signals()
    runner = asyncio.create_task(ctrl.run())
    telemetry = start_telemetry(args, ctrl)

    async def mark_ready() -> None:
        await ctrl.synced.wait()
        health.set_ready()

    ready = asyncio.create_task(mark_ready())
    try:
        await runner
    except asyncio.CancelledError:
        log.info("stopping")
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    finally:
        ready.cancel()
        await _stop(telemetry)
        await health.stop()
    return 0


def run_console_on_cluster(args: argparse.Namespace) -> int:
    """The console attached to a cluster (a read-only controller when ``--readonly``)."""
    from usher.console.app import UsherApp

    async def main() -> int:
        client = await _connect(args)
        try:
            ctrl = KubeController(client, identity=identity(), policy=args.policy, schedule=False, readonly=args.readonly)
            app = UsherApp(ctrl, speed=None, readonly=args.readonly, theme=args.theme, keymap=args.keymap)
            telemetry = start_telemetry(args, ctrl)
            try:
                await app.run_async()
            finally:
                await _stop(telemetry)
        finally:
            await client.aclose()
        return 0

    return asyncio.run(main())
