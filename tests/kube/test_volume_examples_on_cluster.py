"""The newcomer's trial of issue 31, replayed: the two volume examples run whole on the sandbox.

docs/sandbox.md (where the README sends a newcomer) gives the commands: serve a fixture with
``usher sandbox``, run usher, ``kubectl create namespace research``, ``kubectl apply`` each
example. This test reads that block of commands from the page, builds the sandbox from the
fixture it names exactly as ``usher sandbox`` does (the scenario's nodes and queue config, over
HTTP), runs usher's controller against it, and runs the page's kubectl commands as written with
the real kubectl on the example files as they ship. Every pod of both examples must run and every
claim be Bound; the PyTorchJob's pods in the zone of their shared dataset volume. Once, the
PyTorchJob example named a queue the sandbox did not serve and its ``zonal`` class had no zone to
provision in: it never started, and nothing noticed.
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
EXAMPLES = ("deploy/examples/pytorchjob-dataset.yaml", "deploy/examples/leaderworkerset-claims.yaml")
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def the_trial() -> list[list[str]]:
    """The commands of the page's shell block that applies the first volume example, comments
    dropped, as argv."""
    blocks = re.findall(r"^```sh\n(.*?)^```", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)
    [block] = [b for b in blocks if EXAMPLES[0] in b]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


def _affinity(volume: dict[str, Any]) -> tuple[str, str]:
    [term] = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    [expr] = term["matchExpressions"]
    [value] = expr["values"]
    return expr["key"], value


@pytest.mark.timeout(180)
async def test_both_volume_examples_run_whole_as_the_sandbox_page_says(sb: UsherOnSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the page's paths are the repository's
    trial = the_trial()
    [serve] = [argv for argv in trial if argv[:2] == ["usher", "sandbox"]]
    applies = [argv for argv in trial if argv[:2] == ["kubectl", "apply"]]
    assert sorted(a[a.index("-f") + 1] for a in applies) == sorted(EXAMPLES), trial
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
        claims = (await sb.req("GET", "/api/v1/namespaces/research/persistentvolumeclaims"))["items"]
        running = len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)
        bound = len(claims) == 5 and all(c["status"].get("phase") == "Bound" for c in claims)
        return (pods, claims) if running and bound else None

    pods, claims = await sb.until(whole, "every pod of both examples Running, every claim Bound", deadline=120)
    assert sorted(p["metadata"]["name"] for p in pods) == ["llm-cache-0", "llm-cache-0-1", "resnet-data-master-0", "resnet-data-worker-0"]
    assert sorted(c["metadata"]["name"] for c in claims) == [
        "imagenet", "model-cache-llm-cache-0", "model-cache-llm-cache-0-1",
        "resnet-data-master-0-scratch", "resnet-data-worker-0-scratch",
    ]
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in (await sb.req("GET", "/api/v1/nodes"))["items"]}
    volumes = {v["spec"]["claimRef"]["name"]: v for v in (await sb.req("GET", "/api/v1/persistentvolumes"))["items"]}
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert _affinity(volumes["imagenet"])[0] == ZONE
    dataset_zone = _affinity(volumes["imagenet"])[1]
    for name in ("resnet-data-master-0", "resnet-data-worker-0"):
        assert nodes[where[name]][ZONE] == dataset_zone, (name, where[name])
        assert _affinity(volumes[f"{name}-scratch"]) == (HOST, where[name])
    assert _affinity(volumes["model-cache-llm-cache-0"]) == (HOST, where["llm-cache-0"])
    assert _affinity(volumes["model-cache-llm-cache-0-1"]) == (HOST, where["llm-cache-0-1"])
    listed = await asyncio.to_thread(kubectl.ok, "get", "pvc", "-n", "research", "--no-headers")
    assert [line.split()[1] for line in listed.splitlines()] == ["Bound"] * 5, listed
