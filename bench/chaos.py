"""Chaos: seeded trouble for two usher replicas electing a leader, watched by invariant monitors.

    python bench/chaos.py --seeds 1-20                 # seeds 1 to 20, 120 chaos steps each, 2 at a time
    python bench/chaos.py --seeds 1-4,9 --jobs 4       # seeds 1 to 4 and 9, four processes at once
    python bench/chaos.py --seeds 5 --stall --faults   # with stop-the-world stalls and API faults
    python bench/chaos.py --seeds 1-8 --elastic --operator --budgets   # elastic gangs, operator commands, budgets

Each seed runs in a process of its own: the sandbox's fake API server and controllers (kubelet,
Job controller, node lifecycle) on a ManualClock, and two usher replicas (``KubeController``,
leader election on a 1.5 s lease) talking to it over loopback. A seeded walk of ``--steps`` steps
creates gang Jobs (1-4 pods of 2-8 GPUs, low or high priority, some never ending), deletes Jobs,
fails and recovers nodes (two down at most), changes the quota, kills the leader (mostly a crash;
a new replica joins), cuts the leader's lease renewals and heals them, and moves the clock on.
``--stall`` stops the whole process now and then (0.3-2.5 s: a GC pause, CPU throttling);
``--faults`` has the API server delay binds and evictions and answer some with 429, 500 or 503.
Then everything heals, the run settles, the never-ending Jobs are deleted and the rest must end.

``--elastic`` also creates elastic PyTorchJobs (a Master and 1-3 Workers, at least 1-3 of them:
usher starts them at their minimum, grows them by their waiting Workers and shrinks them, through
evictions, for jobs of higher priority). ``--budgets`` puts a PodDisruptionBudget on about a third
of the new jobs (maxUnavailable 0 or 1, or minAvailable; an elastic job's often lets it shrink to
its minimum). ``--operator`` starts a console (a ``KubeController`` that does not schedule) and
issues operator commands as the console sends them (``KubeController.post``): cordon, uncordon,
drain, preempt, hold, release, approve and setQuota, mostly through the console, otherwise at the
standby replica or at the leader, and half the time aimed at a gang the leader is binding right
then (its job, or a node it is being bound to). The heal releases every hold and uncordons every
node before the run settles.

Invariants: no node runs pods asking for more GPUs than it has; the kubelet rejects no pod
(``OutOf...``); no bind is answered once the lease has moved from the replica that sent it (these
three on every pod change); no replica's loop dies; no gang is partly bound once the run settled;
every Job that ends by itself completes. With ``--elastic``: no elastic job runs below its minimum
once settled. With ``--operator``: no replica sends a bind for a pod whose gang its own mirror
already shows held, or onto a node its mirror already shows cordoned (a bind the API server
accepts for a pod already held in the store, but before the replica saw the hold, is a race the
API cannot close: counted as a note, not a violation); the console's loop does not die. One line per seed, then a summary; exit status 1 when a
seed broke an invariant. Such a seed also prints its chaos trace, the violations and, for its
first kubelet rejections, the node's pods and each replica's view of the node at the bind and at
the rejection. Seeded, not replayable: the replicas run on real time. usher's logs are off.

Longer than the house's 600 lines: a benchmark script, one command with its chaos steps, its
invariant monitors and its report, run as a whole and read as a whole.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import random
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import httpx
import yaml
from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.mirror import Gang
from usher.engine.channel import Command, CommandError
from usher.engine.enums import Action as OpAction
from usher.engine.backends.kube.controller import KubeController
from usher.engine.backends.kube.decisions import Decisions, format_decisions, parse_decisions
from usher.engine.backends.kube.objects import GPU_RESOURCE
from usher.engine.backends.kube.rbac import DECISIONS_CONFIG_KEY, DECISIONS_CONFIGMAP
from usher.engine.scenario.models import NodeSpec
from usher.fgd.command import parse_seeds
from usher.sandbox.apiserver import FakeApiServer, FaultKind
from usher.sandbox.nodefit import pod_requests
from usher.sandbox.objects import decisions_configmap, node_conditions, node_object, unreachable_conditions
from usher.sandbox.store import Change, Store, rfc3339
from usher.sandbox.world import ManualClock

NODES, GPUS_PER_NODE, QUOTA, LEASE_DURATION = 4, 8, 32, 1.5
JOBS = "/apis/batch/v1/namespaces/default/jobs"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
BUDGETS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
PODS = "/api/v1/namespaces/default/pods"
#: the label that names a chaos job on its pods, by kind
JOB_LABELS = ("usher/gang", "training.kubeflow.org/job-name")
QUEUES = "/api/v1/namespaces/usher-system/configmaps/usher-queues"
DONE_PHASES = ("Succeeded", "Failed")
#: trouble on the writes usher repeats: delays below the lease's margin (lease_duration - renew
#: deadline = 0.5 s), throttling with Retry-After, 5xx; rule i draws from Random(f"{seed}/{i}")
API_FAULTS: tuple[dict[str, Any], ...] = (
    dict(kind=FaultKind.DELAY, method="POST", path="*/pods/*/binding", probability=0.25, delay=0.3),
    dict(kind=FaultKind.ERROR, method="POST", path="*/pods/*/binding", probability=0.06, status=429, retry_after=1),
    dict(kind=FaultKind.ERROR, method="POST", path="*/pods/*/binding", probability=0.04, status=500),
    dict(kind=FaultKind.DELAY, method="POST", path="*/pods/*/eviction", probability=0.25, delay=0.4),
    dict(kind=FaultKind.ERROR, method="POST", path="*/pods/*/eviction", probability=0.05, status=503),
)


class Action(StrEnum):
    """A chaos step's move, besides the clock's."""

    CREATE_JOB = "create"
    DELETE_JOB = "delete"
    FAIL_NODE = "fail"
    RECOVER_NODE = "recover"
    SET_QUOTA = "quota"
    KILL_LEADER = "kill"
    CUT_LEASE = "cut"
    HEAL_LEASES = "heal"
    CREATE_ELASTIC = "elastic"
    OPERATOR = "operator"
    NONE = "none"


#: a step draws r in [0, 1) and takes the first action whose bound is above r and that can act
ACTION_BOUNDS = ((0.35, Action.CREATE_JOB), (0.45, Action.DELETE_JOB), (0.50, Action.FAIL_NODE), (0.57, Action.RECOVER_NODE),
                 (0.61, Action.SET_QUOTA), (0.66, Action.KILL_LEADER), (0.71, Action.CUT_LEASE), (0.76, Action.HEAL_LEASES))


#: the actions of ``--elastic`` and ``--operator``, in the draws that are otherwise no action
EXTRA_BOUNDS = ((0.83, Action.CREATE_ELASTIC), (0.98, Action.OPERATOR))


def pick_action(draw: float, have_jobs: bool, have_failed_nodes: bool, elastic: bool = False, operator: bool = False) -> Action:
    """The action for a draw; a delete without Jobs, or a recovery without failed nodes, passes to
    the next. Without ``elastic`` and ``operator`` the draws of their actions are no action."""
    enabled = {Action.CREATE_ELASTIC: elastic, Action.OPERATOR: operator}
    for bound, action in ACTION_BOUNDS + EXTRA_BOUNDS:
        unable = ((action is Action.DELETE_JOB and not have_jobs) or (action is Action.RECOVER_NODE and not have_failed_nodes)
                  or not enabled.get(action, True))
        if draw < bound and not unable:
            return action
    return Action.NONE


class JobKind(StrEnum):
    """What a chaos job is made of."""

    BATCH = "batch"  # a batch/v1 Job labelled as one usher gang
    ELASTIC = "elastic"  # an elastic kubeflow.org/v1 PyTorchJob, a gang by its owner


class OperatorTarget(StrEnum):
    """Where an operator command is sent."""

    CONSOLE = "console"
    STANDBY = "standby"
    LEADER = "leader"


#: the operator commands drawn, with their weights
OPERATOR_ACTIONS = ((OpAction.CORDON, 3), (OpAction.UNCORDON, 3), (OpAction.DRAIN, 2), (OpAction.PREEMPT, 3),
                    (OpAction.HOLD, 3), (OpAction.RELEASE, 3), (OpAction.APPROVE, 1), (OpAction.SET_QUOTA, 2))
NODE_ACTIONS = frozenset({OpAction.CORDON, OpAction.UNCORDON, OpAction.DRAIN})


def queues_yaml(quota: int) -> str:
    """The usher-queues ConfigMap's text: one queue over ``default``, preempting lower priorities."""
    return f"queues:\n  - {{name: research, quota: {{gpu: {quota}}}, namespaces: [default], preemption: {{withinQueue: LowerPriority}}}}\n"


