"""A scenario played against an API server: the cluster's setup, its timeline, and a kubelet.

``World`` talks to the API server over HTTP like any other client (it is the part of a real
cluster that is not usher: the people submitting jobs, the operators of the scenario's events,
the kubelets and the Job controller). Given the server itself (``server``, as ``usher sandbox``
runs both in one process), the kubelet stand-in watches the server's store (the same watch
events, resourceVersions and expiry as its HTTP watch) and writes pod status through
:meth:`FakeApiServer.patch_status <usher.sandbox.apiserver.FakeApiServer.patch_status>` (the
handler's validation and store commit), without a round trip over loopback: that round trip was
most of the sandbox's time when usher binds thousands of pods, each followed by a status write.

- ``setup`` creates the namespaces, the scenario's Nodes and the queues ConfigMap;
- submissions create each job's pods at the job's ``submit`` time; events patch nodes, annotate
  pods, evict, or edit the ConfigMap;
- the kubelet stand-in moves a bound pod to Running and, ``usher/duration`` later, to Succeeded;
- a pod evicted or lost with its node is created again (as a Job controller would), with the work
  its checkpoints saved taken off its duration, so the gang comes back to its queue.

Time is a ``SimClock``: scenario seconds. ``WallClock`` runs them at a speed against the wall;
``ManualClock`` is advanced by a test harness that steps the world moment by moment
(``next_time`` / ``step``), which is how a replay through the API is made to match the direct
replay exactly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from usher.engine.backends.kube.decisions import decide, format_decisions, parse_decisions
from usher.engine.backends.kube.objects import LIMIT_FIELDS, edit_queue_limits
from usher.engine.enums import Action
from usher.engine.scenario import EventSpec, JobSpec, Scenario
from usher.engine.scenario.quantity import parse_duration

from .kinds import Resource
from .objects import (
    JOB_LABEL,
    JOB_NAMESPACE,
    PodPhase,
    node_conditions,
    node_object,
    pod_objects,
    priority_class_objects,
    decisions_configmap,
    queue_configmap,
    seconds,
    unreachable_conditions,
)
from .store import ApiError, rfc3339
from .usher_names import (
    DECISIONS_CONFIG_KEY,
    DECISIONS_CONFIGMAP,
    QUEUES_CONFIG_KEY,
    QUEUES_CONFIGMAP,
    SCHEDULER_NAME,
    USHER_NAMESPACE,
    Annotation,
)

if TYPE_CHECKING:
    from .apiserver import FakeApiServer

log = logging.getLogger("usher.sandbox")


class SimClock(Protocol):
    def now(self) -> float: ...


class ManualClock:
    """Scenario time that moves only when told to (tests step it)."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t


class WallClock:
    """Scenario time running ``speed`` times faster than the wall from now."""

    def __init__(self, speed: float = 1.0) -> None:
        self.speed = speed
        self.started = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self.started) * self.speed


@dataclass(slots=True)
class Running:
    """A pod the kubelet stand-in is running: when it started and when it will succeed."""

    start: float
    end: float | None
    uid: str


@dataclass(order=True, slots=True)
class _Due:
    at: float
    order: int
    seq: int
    what: Any = field(compare=False)


FINISH, EVENT, SUBMIT = 0, 1, 2


