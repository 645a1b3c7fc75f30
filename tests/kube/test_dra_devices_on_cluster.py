"""usher's view of a node's GPUs follows the devices its claims were given, on the sandbox over HTTP.

A claim's CEL selector may exclude the GPUs usher's placement chose for the pod: the PreBind then
gives other devices of the node. usher must count those as taken (and the ones it chose first
as free), or it keeps placing later gangs on devices a claim holds: their claims cannot be
allocated there, and they wait for ever although another node has room.
"""

from __future__ import annotations

from typing import Any

from sandboxes import UsherOnSandbox, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_dra_on_cluster import CLAIMS, PODS, claim_pod, claim_spec, make_claim, setup

ISLAND = "sandbox.usher/nvlinkIsland"


def bus_id(minor: int) -> str:
    """The PCI bus ID the driver stand-in publishes for GPU ``minor``."""
    return f"0000:{0x18 + 0x10 * minor:02x}:00.0"


def devices_of(claim: dict[str, Any]) -> set[str]:
    return {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}


async def test_pods_whose_selectors_take_only_some_gpus_never_share_a_device_and_both_run(sb: UsherOnSandbox) -> None:
    await setup(sb, "gpu-1", "gpu-2")
    await sb.start_usher(sb.tmp)
    # GPUs 1 and 5 only: one in each NVLink island (placement would take 0 and 1, one island)
    pick = f"device.attributes['resource.kubernetes.io'].pciBusID in ['{bus_id(1)}', '{bus_id(5)}']"
    await make_claim(sb, "two", claim_spec(2, (pick,)))
    await sb.create(PODS, claim_pod("first", claim="two"))
    first = await sb.pod_where("first", lambda p: p["status"].get("phase") == "Running")
    assert devices_of(await sb.get(f"{CLAIMS}/two")) == {"gpu-1", "gpu-5"}
    assert sorted(first["metadata"]["annotations"]["usher/gpus"].split(",")) == ["1", "5"]
    # usher's own view (what its placement, why-pending and the console's heatmap read): GPUs 1
    # and 5 taken, 0 free, as on the cluster
    node = sb.usher.mirror.state.node(first["spec"]["nodeName"])
    assert [i for i, free in enumerate(node.gpu_free) if free == 0] == [1, 5], node.gpu_free
    # and so after a rebuild from the caches (the claims' allocations are the truth)
    sb.usher.mirror.dirty = True
    await sb.until(lambda: _async(not sb.usher.mirror.dirty), "usher rebuilds its view")
    node = sb.usher.mirror.state.node(first["spec"]["nodeName"])
    assert [i for i, free in enumerate(node.gpu_free) if free == 0] == [1, 5], node.gpu_free
    # four GPUs of one island: the first pod's node has none left whole (it holds 1 and 5)
    four = claim_spec(4)
    four["devices"]["constraints"] = [{"matchAttribute": ISLAND}]
    await make_claim(sb, "four", four)
    await sb.create(PODS, claim_pod("second", claim="four"))
    second = await sb.pod_where("second", lambda p: p["status"].get("phase") == "Running")
    assert second["spec"]["nodeName"] != first["spec"]["nodeName"]
    given = devices_of(await sb.get(f"{CLAIMS}/four"))
    assert len(given) == 4 and len({int(d.removeprefix("gpu-")) // 4 for d in given}) == 1, given


async def _async(value: Any) -> Any:
    return value
