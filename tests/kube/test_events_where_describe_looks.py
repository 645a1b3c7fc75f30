"""usher's Events are where ``kubectl describe`` looks for them: it lists an object's Events by
``involvedObject.uid`` (a Node's also by its name as uid, the kubelet's convention), so an Event
recorded without the uid is in no ``describe``. Checked with the kubectl the project installs on
the objects operator commands are recorded on: a Node (cordon) and the queue ConfigMap (setQuota)."""

from __future__ import annotations

import asyncio

from kubectl import Kubectl
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from usher.engine.channel import Command
from usher.engine.enums import Action


async def test_operator_commands_are_in_kubectl_describe_of_the_node_and_the_configmap(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp)
    kubectl = Kubectl(sb.kubeconfig)
    assert await sb.usher.apply_command(Command(Action.CORDON, node="gpu-0", actor="ops")) == "cordoned"
    said = await sb.usher.apply_command(Command(Action.SET_QUOTA, queue="research", quota={"gpu": 40_000}, actor="ops"))
    assert said == "set quota gpu=40"

    described = await asyncio.to_thread(kubectl.ok, "describe", "node", "gpu-0")
    events = described.split("\nEvents:", 1)[1]
    assert "UsherCordon" in events and "ops: cordon gpu-0: cordoned" in events, described
    described = await asyncio.to_thread(kubectl.ok, "describe", "configmap", "usher-queues", "-n", "usher-system")
    events = described.split("\nEvents:", 1)[1]
    assert "UsherSetQuota" in events and "ops: setQuota research: set quota gpu=40" in events, described
