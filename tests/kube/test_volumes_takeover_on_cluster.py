"""A replica takes over while a gang's claims are provisioning: the gang ends whole or none bound.

Two usher replicas share the leader Lease over real HTTP. The leader sets the selected node of
every claim of a gang (its PreBind) while a slow provisioner works, then dies without handing the
Lease back. The standby leads once the Lease expires, and must finish or undo the dead leader's
PreBind, never half: here an operator cordoned one of the selected nodes meanwhile, so the gang
cannot fit under those pins; the new leader withdraws the selections nobody acted on (the
provisioner abandons that work) and places the gang on nodes it can use. At no moment of the
test is the gang partly bound.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_volumes_on_cluster import CLASSES, PVCS, _claims, _gang, _host_of, _partly_bound, _volumes, claim, storage_class, worker

from usher.engine.backends.kube.client import KubeClient
from usher.engine.backends.kube.controller import KubeController
from usher.sandbox.objects import decisions_configmap

SELECTED = "volume.kubernetes.io/selected-node"
PODS = "/api/v1/namespaces/default/pods"


async def _replicas(sb: UsherOnSandbox) -> list[tuple[KubeController, asyncio.Task[Any]]]:
    """Two replicas electing a leader on one Lease (a short one, so the standby takes over soon)."""
    await sb.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "usher-system"}})
    await sb.create("/api/v1/namespaces/usher-system/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "usher-queues"},
        "data": {"queues.yaml": "queues:\n  - {name: research, namespaceSelector: {}, quota: {gpu: 64}}\n"},
    })
    await sb.create("/api/v1/namespaces/usher-system/configmaps", decisions_configmap())
    path = sb.tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(sb.server.kubeconfig(sb.server.admin_token)))
    out = []
    for identity in ("usher-a", "usher-b"):
        client = await KubeClient.connect(str(path))
        ctrl = KubeController(client, identity=identity, clock=sb.clock.now, elect=True, lease_duration=1.0,
                              status_interval=0.0)
        out.append((ctrl, asyncio.create_task(ctrl.run())))
        await asyncio.wait_for(ctrl.synced.wait(), 10)
    return out


def _selected(claims: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    return {name: (c["metadata"].get("annotations") or {}).get(SELECTED) for name, c in claims.items()}


async def _no_release() -> None:
    return None


async def test_a_replica_takes_over_while_claims_are_provisioning_and_the_gang_ends_whole(sb: UsherOnSandbox) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3"):
        await sb.create("/api/v1/nodes", node(n))
    await sb.create(CLASSES, storage_class("slow-local", **{"sandbox.usher/delay": "30s"}))
    replicas = await _replicas(sb)
    leader = await sb.until(lambda: _leader(replicas), "one replica leads")
    seen_partial: list[bool] = []

    async def watch() -> None:
        while True:
            seen_partial.append(_partly_bound(await _gang(sb, "train")))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        for i in range(2):
            await sb.create(PVCS, claim(f"c-{i}", klass="slow-local"))
            await sb.create(PODS, worker(f"w-{i}", 8, [f"c-{i}"], gang="train", size=2))

        async def all_selected() -> Any:
            picked = _selected(await _claims(sb))
            return picked if len(picked) == 2 and all(picked.values()) else None

        first = await sb.until(all_selected, "the leader selects a node for each claim (its PreBind)")
        # the leader dies mid-PreBind, without handing the Lease back; an operator cordons one of
        # the nodes it selected before the standby leads
        ctrl, task = leader
        ctrl.elector.release = _no_release  # type: ignore[method-assign]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await ctrl.client.aclose()
        cordoned = first["c-0"]
        await sb.req("PATCH", f"/api/v1/nodes/{cordoned}", {"spec": {"unschedulable": True}})
        standby = next(r for r in replicas if r is not leader)
        await sb.until(lambda: _leads(standby[0]), "the standby leads once the Lease expires")

        async def placed_again() -> Any:
            picked = _selected(await _claims(sb))
            return picked if all(picked.values()) and cordoned not in picked.values() else None

        again = await sb.until(placed_again, "the new leader withdraws the pin it cannot use and selects again")
        assert not any(p["spec"].get("nodeName") for p in await _gang(sb, "train")), "nothing bound before the claims"
        sb.advance(31)  # the provisioner takes 30 s

        async def running() -> Any:
            pods = await _gang(sb, "train")
            return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = await sb.until(running, "the gang runs whole on nodes it can use")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        for ctrl, task in replicas:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await ctrl.client.aclose()
    assert not any(seen_partial), "no moment shows the gang partly bound"
    assert cordoned not in {p["spec"]["nodeName"] for p in pods}
    assert set(again.values()) == {p["spec"]["nodeName"] for p in pods}
    claims, volumes = await _claims(sb), await _volumes(sb)
    for p in pods:
        c = claims[p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        assert _host_of(volumes[c["spec"]["volumeName"]]) == p["spec"]["nodeName"], "each volume is on its pod's node"
    assert len(volumes) == 2, "the abandoned provisioning on the cordoned node left no volume"


async def _leader(replicas: list[tuple[KubeController, asyncio.Task[Any]]]) -> tuple[KubeController, asyncio.Task[Any]] | None:
    return next((r for r in replicas if r[0].is_leader), None)


async def _leads(ctrl: KubeController) -> bool:
    return ctrl.is_leader
