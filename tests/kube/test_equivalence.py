"""A scenario scheduled through the API (fake server, real client, kubelet stand-in) places every
pod where the direct replay does, at the same moment."""

from __future__ import annotations

import pytest

from harness import Cluster, per_job, replay_starts, scenario_of

GANGS_AND_BACKFILL = """
name: through-the-api
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - prefix: n
    count: 4
    layout: {usher/rack: 2}
    template: {gpus: 8, gpuModel: H100, cpu: 64, memory: 512Gi, nvlink: [[0,1,2,3],[4,5,6,7]]}
queues:
  - {name: research, namespaceSelector: {}, cohort: lab, quota: {gpu: 24}}
  - {name: product, namespaceSelector: {}, cohort: lab, quota: {gpu: 8}}
jobs:
  - {name: pretrain, queue: research, submit: 0, duration: 3000, pods: [{name: worker, count: 2, gpu: 8, topology: {required: usher/rack}}]}
  - {name: small-1, queue: product, submit: 10, duration: 600, pods: [{gpu: 4}]}
  - {name: notebook, queue: product, submit: 20, duration: 900, pods: [{gpu: 0.5}]}
  - {name: notebook-2, queue: product, submit: 20, duration: 900, pods: [{gpu: 0.25}]}
  - {name: big, queue: research, submit: 30, duration: 2000, pods: [{name: w, count: 3, gpu: 8}]}
  - {name: filler, queue: product, submit: 40, duration: 500, pods: [{gpu: 2}]}
  - {name: later, queue: research, submit: 700, duration: 300, pods: [{gpu: 8}]}
events:
  - {at: 100, action: cordon, node: n-04}
  - {at: 2500, action: uncordon, node: n-04}
"""


@pytest.fixture
async def cluster(tmp_path):
    made: list[Cluster] = []

    async def make(text: str, **options: bool) -> Cluster:
        c = Cluster(scenario_of(text), tmp_path)
        await c.start(**options)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.stop()


@pytest.mark.parametrize("world_in_process", [False, True], ids=["kubelet-over-http", "kubelet-in-process"])
async def test_gangs_shares_backfill_and_cordon_place_as_the_replay_does(cluster, world_in_process):
    """Also with the kubelet stand-in on the server's store, as ``usher sandbox`` runs it."""
    c = await cluster(GANGS_AND_BACKFILL, world_in_process=world_in_process)
    await c.controller()
    await c.play()
    direct = per_job([(f"default/{j}", t, n, g) for j, t, n, g in replay_starts(c.scenario)])
    through_api = per_job([(f"default/{j}", t, n, g) for j, t, n, g in c.starts()])
    assert through_api == direct
    # every job ran to completion through the API: each pod Succeeded
    assert len(c.world.finished) == sum(p.count for j in c.scenario.jobs for p in j.pods)
