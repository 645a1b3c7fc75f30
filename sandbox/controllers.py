"""The in-process stand-ins for a cluster's own controllers, run beside the fake API server.

``Controllers(store)`` owns a kubelet for every node (:mod:`usher.sandbox.kubelet`, with the
taint manager), the node lifecycle controller and pod garbage collector
(:mod:`usher.sandbox.nodelifecycle`), the default scheduler (:mod:`usher.sandbox.default_scheduler`), the workload
controllers (:mod:`usher.sandbox.workloads`: Job, ReplicaSet, Deployment, DaemonSet), with ``storage``
(the default) the PV controller (:mod:`usher.sandbox.pv_controller`), the ephemeral volume
controller (:mod:`usher.sandbox.pod_claims`) and the CSI provisioner (:mod:`usher.sandbox.provisioner`), the
resourceclaim controller (:mod:`usher.sandbox.dra_controller`), with ``gpu_driver`` (the default) NVIDIA's
DRA driver stand-in (:mod:`usher.sandbox.gpu_driver`), and, with
``operators`` (the default), a StatefulSet controller and the stand-ins for the JobSet,
Kubeflow (PyTorchJob, TFJob, MPIJob), KubeRay (RayCluster, RayJob) and LeaderWorkerSet operators
(:mod:`usher.sandbox.operators`), whose CRDs (:mod:`usher.sandbox.crds`) are created in the
store at once, as a cluster with the operators installed serves them. They work
on the :class:`~usher.sandbox.store.Store` directly, as the real ones work on the API: a store
listener marks what changed (synchronously, nothing else), and the work is done on the server's
event loop, after the write that caused it, until nothing is left to do. Each controller is a
:class:`~usher.sandbox.parts.Part` that sees this manager only through the
:class:`~usher.sandbox.parts.Host` protocol, so the parts never import this module back.

Time is the store's clock. Timed work (a pod's run ending, a grace period, a toleration's
``tolerationSeconds``) is kept as timers: :meth:`Controllers.next_time` says when the next is
due and :meth:`Controllers.step` does everything due by a moment, so a harness with a
``ManualClock`` can step the cluster deterministically; the background task started by
:meth:`start` also fires timers once the clock has passed them.

Enable with ``FakeApiServer(..., controllers=True)`` (they start and stop with the server) or
own one: ``c = Controllers(store); await c.start(); ...; await c.stop()``.

Pods labelled ``sandbox.usher/job`` (a scenario's pods, which :class:`~usher.sandbox.world.World`
runs and requeues) are left to the World's kubelet unless ``skip`` says otherwise.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Hashable
from typing import Any

from .crds import install as install_crds
from .default_scheduler import DefaultScheduler
from .dra_controller import ResourceClaimController
from .gpu_driver import GpuDriver
from .gpu_driver import install as install_gpu_driver
from .kubelet import Kubelet
from .nodelifecycle import NodeLifecycle
from .operators import operator_parts
from .parts import Part
from .pod_claims import EphemeralVolumeController
from .provisioner import Provisioner
from .provisioner import install as install_storage
from .pv_controller import PersistentVolumeController
from .store import Change, Store
from .workloads import (
    DaemonSetController,
    DeploymentController,
    JobController,
    ReplicaSetController,
)

log = logging.getLogger("usher.sandbox.controllers")

JsonObject = dict[str, Any]

SCENARIO_LABEL = "sandbox.usher/job"


def scenario_pod(pod: JsonObject) -> bool:
    """A pod a :class:`~usher.sandbox.world.World` runs itself."""
    return SCENARIO_LABEL in (pod["metadata"].get("labels") or {})


class Controllers:
    """The controller stand-ins, their timers and their event-loop task."""

    def __init__(
        self,
        store: Store,
        *,
        skip: Callable[[JsonObject], bool] | None = scenario_pod,
        kubelet: bool = True,
        scheduler: bool = True,
        workloads: bool = True,
        operators: bool = True,
        storage: bool = True,
        gpu_driver: bool = True,
    ) -> None:
        self.store = store
        self.skip = skip or (lambda pod: False)
        self._timers: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.active = False
        self.errors: list[BaseException] = []
        self.kubelet = Kubelet(self) if kubelet else None
        self.lifecycle = NodeLifecycle(self)
        """The node lifecycle controller and the pod garbage collector (:mod:`usher.sandbox.nodelifecycle`)."""
        self.scheduler = DefaultScheduler(self) if scheduler else None
        self.jobs = JobController(self) if workloads else None
        self.replicasets = ReplicaSetController(self) if workloads else None
        self.deployments = DeploymentController(self) if workloads else None
        self.daemonsets = DaemonSetController(self) if workloads else None
        self.volumes = PersistentVolumeController(self) if storage else None
        """The PV controller with pvc- and pv-protection (:mod:`usher.sandbox.pv_controller`)."""
        self.ephemeral = EphemeralVolumeController(self) if storage else None
        self.provisioner = Provisioner(self) if storage else None
        """The sandbox CSI drivers' external provisioner (:mod:`usher.sandbox.provisioner`)."""
        self.claims = ResourceClaimController(self)
        """The resourceclaim controller (:mod:`usher.sandbox.dra_controller`)."""
        self.gpu_driver = GpuDriver(self) if gpu_driver else None
        """NVIDIA's DRA driver stand-in: its DeviceClass and a slice per GPU node (:mod:`usher.sandbox.gpu_driver`)."""
        self.operators: list[Part] = operator_parts(self) if operators else []
        """The StatefulSet controller and the operator stand-ins (:mod:`usher.sandbox.operators`)."""
        self.parts = [
            p for p in (self.lifecycle, self.deployments, self.replicasets, self.daemonsets, *self.operators, self.jobs,
                        self.ephemeral, self.volumes, self.provisioner, self.claims, self.gpu_driver, self.scheduler, self.kubelet)
            if p is not None
        ]
        if operators:
            install_crds(store)
        if storage:
            install_storage(store)
        if gpu_driver:
            install_gpu_driver(store)
        store.add_listener(self._on_change)

    # ------------------------------------------------------------------ clock and timers

    def now(self) -> float:
        return self.store.clock()

    def at(self, when: float, key: Hashable, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the clock reaches ``when`` (replacing the timer of the same ``key``)."""
        self._due[key] = (when, fn)
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, key))
        self._wake.set()

    def cancel(self, key: Hashable) -> None:
        self._due.pop(key, None)

    def next_time(self) -> float | None:
        """When the next timer is due (None: none)."""
        while self._timers:
            when, _, key = self._timers[0]
            current = self._due.get(key)
            if current is None or current[0] != when:
                heapq.heappop(self._timers)
                continue
            return when
        return None

    # ------------------------------------------------------------------ work

    def _on_change(self, change: Change) -> None:
        if not self.active:
            return
        for part in self.parts:
            part.on_change(change)
        self._wake.set()

    def step(self, now: float | None = None) -> None:
        """Do everything due by ``now`` (default: the clock) and all pending work, synchronously."""
        if not self.active:
            return
        now = self.now() if now is None else now
        for _ in range(1000):
            fired = False
            while (t := self.next_time()) is not None and t <= now:
                _, _, key = heapq.heappop(self._timers)
                _, fn = self._due.pop(key)
                self.guard(fn)
                fired = True
            busy = False
            for part in self.parts:
                if part.dirty():
                    busy = True
                    self.guard(part.reconcile)
            if not busy and not fired:
                return
        log.warning("sandbox controllers: still busy after 1000 rounds")

    def guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # one broken object must not stop the cluster
            log.exception("sandbox controller failed")
            self.errors.append(exc)

    async def start(self) -> None:
        if self.active:
            return
        self.active = True
        for part in self.parts:
            part.resync()
        self._task = asyncio.create_task(self._run(), name="sandbox-controllers")

    async def stop(self) -> None:
        self.active = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while self.active:
            self._wake.clear()
            self.step()
            t = self.next_time()
            # the clock may be a ManualClock a test moves: look again soon while timers wait
            wait = 1.0 if t is None else max(0.005, min(0.05, t - self.now()))
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass
            await asyncio.sleep(0)