def gang_job(name: str, size: int, gpus: int, duration: int | None, priority: str | None) -> dict[str, Any]:
    """A Job of ``size`` pods of ``gpus`` GPUs, one usher gang; without ``duration`` it runs until deleted.
    Evicted pods (DisruptionTarget) do not count against its backoff limit."""
    gpu = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": "usher", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": "trainer:1", "resources": {"requests": gpu, "limits": dict(gpu)}}],
        **({"priorityClassName": priority} if priority else {}),
    }
    annotations = {"usher/duration": f"{duration}s"} if duration else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "parallelism": size, "completions": size, "backoffLimit": 1000,
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {"metadata": {"labels": {"usher/gang": name}, "annotations": annotations}, "spec": spec}}}


def elastic_job(name: str, workers: int, minimum: int, gpus: int, duration: int | None, priority: str | None) -> dict[str, Any]:
    """An elastic PyTorchJob: a Master and ``workers`` Workers of ``gpus`` GPUs each, at least
    ``minimum`` Workers (usher starts it with its Master and ``minimum`` Workers and grows it);
    without ``duration`` it runs until deleted. Evicted pods are made again (``OnFailure``); once
    the Master succeeded, the Workers still running are deleted (``cleanPodPolicy: Running``)."""
    gpu = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": "usher", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "pytorch", "image": "trainer:1", "resources": {"requests": gpu, "limits": dict(gpu)}}],
        **({"priorityClassName": priority} if priority else {}),
    }
    template = {"metadata": {"annotations": {"usher/duration": f"{duration}s"} if duration else {}}, "spec": spec}
    replica = {"restartPolicy": "OnFailure", "template": template}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": {
        "elasticPolicy": {"minReplicas": minimum, "maxReplicas": workers, "rdzvBackend": "c10d"},
        "runPolicy": {"cleanPodPolicy": "Running"},
        "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": workers}}}}


def budget(name: str, label: str, limit: dict[str, int]) -> dict[str, Any]:
    """A PodDisruptionBudget ``limit`` (``maxUnavailable`` or ``minAvailable``) over the pods labelled ``label=name``."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {**limit, "selector": {"matchLabels": {label: name}}}}


def job_of(pod: dict[str, Any]) -> str | None:
    """The chaos job a pod belongs to, by its labels."""
    labels = pod["metadata"].get("labels") or {}
    return next((labels[k] for k in JOB_LABELS if labels.get(k)), None)


def phase(pod: dict[str, Any]) -> str | None:
    return (pod.get("status") or {}).get("phase")


class LeaseGate:
    """Stands in for the elector's client (get, create, replace): while ``cut``, its requests wait."""

    def __init__(self, client: KubeClient) -> None:
        self.client, self.cut = client, False

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self.client, name)

        async def gated(*args: Any, **kwargs: Any) -> Any:
            while self.cut:
                await asyncio.sleep(0.05)
            return await call(*args, **kwargs)
        return gated


