"""A sandbox in a thread with two 8-GPU nodes, as a kubelet would have registered them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from usher.engine.scenario import parse_scenario
from usher.sandbox.apiserver import ServerThread
from usher.sandbox.objects import node_object

TWO_NODES = parse_scenario(
    "name: t\n"
    "nodes: [{name: gpu-1, gpus: 8, cpu: 64, memory: 512Gi}, {name: gpu-2, gpus: 8, cpu: 64, memory: 512Gi}]\n"
    "queues: [{name: research, quota: {gpu: 16}}]\njobs: []\n"
)


@contextmanager
def two_node_sandbox() -> Iterator[ServerThread]:
    with ServerThread() as thread:
        for spec in TWO_NODES.all_nodes():
            thread.call(thread.server.store.create, "nodes", node_object(spec))
        yield thread
