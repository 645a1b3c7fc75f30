"""Run usher's kube controller against the sandbox's fake API server, in lockstep with a scenario.

``Cluster`` starts the fake API server on loopback (over HTTPS, its CA in the kubeconfig, as
``usher sandbox`` serves it), sets the scenario's cluster up through the
API, connects a real ``KubeClient`` (from a kubeconfig file, as a user would) and runs the
``KubeController`` and the kubelet stand-in. Time is a ``ManualClock`` shared by the API server
(creation timestamps), the controller and the kubelet; ``play`` steps it from one moment of the
scenario to the next and waits at each until the cluster is quiet, so the outcome can be compared
with the direct replay's.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.engine.controller import Controller
from usher.engine.scenario import Scenario, parse_scenario
from usher.sandbox.apiserver import FakeApiServer
from usher.sandbox.serve import kubeconfig
from usher.sandbox.store import Store
from usher.sandbox.world import ManualClock, World

#: A start as the tests compare them: (job, start time, node, GPU indices)
Start = tuple[str, float, str, tuple[int, ...]]


@dataclass
class Cluster:
    scenario: Scenario
    tmp: Path
    clock: ManualClock = field(default_factory=ManualClock)
    controllers: list[KubeController] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    async def start(self, *, world_in_process: bool = False, **server_options: Any) -> None:
        """``world_in_process``: the kubelet stand-in watches and writes pod status on the
        server's store directly, as in ``usher sandbox`` (else over HTTP, as any client)."""
        server_options.setdefault("tls", True)
        self.server = FakeApiServer(Store(clock=self.clock.now), **server_options)
        await self.server.start(port=0)
        self.url = self.server.url
        self.kubeconfig = self.tmp / "kubeconfig"
        self.kubeconfig.write_text(kubeconfig(self.server))
        self.world = World(self.scenario, self.url, self.clock, server=self.server if world_in_process else None,
                           verify=self.server.verify)
        await self.world.setup()
        self.tasks.append(asyncio.create_task(self.world.kubelet()))

    async def controller(self, identity: str = "usher-0", **options: Any) -> KubeController:
        client = await KubeClient.connect(str(self.kubeconfig))
        options.setdefault("elect", False)
        options.setdefault("status_interval", 0.0)
        ctrl = KubeController(client, identity=identity, clock=self.clock.now, **options)
        self.controllers.append(ctrl)
        self.tasks.append(asyncio.create_task(ctrl.run()))
        await asyncio.wait_for(ctrl.synced.wait(), 10)
        return ctrl

    def fingerprint(self) -> tuple[int, ...]:
        """What the scheduler and the kubelet change (pods, nodes, config), not Lease renewals."""
        out = []
        for resource in ("pods", "nodes", "configmaps"):
            items = self.server.store.list(resource).objects()
            out += [len(items), max((int(o["metadata"]["resourceVersion"]) for o in items), default=0)]
        return tuple(out)

    async def settle(self, polls: int = 4) -> None:
        """Wait until no controller has work and the cluster's objects stop changing."""
        quiet, last, rounds = 0, None, 0
        while quiet < polls:
            for ctrl in self.controllers:
                await asyncio.wait_for(ctrl.wait_idle(), 20)
            await asyncio.sleep(0.02)
            rv = self.fingerprint()
            quiet = quiet + 1 if rv == last else 0
            last = rv
            rounds += 1
            if rounds > 1500:  # ~30 s of a cluster that keeps changing: a livelock, say what churns
                recent = [f"{r.method} {r.path} -> {r.status}" for r in list(self.server.requests)[-25:]]
                raise AssertionError("the cluster never settled; last requests:\n" + "\n".join(recent))

    async def play(self, until: float | None = None) -> None:
        """Step the scenario moment by moment to its end (or ``until``)."""
        await self.settle()
        while (t := self.next_time()) is not None and (until is None or t <= until):
            self.clock.t = t
            async with self.one_moment():
                await self.world.step(t)
                if self.server.controllers is not None:
                    self.server.controllers.step(t)
            await self.settle()

    @asynccontextmanager
    async def one_moment(self) -> AsyncIterator[None]:
        """Hold the controllers' scheduling while everything due at one moment reaches the API
        server, as the direct replay decides once all of a moment's changes are in. (A controller
        that cycles between the completions of one moment's pods sees a half-freed node, and a
        tie between nodes may then break the other way: a real cluster's timing, not the
        decisions this comparison is about.) Intake goes on meanwhile; the scheduling resumes at
        once after."""
        held = [c for c in self.controllers if not c.paused]
        for ctrl in held:
            ctrl.paused = True
        try:
            yield
            await self.settle()  # every change of the moment is in the controllers' mirrors
        finally:
            for ctrl in held:
                ctrl.paused = False
                ctrl.ctx.wake.set()

    def next_time(self) -> float | None:
        """The next moment the scenario or (when enabled) the sandbox's controllers have work due."""
        times = [self.world.next_time()]
        if self.server.controllers is not None:
            times.append(self.server.controllers.next_time())
        return min((t for t in times if t is not None), default=None)

    def starts(self) -> list[Start]:
        return sorted(self.world.starts)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for ctrl in self.controllers:
            await ctrl.client.aclose()
        await self.world.aclose()
        await self.server.stop()