class World:
    def __init__(
        self,
        scenario: Scenario,
        base_url: str,
        clock: SimClock,
        time_scale: float = 1.0,
        server: FakeApiServer | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``time_scale`` converts scenario seconds to the seconds written on pods (1/speed);
        ``server``: the API server at ``base_url`` when it runs in this process, for the kubelet
        stand-in's status writes (everything else still goes over HTTP); ``verify``: how an
        HTTPS server's certificate is checked (``FakeApiServer.verify`` trusts the sandbox's CA)."""
        self.scenario = scenario
        self.server = server
        self.clock = clock
        self.scale = time_scale
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30.0, headers={"User-Agent": "usher-sandbox"}, verify=verify)
        self.jobs = {j.name: j for j in scenario.all_jobs()}
        self.running: dict[str, Running] = {}
        #: (end, seq, name, run) for each pod started with an end, soonest first: ``next_time``
        #: reads the soonest without a scan of every running pod; entries of pods no longer in
        #: ``running`` (or in it as another start) are dropped when they reach the top
        self._ends: list[tuple[float, int, str, Running]] = []
        self._end_seq = itertools.count()
        #: the container names of each pod the World started (for its status when it ends)
        self.containers: dict[str, list[str]] = {}
        self.finished: set[str] = set()
        #: the scenario job and the node of every pod seen
        self.pod_job: dict[str, str] = {}
        self.pod_node: dict[str, str] = {}
        #: every pod start: (job, scenario time, node, GPU indices from ``usher/gpus``)
        self.starts: list[tuple[str, float, str, tuple[int, ...]]] = []
        self._timeline: list[_Due] = []
        self._seq = 0
        for job in scenario.all_jobs():
            self._push(job.submit, SUBMIT, job)
        for ev in scenario.events:
            self._push(ev.at, EVENT, ev)
        self._changed = asyncio.Event()

    def _push(self, at: float, order: int, what: Any) -> None:
        self._seq += 1
        heapq.heappush(self._timeline, _Due(at, order, self._seq, what))

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- plumbing -------------------------------------------------------------------------

    async def _req(self, method: str, path: str, body: Any = None, content_type: str = "application/json", ok: tuple[int, ...] = ()) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        for attempt in range(10):
            try:
                r = await self.http.request(method, path, content=json.dumps(body) if body is not None else None, headers=headers)
            except httpx.TransportError:
                await asyncio.sleep(0.05 * (attempt + 1))
                continue
            if r.status_code < 300 or r.status_code in ok:
                return r.json() if r.content else {}
            if r.status_code >= 500 or r.status_code == 429:
                await asyncio.sleep(0.05 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:200]}")
        raise RuntimeError(f"{method} {path}: the API server kept failing")

    def _pod_path(self, name: str, sub: str = "") -> str:
        return f"/api/v1/namespaces/{JOB_NAMESPACE}/pods/{name}" + (f"/{sub}" if sub else "")

    # -- setup ----------------------------------------------------------------------------

    async def setup(self) -> None:
        for ns in (USHER_NAMESPACE, JOB_NAMESPACE):
            await self._req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ok=(409,))
        for spec in self.scenario.all_nodes():
            await self._req("POST", "/api/v1/nodes", node_object(spec), ok=(409,))
        for pc in priority_class_objects(self.scenario):
            await self._req("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", pc, ok=(409,))
        await self._req("POST", f"/api/v1/namespaces/{USHER_NAMESPACE}/configmaps", queue_configmap(self.scenario), ok=(409,))
        await self._req("POST", f"/api/v1/namespaces/{USHER_NAMESPACE}/configmaps", decisions_configmap(), ok=(409,))

    # -- the timeline ---------------------------------------------------------------------

    def next_time(self) -> float | None:
        """When the next submission, event or completion is due (None: nothing left)."""
        times = []
        if self._timeline:
            times.append(self._timeline[0].at)
        ends = self._ends
        while ends and self.running.get(ends[0][2]) is not ends[0][3]:
            heapq.heappop(ends)
        if ends:
            times.append(ends[0][0])
        return min(times) if times else None

    async def step(self, now: float) -> None:
        """Everything due by ``now``: completions first, then events, then submissions."""
        for name, run in sorted(self.running.items(), key=lambda kv: (kv[1].end or 0, kv[0])):
            if run.end is not None and run.end <= now:
                await self._complete(name, run)
        while self._timeline and self._timeline[0].at <= now:
            due = heapq.heappop(self._timeline)
            if due.order == EVENT:
                await self._event(due.what)
            else:
                await self._submit(due.what)

    async def run(self) -> None:
        """Play the scenario against the wall clock until cancelled; the kubelet runs beside."""
        kubelet = asyncio.create_task(self.kubelet())
        try:
            while True:
                t = self.next_time()
                now = self.clock.now()
                if t is not None and t <= now:
                    await self.step(now)
                    continue
                wait = 1.0 if t is None else min(1.0, (t - now) * self.scale)
                self._changed.clear()
                try:
                    async with asyncio.timeout(max(wait, 0.005)):  # not wait_for: it can eat a cancel on 3.11
                        await self._changed.wait()
                except TimeoutError:
                    pass
        finally:
            kubelet.cancel()
            await asyncio.gather(kubelet, return_exceptions=True)

    async def _submit(self, job: JobSpec, duration: float | None = None) -> None:
        for pod in pod_objects(self.scenario, job, duration=duration, time_scale=self.scale):
            await self._req("POST", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods", pod, ok=(409,))

    async def _complete(self, name: str, run: Running) -> None:
        del self.running[name]
        self.finished.add(name)
        await self._set_phase(name, PodPhase.SUCCEEDED)

    async def _set_phase(self, name: str, phase: PodPhase, containers: list[dict[str, Any]] | None = None) -> None:
        """The kubelet's status update: a strategic merge patch, so the conditions it does not
        own (PodScheduled, usher's) stay, as they do on a cluster."""
        now = rfc3339(time.time())
        running = phase == PodPhase.RUNNING
        status: dict[str, Any] = {"phase": str(phase)}
        ready = "True" if running else "False"
        reason = {} if running else {"reason": "PodCompleted"}
        status["conditions"] = [
            {"type": t, "status": ready, "lastTransitionTime": now, **reason} for t in ("Ready", "ContainersReady")
        ]
        if running:
            status["startTime"] = now
            status["conditions"].append({"type": "Initialized", "status": "True", "lastTransitionTime": now})
            self.containers[name] = [c.get("name") for c in containers or []]
            status["containerStatuses"] = [
                {"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": True, "started": True,
                 "restartCount": 0, "state": {"running": {"startedAt": now}}}
                for c in containers or []
            ]
        else:
            status["containerStatuses"] = [
                {"name": c, "ready": False, "started": False, "state": {"running": None, "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}}}
                for c in self.containers.pop(name, [])
            ]
        if self.server is not None:
            try:
                self.server.patch_status(Resource.PODS, name, JOB_NAMESPACE, {"status": status})
            except ApiError as exc:
                if exc.code != 404:  # gone meanwhile: nothing to write, as over HTTP
                    raise RuntimeError(f"PATCH {self._pod_path(name, 'status')}: {exc.code} {exc}") from exc
            return
        patch_type = "application/strategic-merge-patch+json"
        await self._req("PATCH", self._pod_path(name, "status"), {"status": status}, patch_type, ok=(404,))

    # -- events ---------------------------------------------------------------------------

    async def _event(self, ev: EventSpec) -> None:
        action = Action(ev.action)
        if action in (Action.CORDON, Action.UNCORDON, Action.DRAIN):
            await self._req("PATCH", f"/api/v1/nodes/{ev.node}", {"spec": {"unschedulable": action != Action.UNCORDON}}, "application/merge-patch+json", ok=(404,))
            if action == Action.DRAIN:
                for name in self._pods_on(ev.node):
                    await self._evict(name)
        elif action in (Action.FAIL, Action.RECOVER):
            now = rfc3339(time.time())
            # the kubelet posts its conditions again, or the node lifecycle controller marks them
            # Unknown (a strategic merge patch merges conditions by type)
            conditions = node_conditions(now) if action == Action.RECOVER else unreachable_conditions(now)
            patch = {"status": {"conditions": conditions}}
            await self._req("PATCH", f"/api/v1/nodes/{ev.node}/status", patch, "application/strategic-merge-patch+json", ok=(404,))
            if action == Action.FAIL:
                for name in self._pods_on(ev.node):
                    await self._lose(name)
        elif action in (Action.APPROVE, Action.HOLD, Action.RELEASE):
            await self._decide(action, ev.job or "")
        elif action == Action.PREEMPT:
            for name in [n for n in self.running if self._job_of(n) == ev.job]:
                await self._evict(name)
        elif action == Action.SET_QUOTA:
            await self._set_quota(ev)

    def _job_of(self, pod: str) -> str | None:
        return self.pod_job.get(pod)

    def _pods_on(self, node: str | None) -> list[str]:
        return sorted(n for n, where in self.pod_node.items() if where == node and n in self.running)

    async def _pods_of(self, job: str) -> list[str]:
        listed = await self._req("GET", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods?labelSelector={JOB_LABEL}%3D{job}")
        return sorted(p["metadata"]["name"] for p in listed.get("items", []))

    async def _evict(self, name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": JOB_NAMESPACE}}
        await self._req("POST", self._pod_path(name, "eviction"), body, ok=(404, 429))

    async def _lose(self, name: str) -> None:
        """The pod died with its node: gone at once (as the node lifecycle controller force-deletes)."""
        await self._req("DELETE", self._pod_path(name) + "?gracePeriodSeconds=0", ok=(404,))

    async def _decide(self, action: Action, job: str) -> None:
        """An operator approves, holds or releases a job: an entry in ConfigMap usher-decisions
        (the scenario's pods carry usher/gang: the job's gang key is ``<namespace>/<job>``)."""
        path = f"/api/v1/namespaces/{USHER_NAMESPACE}/configmaps/{DECISIONS_CONFIGMAP}"
        when = rfc3339(time.time())
        for _ in range(5):
            cm = await self._req("GET", path)
            data = cm.get("data") or {}
            decisions = parse_decisions(data.get(DECISIONS_CONFIG_KEY), path)
            gang = f"{JOB_NAMESPACE}/{job}"
            cm["data"] = {**data, DECISIONS_CONFIG_KEY: format_decisions(decide(decisions, gang, action, "scenario", when, [*decisions.approved, *decisions.held]))}
            r = await self.http.put(path, content=json.dumps(cm), headers={"Content-Type": "application/json"})
            if r.status_code != 409:
                return

    async def _set_quota(self, ev: EventSpec) -> None:
        path = f"/api/v1/namespaces/{USHER_NAMESPACE}/configmaps/{QUEUES_CONFIGMAP}"
        for _ in range(5):
            cm = await self._req("GET", path)
            limits = {
                field_name: res.model_dump(mode="json", exclude_none=True)
                for field_name, res in zip(LIMIT_FIELDS, (ev.quota, ev.borrowing_limit, ev.lending_limit))
                if res is not None
            }
            try:
                text = edit_queue_limits(cm["data"][QUEUES_CONFIG_KEY], ev.queue or "", limits)
            except ValueError as exc:
                log.warning("scenario event setQuota on %s not applied: %s", ev.queue, exc)
                return
            if text is None:
                return
            cm["data"][QUEUES_CONFIG_KEY] = text
            r = await self.http.put(path, content=json.dumps(cm), headers={"Content-Type": "application/json"})
            if r.status_code != 409:
                return

    # -- the kubelet stand-in --------------------------------------------------------------

    async def kubelet(self) -> None:
        """Watch usher's pods: start the bound ones, bring back the evicted ones."""
        rv = ""
        while True:
            try:
                if not rv:
                    listed = await self._req("GET", f"/api/v1/pods?fieldSelector=spec.schedulerName%3D{SCHEDULER_NAME}")
                    for pod in listed.get("items", []):
                        await self.observe("ADDED", pod)
                    rv = listed["metadata"]["resourceVersion"]
                async for kind, pod in self._watch(rv):
                    if kind == "BOOKMARK":
                        rv = pod["metadata"]["resourceVersion"]
                        continue
                    if kind == "ERROR":
                        rv = ""
                        break
                    rv = pod["metadata"]["resourceVersion"]
                    await self.observe(kind, pod)
            except (httpx.HTTPError, RuntimeError, ValueError) as exc:
                log.debug("kubelet watch: %s", exc)
                await asyncio.sleep(0.1)

    async def _watch(self, rv: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        if self.server is not None:
            async for event in self._watch_store(rv):
                yield event
            return
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "fieldSelector": f"spec.schedulerName={SCHEDULER_NAME}"}
        async with self.http.stream("GET", "/api/v1/pods", params=params, timeout=httpx.Timeout(30.0, read=None)) as r:
            if r.status_code == 410:
                raise ValueError("gone")
            async for line in r.aiter_lines():
                if line.strip():
                    ev = json.loads(line)
                    yield ev["type"], ev["object"]

    async def _watch_store(self, rv: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The same watch on the server's store, in process: a resourceVersion too old is an
        ``ERROR`` event (410 Expired), as the HTTP watch streams it, and the kubelet lists again."""
        assert self.server is not None
        store = self.server.store
        rt = store.resource_type(Resource.PODS)
        flt = store.filter(rt, None, None, f"spec.schedulerName={SCHEDULER_NAME}")
        try:
            subscription = store.subscribe(rt, flt, rv)
        except ApiError as exc:
            yield "ERROR", exc.status()
            return
        with subscription:
            async for event in subscription:
                yield str(event.type), event.object

    async def observe(self, kind: str, pod: dict[str, Any]) -> None:
        """React to one pod change (the harness calls this too, in lockstep mode)."""
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        name = meta["name"]
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        if job is None or meta.get("namespace") != JOB_NAMESPACE:
            return
        self.pod_job[name] = job
        if kind != "DELETED" and meta.get("deletionTimestamp") and spec.get("nodeName"):
            # graceful deletion: the container exits on SIGTERM, the kubelet removes the pod
            await self._req("DELETE", self._pod_path(name) + "?gracePeriodSeconds=0", ok=(404, 409))
            return
        if kind == "DELETED":
            run = self.running.pop(name, None)
            self.pod_node.pop(name, None)
            if name not in self.finished and (run is None or run.uid == meta.get("uid")):
                await self._requeue(name, job, run)
            return
        node = spec.get("nodeName")
        if node and status.get("phase", "Pending") == "Pending" and name not in self.running:
            duration = (meta.get("annotations") or {}).get(Annotation.DURATION)
            now = self.clock.now()
            end = now + parse_duration(duration) / self.scale if duration else None
            run = self.running[name] = Running(now, end, meta.get("uid", ""))
            if end is not None:
                heapq.heappush(self._ends, (end, next(self._end_seq), name, run))
            gpus = (meta.get("annotations") or {}).get(Annotation.GPUS, "")
            self.starts.append((job, now, node, tuple(int(g) for g in gpus.split(",") if g)))
            self.pod_node[name] = node
            await self._set_phase(name, PodPhase.RUNNING, spec.get("containers"))
            self._changed.set()

    async def _requeue(self, name: str, job_name: str, run: Running | None) -> None:
        """Create a deleted pod again (as its Job would), its work reduced by what checkpoints saved."""
        job = self.jobs[job_name]
        pods = {p["metadata"]["name"]: p for p in pod_objects(self.scenario, job, time_scale=self.scale)}
        pod = pods.get(name)
        if pod is None:
            return
        if run is None or run.end is None:
            await self._req("POST", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods", pod, ok=(409,))
            return
        elapsed = self.clock.now() - run.start
        total = run.end - run.start
        saved = (elapsed // job.checkpoint_every) * job.checkpoint_every if job.checkpoint_every else 0.0
        remaining = max(0.0, total - saved)
        pod["metadata"]["annotations"][str(Annotation.DURATION)] = seconds(remaining * self.scale)
        await self._req("POST", f"/api/v1/namespaces/{JOB_NAMESPACE}/pods", pod, ok=(409,))
