"""The newcomer's trial of issue 35: the claim-based PyTorchJob example runs whole on the sandbox.

docs/sandbox.md gives the commands: serve ``fixtures/examples/research.yaml`` with ``usher
sandbox``, run usher, ``kubectl create namespace research``, ``kubectl apply`` the example. This
test reads that block of commands from the page, builds the sandbox from the fixture it names as
``usher sandbox`` does, runs usher's controller against it and runs the page's kubectl commands
as written, with the real kubectl, on the example as it ships. Every pod must run, every claim be
``allocated,reserved`` (as ``kubectl get resourceclaims`` prints it), and each pod's two GPUs lie
behind one PCIe root and in one NVLink island of its node.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from kubectl import Kubectl
from sandboxes import UsherOnSandbox, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from usher.engine.scenario import parse_scenario
from usher.sandbox.world import World

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "sandbox.md"
EXAMPLE = "deploy/examples/pytorchjob-claims.yaml"
DRA = "/apis/resource.k8s.io/v1"
ISLAND = "sandbox.usher/nvlinkIsland"
ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"


def the_trial() -> list[list[str]]:
    """The commands of the page's shell block that applies the example, comments dropped, as argv."""
    blocks = re.findall(r"^```sh\n(.*?)^```", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)
    [block] = [b for b in blocks if EXAMPLE in b]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


@pytest.mark.timeout(180)
async def test_the_claim_based_pytorchjob_runs_whole_as_the_sandbox_page_says(sb: UsherOnSandbox,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the page's paths are the repository's
    trial = the_trial()
    [serve] = [argv for argv in trial if argv[:2] == ["usher", "sandbox"]]
    assert [a[a.index("-f") + 1] for a in trial if a[:2] == ["kubectl", "apply"]] == [EXAMPLE], trial
    assert any(argv[:2] == ["usher", "--no-ui"] for argv in trial), "the page runs usher"

    scenario = parse_scenario((ROOT / serve[2]).read_text(), file=serve[2])
    world = World(scenario, sb.server.url, sb.clock, server=sb.server, verify=sb.server.verify)
    try:
        await world.setup()  # what `usher sandbox` makes before it serves: nodes, queues, namespaces
    finally:
        await world.aclose()
    await sb.start_usher(sb.tmp, queues=None)
    kubectl = Kubectl(sb.kubeconfig)
    for argv in trial:
        if argv[0] == "kubectl" and argv[1] in ("create", "apply"):
            await asyncio.to_thread(kubectl.ok, *argv[1:])

    async def whole() -> Any:
        pods = await sb.pods("", "research")
        claims = (await sb.req("GET", f"{DRA}/namespaces/research/resourceclaims"))["items"]
        running = len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)
        done = len(claims) == 4 and all((c.get("status") or {}).get("reservedFor") for c in claims)
        return (pods, claims) if running and done else None

    pods, claims = await sb.until(whole, "every pod of the example Running, every claim allocated and reserved", deadline=120)
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "llm-claims-master-0", "llm-claims-worker-0", "llm-claims-worker-1", "llm-claims-worker-2"]
    listed = await asyncio.to_thread(kubectl.ok, "get", "resourceclaims", "-n", "research", "--no-headers")
    assert [line.split()[1] for line in listed.splitlines()] == ["allocated,reserved"] * 4, listed

    slices = (await sb.req("GET", f"{DRA}/resourceslices"))["items"]
    attributes = {(s["spec"]["nodeName"], d["name"]): d["attributes"] for s in slices for d in s["spec"]["devices"]}
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    held: set[tuple[str, str]] = set()
    for claim in claims:
        [reserved] = claim["status"]["reservedFor"]
        pod = by_uid[reserved["uid"]]
        node = pod["spec"]["nodeName"]
        [term] = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert term["matchFields"][0]["values"] == [node]
        devices = [(node, r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]
        assert len(devices) == 2 and not held & set(devices), (claim["metadata"]["name"], devices)
        held.update(devices)
        assert len({attributes[d][ISLAND]["int"] for d in devices}) == 1, devices
        assert len({attributes[d][ROOT_ATTRIBUTE]["string"] for d in devices}) == 1, devices
        gpus = sorted(int(d.removeprefix("gpu-")) for _, d in devices)
        assert sorted(int(i) for i in pod["metadata"]["annotations"]["usher/gpus"].split(",")) == gpus