@dataclass
class Replica:
    identity: str
    ctrl: KubeController
    task: asyncio.Task[None]
    gate: LeaseGate
    dead: bool = False


@dataclass
class SeedResult:
    """What one seed did and broke; ``report`` (trace, violations, dumps) is printed only when it broke something."""

    seed: int
    leader_kills: int = 0
    lease_cuts: int = 0
    node_failures: int = 0
    stalls: int = 0
    api_requests: int = 0
    seconds: float = 0.0
    elastic_jobs: int = 0
    budgets: int = 0
    commands: int = 0
    mid_bind_commands: int = 0
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    report: str = ""


@dataclass(frozen=True)
class Options:
    """What a seed's chaos includes."""

    steps: int = 120
    stall: bool = False
    faults: bool = False
    elastic: bool = False
    operator: bool = False
    budgets: bool = False


class Cluster:
    """The sandbox, the replicas, and the monitors hooked on the store."""

    def __init__(self, seed: int, kubeconfig: Path) -> None:
        self.clock = ManualClock(1_000_000.0)
        self.server = FakeApiServer(Store(clock=self.clock.now), controllers=True, seed=seed)  # seeds the fault rules
        self.kubeconfig = kubeconfig
        self.replicas: list[Replica] = []
        self.node_names = [f"gpu-{i}" for i in range(NODES)]
        self.violations: list[str] = []
        self.rejected: set[str] = set()  # pod uids the kubelet rejected
        self.dumps: list[tuple[str, str, float]] = []  # (dump, node, time) at the first rejections
        self.binds: list[tuple[float, str, str, str]] = []  # (time, pod, node, lease holder) as the store saw them
        self.node_at_bind: dict[str, str] = {}  # pod uid -> its node's dump when it was bound
        self.sends: list[tuple[Any, ...]] = []  # (sent, answered, replica, pod, node, GPUs, outcome) of each bind
        self.notes: list[str] = []  # what is worth telling but breaks nothing
        #: the fewest bound pods a running job may have (an elastic job's minimum), by job name
        self.minimums: dict[str, int] = {}
        self.console: Replica | None = None
        self.mid_bind_commands = 0
        self.command_log: list[str] = []  # (time, target, command, outcome) of each operator command
        self.command_tasks: set[asyncio.Task[None]] = set()
        self.t0 = time.monotonic()

    async def start(self) -> None:
        await self.server.start(port=0)
        self.http = httpx.AsyncClient(base_url=self.server.url, timeout=30)
        self.kubeconfig.write_text(yaml.safe_dump(self.server.kubeconfig()))
        await self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "usher-system"}})
        await self.request("POST", "/api/v1/namespaces/usher-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "usher-queues"}, "data": {"queues.yaml": queues_yaml(QUOTA)}})
        await self.request("POST", "/api/v1/namespaces/usher-system/configmaps", decisions_configmap())
        for name, value in (("low", 10), ("high", 1000)):
            await self.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})
        for name in self.node_names:
            await self.request("POST", "/api/v1/nodes", node_object(NodeSpec(name=name, gpus=GPUS_PER_NODE, cpu=64_000, memory=512 * 2**30), rfc3339(self.clock.now())))
        self.server.store.add_listener(self.on_change)
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def violate(self, message: str) -> None:
        self.violations.append(f"[{self.elapsed():.2f}] {message}")

    def lease_holder(self) -> str:
        try:
            return self.server.store.get("leases", "usher-controller", "usher-system")["spec"].get("holderIdentity") or ""
        except Exception:  # noqa: BLE001 - no lease yet
            return ""

    def on_change(self, change: Change) -> None:
        """On every pod write: kubelet rejections, binds (with the node's state), capacity."""
        if change.rt.resource != "pods" or change.new is None:
            return
        pod, old = change.new.obj, (change.old.obj if change.old is not None else None)
        meta, node, reason = pod["metadata"], pod["spec"].get("nodeName"), str((pod.get("status") or {}).get("reason", ""))
        if reason.startswith("OutOf") and meta["uid"] not in self.rejected:
            self.rejected.add(meta["uid"])
            self.violate(f"kubelet rejected {meta['name']} on {node}: {pod['status'].get('message')}")
            if len(self.rejected) <= 3:
                self.dumps.append((f"=== {meta['name']} uid={meta['uid'][:8]} rejected on {node} at {self.elapsed():.2f}\n"
                                   f"--- at its bind: {self.node_at_bind.get(meta['uid'], '?')}\n--- now:\n{self.dump_node(node)}",
                                   node, self.elapsed()))
        if pod["spec"].get("schedulerName") == "usher" and node and (old is None or not old["spec"].get("nodeName")):
            self.binds.append((round(self.elapsed(), 2), meta["name"], node, self.lease_holder()))
            if f"{meta.get('namespace')}/{(meta.get('labels') or {}).get('usher/gang', meta['name'])}" in self.held_in_store():
                self.notes.append(f"[{self.elapsed():.2f}] {meta['name']} bound to {node} while held in the store")
            if len(self.node_at_bind) < 5000:
                self.node_at_bind[meta["uid"]] = f"t={self.elapsed():.2f}\n{self.dump_node(node)}"
        self.check_capacity()

    def held_in_store(self) -> set[str]:
        """The gangs the operators' decisions (ConfigMap usher-decisions) hold now."""
        if not self.server.store.exists("configmaps", DECISIONS_CONFIGMAP, "usher-system"):
            return set()
        data = self.server.store.get("configmaps", DECISIONS_CONFIGMAP, "usher-system").get("data") or {}
        return set(parse_decisions(data.get(DECISIONS_CONFIG_KEY), DECISIONS_CONFIGMAP).held)

    def check_capacity(self) -> None:
        running = [p for p in self.server.store.list("pods").objects() if p["spec"].get("nodeName") and phase(p) not in DONE_PHASES]
        used: dict[str, int] = defaultdict(int)
        for p in running:
            used[p["spec"]["nodeName"]] += pod_requests(p).get(GPU_RESOURCE, 0)
        for name, gpus in used.items():
            try:
                node = self.server.store.get("nodes", name)
                allocatable = int(node["status"]["allocatable"]["nvidia.com/gpu"])
            except Exception:  # noqa: BLE001 - a node deleted, or without GPUs
                continue
            if gpus <= allocatable:
                continue
            ready = next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "?")
            pods = " ".join(f"{p['metadata']['name']}({phase(p)},{pod_requests(p).get(GPU_RESOURCE, 0)},{'T' if p['metadata'].get('deletionTimestamp') else ''},"
                            f"{(p['metadata'].get('labels') or {}).get('usher/gang')})" for p in running if p["spec"]["nodeName"] == name)
            message = f"node {name} (Ready={ready}) overcommitted: {gpus} GPUs of {allocatable}: {pods}"
            if not self.violations or not self.violations[-1].split("] ", 1)[-1].startswith(message + ";"):
                replicas = [(r.identity, r.ctrl.is_leader, r.dead) for r in self.replicas]
                self.violate(f"{message}; recent binds {self.binds[-6:]}; replicas (leader, dead) {replicas}")

    def dump_node(self, name: str) -> str:
        """The node's pods as the kubelet sees them, then each live replica's view of the node."""
        out = []
        for p in self.server.store.list("pods").objects():
            if p["spec"].get("nodeName") == name:
                m, status = p["metadata"], p.get("status") or {}
                owner = ",".join(f"{o['kind']}/{o['name']}" for o in m.get("ownerReferences") or [])
                out.append(f"  kubelet-side pod {m['name']} uid={m['uid'][:8]} phase={status.get('phase')} reason={status.get('reason')} "
                           f"del={m.get('deletionTimestamp')} gpus={pod_requests(p).get(GPU_RESOURCE, 0)} owner={owner} "
                           f"inRuns={m['uid'] in self.server.controllers.kubelet.runs} ann={(m.get('annotations') or {}).get('usher/gpus')} "
                           f"created={m.get('creationTimestamp')} rv={m.get('resourceVersion')}")
        return "\n".join(out + [line for r in self.replicas if not r.dead for line in replica_view(r, name)])

    def report_dumps(self) -> list[str]:
        """Each rejection's dump, then the binds sent to its node until 2 s after it."""
        out = []
        for dump, node, at in self.dumps:
            out.append(f"{dump}\n--- bind sends to {node} up to {at + 2:.2f} (sent, answered, by, pod, node, gpus, outcome):")
            out += [f"   {s}" for s in self.sends if s[4] == node and s[0] <= at + 2]
        return out

    async def add_replica(self, identity: str) -> Replica:
        """Start a replica whose lease requests pass a gate and whose binds are checked against the lease."""
        client = await KubeClient.connect(str(self.kubeconfig))
        ctrl = KubeController(client, identity=identity, clock=self.clock.now, elect=True, lease_duration=LEASE_DURATION, status_interval=0.0)
        gate = ctrl.elector._client = LeaseGate(client)  # type: ignore[union-attr,assignment]
        send = client.bind

        async def bind(namespace: str, pod: str, node: str, annotations: dict[str, str] | None = None,
                       uid: str | None = None, may_send: Any = None) -> None:
            held_at_send, sent, outcome = ctrl.elector.holds(), self.elapsed(), "?"  # type: ignore[union-attr]
            self.check_bind_knowledge(ctrl, namespace, pod, node)
            try:
                await send(namespace, pod, node, annotations, uid, may_send)
                outcome = "ok"
            except BaseException as exc:
                outcome = f"{type(exc).__name__}: {str(exc)[:80]}"
                raise
            finally:
                self.sends.append((round(sent, 3), round(self.elapsed(), 3), identity, pod, node, (annotations or {}).get("usher/gpus"), outcome))
                if (holder := self.lease_holder()) != identity:
                    self.violate(f"{identity} bind {pod}->{node} answered while lease holder is {holder!r} (held at send: {held_at_send})")

        client.bind = bind  # type: ignore[method-assign]
        replica = Replica(identity, ctrl, asyncio.create_task(ctrl.run()), gate)
        self.replicas.append(replica)
        await asyncio.wait_for(ctrl.synced.wait(), 10)
        return replica

    def check_bind_knowledge(self, ctrl: KubeController, namespace: str, pod: str, node: str) -> None:
        """A bind about to be sent: the sender's own mirror must not show its gang held or its node cordoned."""
        mirror = ctrl.mirror
        gang = next((g for g in mirror.gangs.values() if any(v.namespace == namespace and v.name == pod for v in g.pods.values())), None)
        if gang is not None and mirror.held(gang):  # the operators' decisions (usher-decisions) hold it
            self.violate(f"{ctrl.identity} sends bind {pod}->{node} while its mirror shows gang {gang.key} held; "
                         f"binding={gang.binding} teardown={gang.teardown}")
        view = mirror.nodes.get(node)
        if view is not None and view.unschedulable:
            self.violate(f"{ctrl.identity} sends bind {pod}->{node} while its mirror shows {node} cordoned; "
                         f"gang {gang and gang.key} binding={gang and gang.binding}")

    async def add_console(self) -> Replica:
        """Start the console's controller: it mirrors the cluster and carries out commands, never schedules."""
        client = await KubeClient.connect(str(self.kubeconfig))
        ctrl = KubeController(client, identity="console", clock=self.clock.now, schedule=False)
        self.console = Replica("console", ctrl, asyncio.create_task(ctrl.run()), LeaseGate(client))
        await asyncio.wait_for(ctrl.synced.wait(), 10)
        return self.console

    def post(self, target: Replica, cmd: Command, label: str) -> None:
        """Send an operator command as the console does; its outcome goes to the command log."""
        sent = self.elapsed()
        try:
            reply = target.ctrl.post(cmd)
        except CommandError as exc:
            self.command_log.append(f"[{sent:.2f}] {label}: not posted: {exc}")
            return

        async def outcome() -> None:
            try:
                text = await asyncio.wait_for(reply, 20)
            except CommandError as exc:
                text = f"refused: {exc}"
            except TimeoutError:
                text = "no reply in 20 s" + (" (the replica died)" if target.dead else "")
                if not target.dead and target.ctrl.commands is not None:
                    self.violate(f"{label}: no reply in 20 s from a live {target.identity}")
            except Exception as exc:  # noqa: BLE001 - any other failure is the controller's
                text = f"raised {exc!r}"
                self.violate(f"{label}: the reply raised {exc!r}")
            self.command_log.append(f"[{sent:.2f}-{self.elapsed():.2f}] {label}: {text[:200]}")
        task = asyncio.create_task(outcome())
        self.command_tasks.add(task)
        task.add_done_callback(self.command_tasks.discard)

    def budget_refuses(self, name: str) -> bool:
        """Whether the job's PodDisruptionBudget allows no disruption now."""
        try:
            pdb = self.server.store.get("poddisruptionbudgets", name, "default")
        except Exception:  # noqa: BLE001 - no budget
            return False
        return not (pdb.get("status") or {}).get("disruptionsAllowed")

    def explain_partial(self, partial: dict[str, str]) -> None:
        """For each partly bound job: its pods, its budget, and the leader's view of its gang."""
        leader = self.leader()
        for name in partial:
            pods = [p for p in self.server.store.list("pods", "default").objects() if job_of(p) == name]
            self.violate("  pods of " + name + ": " + "; ".join(
                f"{p['metadata']['name']} {phase(p)} node={p['spec'].get('nodeName')} del={bool(p['metadata'].get('deletionTimestamp'))}"
                for p in pods))
            try:
                pdb = self.server.store.get("poddisruptionbudgets", name, "default")
                self.violate(f"  budget {name}: spec={ {k: v for k, v in pdb['spec'].items() if k != 'selector'} } status={pdb.get('status')}")
            except Exception:  # noqa: BLE001 - no budget
                pass
            if leader is None:
                continue
            for g in leader.ctrl.mirror.gangs.values():
                if g.key.rsplit("/", 1)[-1] == name:
                    self.violate(f"  leader {leader.identity} gang {g.key}: teardown={g.teardown} binding={g.binding} to_bind={g.to_bind} "
                                 f"reason={g.reason} message={g.message} job={g.job and (g.job.name, g.job.state)}")

    def leader(self) -> Replica | None:
        return next((r for r in self.replicas if not r.dead and r.ctrl.is_leader), None)

    async def kill(self, replica: Replica, graceful: bool) -> None:
        """Stop a replica; not ``graceful``: a crash, the lease is not handed back."""
        elector = replica.ctrl.elector
        if not graceful and elector is not None:
            async def crash() -> None:
                if elector._task is not None:
                    elector._task.cancel()
            elector.release = crash  # type: ignore[method-assign]
        replica.task.cancel()
        await asyncio.gather(replica.task, return_exceptions=True)
        await replica.ctrl.client.aclose()
        replica.dead = True

    async def request(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        r = await self.http.request(method, path, content=json.dumps(body) if body is not None else None, headers=headers)
        if r.status_code >= 300 and r.status_code not in ok:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    async def set_node_ready(self, name: str, ready: bool) -> None:
        conditions = (node_conditions if ready else unreachable_conditions)(rfc3339(self.clock.now()))
        r = await self.http.patch(f"/api/v1/nodes/{name}/status", json={"status": {"conditions": conditions}},
                                  headers={"Content-Type": "application/strategic-merge-patch+json"})
        r.raise_for_status()

    def advance(self, seconds: float) -> None:
        self.clock.t += seconds
        self.server.controllers.step()

    def live_gangs(self) -> dict[str, list[dict[str, Any]]]:
        """Each chaos job's pods that are neither finished nor being deleted."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in self.server.store.list("pods").objects():
            gang = job_of(p)
            if gang and phase(p) not in DONE_PHASES and not p["metadata"].get("deletionTimestamp"):
                out[gang].append(p)
        return out

    def partial_gangs(self) -> dict[str, str]:
        """The jobs partly bound: a gang with fewer pods bound than it has, an elastic job with
        fewer than its minimum (unless one of its pods has ended: it may run on with fewer)."""
        ended = {job_of(p) for p in self.server.store.list("pods").objects() if phase(p) == "Succeeded"}
        out = {}
        for gang, pods in self.live_gangs().items():
            bound = sum(1 for p in pods if p["spec"].get("nodeName"))
            if gang not in self.minimums and 0 < bound < len(pods):
                out[gang] = f"{bound}/{len(pods)} bound"
            elif gang in self.minimums and gang not in ended and 0 < bound < self.minimums[gang]:
                out[gang] = f"{bound}/{len(pods)} bound, at least {self.minimums[gang]}"
        return out

    def unfinished(self, jobs: list[str]) -> list[str]:
        """The jobs among ``jobs`` that still exist and have not completed (a Job Complete, a PyTorchJob Succeeded)."""
        existing = {j["metadata"]["name"]: (j, "Complete") for j in self.server.store.list("jobs", "default").objects()}
        existing |= {j["metadata"]["name"]: (j, "Succeeded") for j in self.server.store.list("pytorchjobs", "default").objects()}
        return [name for name in jobs if name in existing and not any(
            c["type"] == existing[name][1] and c["status"] == "True" for c in (existing[name][0].get("status") or {}).get("conditions") or [])]

    async def stop(self) -> None:
        for task in list(self.command_tasks):
            task.cancel()
        live = [r for r in self.replicas if not r.dead] + ([self.console] if self.console is not None and not self.console.dead else [])
        for r in live:
            r.task.cancel()
        await asyncio.gather(*(r.task for r in live), return_exceptions=True)
        for r in live:
            await r.ctrl.client.aclose()
        await self.http.aclose()
        await self.server.stop()


def replica_view(r: Replica, name: str) -> list[str]:
    """A replica's engine node, runs, holdings, debts, gang pods and kept rooms on node ``name``."""
    mirror = r.ctrl.mirror
    try:
        state, node_id = mirror.state, mirror.state.node_by_name.get(name)
        out = [f"  replica {r.identity} leader={r.ctrl.is_leader} holds={r.ctrl.elector.holds()} dirty={mirror.dirty} "  # type: ignore[union-attr]
               f"deltas_queued={r.ctrl.deltas.qsize()}"]
        if node_id is None:
            return out + ["    node not in state"]
        n = state.nodes[node_id]
        out.append(f"    engine node {name}: gpu_free={n.gpu_free} whole_free={n.whole_free} failed={n.failed} cordoned={n.cordoned}")
        for j in state.jobs:
            placed = [(p.pod, p.gpus) for p in j.current_run.placements if p.node_id == node_id] if j.current_run else []
            if placed:
                g = mirror.gang_of_job.get(j.id)
                out.append(f"    run job#{j.id} {j.name} state={j.state} placements={placed} gang={g and g.key} "
                           f"teardown={g and g.teardown} binding={g and g.binding}")
        for kind, holdings in (("holding", mirror.holdings), ("debt", mirror._debts)):
            for key, h in holdings.items():
                if h.node == name:
                    stranded = f" stranded={key in mirror.stranded}" if kind == "holding" else ""
                    out.append(f"    {kind} {key} wants={h.requests} taken={mirror._taken.get(key)} short={key in mirror._short}{stranded}")
        out += [f"    gang {g.key} pod {v.name} uid={v.uid[:8]} phase={v.phase} term={v.terminating} gpus={v.gpus} "
                f"job={g.job and g.job.id} run={bool(g.job and g.job.current_run)} teardown={g.teardown}"
                for g in mirror.gangs.values() for v in g.pods.values() if v.node == name]
        out += [f"    kept room job#{room.job_id} {placed}" for room in state.kept_rooms.values()
                if (placed := [(p.pod, p.gpus) for p in room.placements if p.node_id == node_id])]
        return out
    except Exception as exc:  # noqa: BLE001 - a dump must not break the run
        return [f"  replica {r.identity}: dump failed: {exc!r}"]


async def operator_step(c: Cluster, rng: random.Random, jobs: dict[str, JobKind], step: int, trace: list[str]) -> None:
    """One operator command, at the console, the standby or the leader; half the time aimed at
    a gang the leader is binding right now (its job, or a node it is being bound to)."""
    leader = c.leader()
    standby = next((r for r in c.replicas if not r.dead and r is not leader), None)
    where = rng.choice([OperatorTarget.CONSOLE, OperatorTarget.CONSOLE, OperatorTarget.STANDBY, OperatorTarget.LEADER])
    target = {OperatorTarget.STANDBY: standby, OperatorTarget.LEADER: leader}.get(where) or c.console
    assert target is not None
    action = rng.choices([a for a, _ in OPERATOR_ACTIONS], weights=[w for _, w in OPERATOR_ACTIONS])[0]
    binding: list[Gang] = []
    if leader is not None and rng.random() < 0.5:  # aimed mid-bind: wait up to 0.5 s for a gang to be bound
        for _ in range(50):
            if binding := sorted((g for g in leader.ctrl.mirror.gangs.values() if g.binding), key=lambda g: g.key):
                break
            await asyncio.sleep(0.01)
    mid_bind = bool(binding)
    gang = rng.choice(binding) if mid_bind else None
    if action in NODE_ACTIONS:
        nodes = c.node_names
        if gang is not None and leader is not None and gang.job is not None and gang.job.current_run is not None:
            state = leader.ctrl.mirror.state
            nodes = sorted({state.nodes[p.node_id].name for p in gang.job.current_run.placements}) or nodes
        cmd = Command(action, node=rng.choice(nodes))
    elif action is OpAction.SET_QUOTA:
        cmd = Command(action, queue="research", quota={"gpu": rng.choice([16, 24, 32, 48])})
    elif gang is not None:
        cmd = Command(action, job=gang.key)
    elif jobs:
        name = rng.choice(sorted(jobs))
        cmd = Command(action, job=name if jobs[name] is JobKind.BATCH else f"PyTorchJob/{name}")
    else:
        return
    c.mid_bind_commands += mid_bind
    label = (f"{step} {cmd.action} {cmd.node or cmd.job or cmd.quota} at {target.identity} ({where})"
             + (f" mid-bind of {gang.key}" if gang is not None else ""))
    trace.append(label)
    c.post(target, cmd, label)


async def chaos(seed: int, options: Options) -> SeedResult:
    """One seed: the chaos, then healing, settling and the check that the Jobs end."""
    started, result, trace, rng = time.monotonic(), SeedResult(seed), [], random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(seed, Path(tmp) / "kubeconfig")
        await c.start()
        identities = (f"usher-{i}" for i in range(100))
        await c.add_replica(next(identities))
        await c.add_replica(next(identities))
        if options.operator:
            await c.add_console()
        for rule in API_FAULTS if options.faults else ():
            c.server.inject(**rule)
        jobs: dict[str, JobKind] = {}  # not deleted by the chaos
        forever: set[str] = set()
        failed: set[str] = set()
        job_numbers = itertools.count(1)
        try:
            for step in range(options.steps):
                action = pick_action(rng.random(), bool(jobs), bool(failed), options.elastic, options.operator)
                if action is Action.CREATE_JOB:
                    name, size, gpus = f"j{next(job_numbers)}", rng.choice([1, 2, 2, 3, 4]), rng.choice([2, 4, 4, 8])
                    size = min(size, QUOTA // gpus)
                    priority, duration = rng.choice([None, "low", "low", "high"]), rng.choice([None, 60, 120, 300, 600])
                    await c.request("POST", JOBS, gang_job(name, size, gpus, duration, priority))
                    jobs[name] = JobKind.BATCH
                    if duration is None:
                        forever.add(name)
                    if options.budgets and rng.random() < 0.35:
                        limit = rng.choice([{"maxUnavailable": 0}, {"maxUnavailable": 1}, {"minAvailable": size}])
                        await c.request("POST", BUDGETS, budget(name, "usher/gang", limit))
                        result.budgets += 1
                        trace.append(f"{step} budget {name} {limit}")
                    trace.append(f"{step} create {name} {size}x{gpus} prio={priority} dur={duration}")
                elif action is Action.CREATE_ELASTIC:
                    name, workers, gpus = f"e{next(job_numbers)}", rng.choice([1, 2, 3]), rng.choice([2, 4, 8])
                    workers = min(workers, QUOTA // gpus - 1)
                    minimum = rng.randint(1, workers)
                    priority, duration = rng.choice([None, "low", "low", "high"]), rng.choice([None, 60, 120, 300, 600])
                    await c.request("POST", PYTORCHJOBS, elastic_job(name, workers, minimum, gpus, duration, priority))
                    jobs[name] = JobKind.ELASTIC
                    c.minimums[name] = 1 + minimum
                    result.elastic_jobs += 1
                    if duration is None:
                        forever.add(name)
                    if options.budgets and rng.random() < 0.35:
                        limit = rng.choice([{"minAvailable": 1 + minimum}, {"minAvailable": 1 + minimum}, {"maxUnavailable": 1}, {"maxUnavailable": 0}])
                        await c.request("POST", BUDGETS, budget(name, "training.kubeflow.org/job-name", limit))
                        result.budgets += 1
                        trace.append(f"{step} budget {name} {limit}")
                    trace.append(f"{step} elastic {name} master+{minimum}..{workers} workers x{gpus} prio={priority} dur={duration}")
                elif action is Action.OPERATOR:
                    await operator_step(c, rng, jobs, step, trace)
                    result.commands += 1
                elif action is Action.DELETE_JOB:
                    name = rng.choice(list(jobs))
                    kind = jobs.pop(name)
                    await c.request("DELETE", f"{JOBS if kind is JobKind.BATCH else PYTORCHJOBS}/{name}?propagationPolicy=Background", ok=(404,))
                    trace.append(f"{step} delete {name}")
                elif action is Action.FAIL_NODE and len(failed) < 2:
                    node = rng.choice([n for n in c.node_names if n not in failed])
                    failed.add(node)
                    await c.set_node_ready(node, False)
                    result.node_failures += 1
                    trace.append(f"{step} fail {node}")
                elif action is Action.RECOVER_NODE:
                    node = rng.choice(sorted(failed))
                    failed.discard(node)
                    await c.set_node_ready(node, True)
                    trace.append(f"{step} recover {node}")
                elif action is Action.SET_QUOTA:
                    quota = rng.choice([16, 24, 32, 48])
                    await c.request("PATCH", QUEUES, {"data": {"queues.yaml": queues_yaml(quota)}})
                    trace.append(f"{step} quota {quota}")
                elif action is Action.KILL_LEADER and (leader := c.leader()) is not None:
                    graceful = rng.random() < 0.3
                    await c.kill(leader, graceful)
                    result.leader_kills += 1
                    trace.append(f"{step} kill {leader.identity} graceful={graceful}")
                    await c.add_replica(next(identities))
                elif action is Action.CUT_LEASE and (leader := c.leader()) is not None:
                    leader.gate.cut = True
                    result.lease_cuts += 1
                    trace.append(f"{step} cut lease of {leader.identity}")
                elif action is Action.HEAL_LEASES:
                    for r in c.replicas:
                        if not r.dead and r.gate.cut:
                            r.gate.cut = False
                            trace.append(f"{step} heal lease of {r.identity}")
                c.advance(rng.choice([0, 1, 5, 10, 30, 60]))
                await asyncio.sleep(rng.choice([0.0, 0.02, 0.1, 0.3]))
                if options.stall and rng.random() < 0.1:
                    time.sleep(rng.choice([0.3, 0.6, 1.2, 2.5]))  # the whole process stops: every timer runs late
                    result.stalls += 1
                    trace.append(f"{step} stall")
                for r in [*c.replicas, *([c.console] if c.console is not None else [])]:
                    if not r.dead and r.task.done():
                        c.violate(f"replica {r.identity} loop died: {r.task}")
                        r.dead = True
            trace.append(f"--- heal; faults fired: {[(f.kind.value, f.path.rsplit('/', 1)[-1], f.fired) for f in c.server.faults]}")
            c.server.clear_faults()
            for r in c.replicas:
                r.gate.cut = False
            for node in sorted(failed):
                await c.set_node_ready(node, True)
            if options.operator:
                await heal_operator_state(c)
            await settle(c)
            partial = c.partial_gangs()
            if held := {name: how for name, how in partial.items() if c.budget_refuses(name)}:
                # designed: a teardown a budget refuses is asked again (less and less often) until the budget allows it
                c.notes.append(f"partly running after settling, its teardown refused by its PodDisruptionBudget: {held}")
            if partial := {name: how for name, how in partial.items() if name not in held}:
                c.violate(f"partially running gangs after settling: {partial}")
                c.explain_partial(partial)
            await check_completion(c, list(jobs), forever)
        except Exception as exc:  # noqa: BLE001 - a broken run is a finding too
            c.violate(f"the run failed: {exc!r} {traceback.format_exc()[-600:]}")
        finally:
            result.api_requests = len(c.server.requests)
            await c.stop()
    result.violations, result.notes, result.seconds = c.violations, c.notes, time.monotonic() - started
    result.mid_bind_commands = c.mid_bind_commands
    if c.violations:
        result.report = "\n".join([*trace, *(f"COMMAND {line}" for line in c.command_log), *(f"NOTE {n}" for n in c.notes),
                                   *(f"VIOLATION {v}" for v in c.violations), *c.report_dumps()])
    return result


async def heal_operator_state(c: Cluster) -> None:
    """What an operator undoes at the end: every hold taken off, every node uncordoned."""
    path = f"/api/v1/namespaces/usher-system/configmaps/{DECISIONS_CONFIGMAP}"
    cm = c.server.store.get("configmaps", DECISIONS_CONFIGMAP, "usher-system")
    decisions = parse_decisions((cm.get("data") or {}).get(DECISIONS_CONFIG_KEY), path)
    cm["data"] = {DECISIONS_CONFIG_KEY: format_decisions(Decisions(approved=decisions.approved))}
    await c.request("PUT", path, cm)
    for name in c.node_names:
        await c.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": False}})


async def settle(c: Cluster, wait: float = 60.0) -> None:
    """Move the clock 5 s at a time until no gang is partly bound 16 rounds running, or ``wait`` seconds pass."""
    deadline, calm = time.monotonic() + wait, 0
    while time.monotonic() < deadline and calm <= 15:
        c.advance(5)
        await asyncio.sleep(0.2)
        calm = 0 if c.partial_gangs() else calm + 1


async def check_completion(c: Cluster, jobs: list[str], forever: set[str], wait: float = 90.0) -> None:
    """Restore the quota, delete the never-ending jobs; every other job must complete within ``wait`` seconds."""
    await c.request("PATCH", QUEUES, {"data": {"queues.yaml": queues_yaml(QUOTA)}})
    for name in (j for j in jobs if j in forever):
        await c.request("DELETE", f"{PYTORCHJOBS if name in c.minimums else JOBS}/{name}?propagationPolicy=Background", ok=(404,))
    finite = [j for j in jobs if j not in forever]
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and c.unfinished(finite):
        c.advance(30)
        await asyncio.sleep(0.1)
    if left := c.unfinished(finite):
        gangs = c.live_gangs()
        pods = [(j, [(p["metadata"]["name"], p["spec"].get("nodeName"), phase(p)) for p in gangs.get(j, [])]) for j in left]
        c.violate(f"jobs never completed after the chaos stopped: {pods}")
        if (leader := c.leader()) is not None:
            for g in leader.ctrl.mirror.waiting_gangs():
                c.violate(f"  leader {leader.identity} says {g.key}: {g.reason} {g.message}")


def run_seed(args: tuple[int, Options]) -> SeedResult:
    """A pool worker's entry: one seed on a fresh event loop, usher's logs off."""
    logging.disable(logging.CRITICAL)
    try:
        return asyncio.run(chaos(*args))
    except Exception as exc:  # noqa: BLE001 - the sandbox or a replica did not start
        return SeedResult(args[0], violations=[f"the run failed: {exc!r}"], report=traceback.format_exc())


def seed_line(r: SeedResult) -> str:
    verdict = "OK" if not r.violations else f"VIOLATION {r.violations[0][:300]}"
    return (f"seed {r.seed:>4}  kills {r.leader_kills:>2}  cuts {r.lease_cuts:>2}  node failures {r.node_failures:>2}  "
            f"stalls {r.stalls:>2}  elastic {r.elastic_jobs:>2}  budgets {r.budgets:>2}  commands {r.commands:>2} ({r.mid_bind_commands:>2} mid-bind)  "
            f"notes {len(r.notes):>2}  requests {r.api_requests:>5}  {r.seconds:5.1f} s  {verdict}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-3"), help="e.g. 1-20 or 1,4,7-9 (default 1-3)")
    parser.add_argument("--steps", type=int, default=120, help="chaos steps per seed (default 120)")
    parser.add_argument("--stall", action="store_true", help="stop the whole process now and then (0.3-2.5 s)")
    parser.add_argument("--faults", action="store_true", help="delay and fail some binds and evictions at the API server")
    parser.add_argument("--elastic", action="store_true", help="also create elastic PyTorchJobs (grown and shrunk by usher)")
    parser.add_argument("--operator", action="store_true", help="issue operator commands (console, standby, leader; some mid-bind)")
    parser.add_argument("--budgets", action="store_true", help="a PodDisruptionBudget on about a third of the new jobs")
    parser.add_argument("--jobs", type=int, default=2, help="seeds run at once, each in its own process (default 2)")
    options = parser.parse_args(argv)
    started, results = time.monotonic(), []
    chosen = Options(options.steps, options.stall, options.faults, options.elastic, options.operator, options.budgets)
    work = [(seed, chosen) for seed in options.seeds]
    at_once = max(1, min(options.jobs, len(work)))
    with Pool(at_once, maxtasksperchild=1) as pool:
        for r in pool.imap_unordered(run_seed, work):
            results.append(r)
            print(seed_line(r), flush=True)
            if r.violations:
                print(r.report, flush=True)
    broken = sorted(r.seed for r in results if r.violations)
    mean = sum(r.seconds for r in results) / max(len(results), 1)
    flags = "".join((", stalls" if options.stall else "", ", API faults" if options.faults else "", ", elastic" if options.elastic else "",
                     ", operator" if options.operator else "", ", budgets" if options.budgets else ""))
    print(f"{len(results)} seeds ({options.steps} steps{flags}): {len(results) - len(broken)} passed, {len(broken)} violated"
          f"{f' {broken}' if broken else ''}; {mean:.1f} s per seed, {time.monotonic() - started:.0f} s in all, {at_once} at once")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