def scenario_of(text: str) -> Scenario:
    return parse_scenario(textwrap.dedent(text), file="test.yaml")


def replay_starts(scenario: Scenario) -> list[Start]:
    """The same list from the direct replay backend."""
    ctrl = Controller(scenario)
    ctrl.run_to_end()
    st = ctrl.state
    out = []
    for job in st.jobs:
        for run in job.runs:
            for p in run.placements:
                out.append((job.name, run.start, st.nodes[p.node_id].name, tuple(p.gpus)))
    return sorted(out)


def per_job(starts: list[Start]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for job, t, node, gpus in starts:
        out.setdefault(job, Counter())[(t, node, gpus)] += 1
    return out


async def wait_for(condition, pilot, seconds: float = 30.0) -> None:
    """Pause a Textual pilot until ``condition()`` holds (a generous deadline, not a timing)."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met in time")


async def running_cluster(text: str, tmp: Path) -> Cluster:
    """A cluster with the scheduler running and the scenario's first moment played."""
    c = Cluster(scenario_of(text), tmp)
    await c.start()
    await c.controller()
    await c.world.step(0.0)
    await c.settle()
    return c


OPS_SCENARIO = """
name: ops
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 2, layout: {usher/rack: 2}, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: research, namespaceSelector: {}, quota: {gpu: 16}}
  - {name: product, namespaceSelector: {}, quota: {gpu: 8}, approval: manual}
jobs:
  - {name: train, queue: research, submit: 0, duration: 600, pods: [{name: w, count: 2, gpu: 4}]}
  - {name: nb, queue: product, submit: 0, duration: 100, pods: [{gpu: 1}]}
"""


@pytest.fixture(name="cluster")
async def ops_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The ``cluster`` fixture of the console-on-a-cluster tests: ``OPS_SCENARIO`` with the
    scheduler running (import it to use it)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = await running_cluster(OPS_SCENARIO, tmp_path)
    yield c
    await c.stop()


@asynccontextmanager
async def console_beside(text: str, tmp: Path) -> AsyncIterator[tuple[Cluster, KubeController]]:
    """The scheduler running on a scenario's sandbox, and a console's controller (not
    scheduling) to watch it, as an operator's console beside the deployed controller."""
    c = await running_cluster(text, tmp)
    client = await KubeClient.connect(str(c.kubeconfig))
    console = KubeController(client, identity="console", clock=c.clock.now, schedule=False)
    try:
        yield c, console
    finally:
        await asyncio.sleep(0)
        await client.aclose()
        await c.stop()
