"""Whatever the provisioner does, no gang is ever partly bound: a seeded property test on the sandbox.

Each case (a seed) builds one sandbox: a gang of N pods, each with its own delayed claim, some of a
slow class (the provisioner takes a while), some told to fail once; the test then moves the
sandbox's clock by random steps while it watches the gang's pods over HTTP. At every observation
the gang is bound whole or not at all, and it ends running whole, each claim's volume on its
pod's node. A handful of seeds keep it short; each prints what it drew, so a failure can be
replayed.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from sandboxes import UsherOnSandbox, node, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)
from test_volumes_on_cluster import CLASSES, PVCS, _claims, _gang, _host_of, _partly_bound, _volumes, claim, storage_class, worker

PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_no_gang_is_ever_partly_bound_whatever_the_provisioner_does(sb: UsherOnSandbox, seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(2, 4)
    slow = {i for i in range(size) if rng.random() < 0.5}
    failing = {i for i in range(size) if rng.random() < 0.4}
    print(f"seed {seed}: {size} pods, slow claims {sorted(slow)}, failing claims {sorted(failing)}")
    for n in range(3):
        await sb.create("/api/v1/nodes", node(f"gpu-{n}"))
    await sb.create(CLASSES, storage_class("slow-local", **{"sandbox.usher/delay": f"{rng.choice([5, 20, 45])}s"}))
    await sb.start_usher(sb.tmp)
    for i in failing:
        sb.server.controllers.provisioner.fail("default", f"c-{i}", f"injected failure of c-{i}")
    observations: list[bool] = []

    async def watch() -> None:
        while True:
            observations.append(_partly_bound(await _gang(sb, "g")))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    pods: list[dict[str, Any]] = []
    try:
        for i in range(size):
            await sb.create(PVCS, claim(f"c-{i}", klass="slow-local" if i in slow else "standard"))
            await sb.create(PODS, worker(f"w-{i}", 4, [f"c-{i}"], gang="g", size=size))
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while loop.time() < end:
            pods = await _gang(sb, "g")
            observations.append(_partly_bound(pods))
            if len(pods) == size and all(p["status"].get("phase") == "Running" for p in pods):
                break
            sb.advance(rng.choice([0, 1, 3, 10]))
            await asyncio.sleep(rng.choice([0.02, 0.1, 0.3]))
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert len(observations) > 10
    assert not any(observations), f"seed {seed}: the gang was seen partly bound"
    assert all(p["status"].get("phase") == "Running" for p in pods), f"seed {seed}: the gang never ran whole"
    claims, volumes = await _claims(sb), await _volumes(sb)
    for p in pods:
        c = claims[p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        assert _host_of(volumes[c["spec"]["volumeName"]]) == p["spec"]["nodeName"], f"seed {seed}: a volume is elsewhere"
