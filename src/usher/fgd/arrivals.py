"""The arrival order of the FGD comparison: shuffle with the seed, tune to a target load.

As in the paper's simulator (``SortClusterPods``, ``TunePodsByNodeTotalResource``): the pods are
shuffled with the seed; if their GPU request is above ``target`` times the cluster's GPUs, pods
are dropped at random until it is not; if below, pods drawn at random from the list are appended
until the next one would pass the target. Pods then arrive one by one in that order.

(The simulator compares a drawn pod's per-GPU share, not its whole request, with the room left;
we compare the whole request, so the tuned load never passes the target.)
"""

from __future__ import annotations

import numpy as np

from .workload import PodList

TUNE_TARGET = 1.3
"""Arrived GPU demand at the end of a run, as a share of the cluster's GPUs (130%)."""


def arrival_order(pods: PodList, total_gpus: int, seed: int, target: float = TUNE_TARGET) -> list[int]:
    """Indexes into ``pods`` in arrival order (a pod may appear more than once)."""
    rng = np.random.default_rng(seed)
    order = [int(i) for i in rng.permutation(len(pods.names))]
    limit = target * total_gpus * 1000
    requested = sum(pods.gpu_milli(i) for i in order)
    while requested > limit and order:
        removed = order.pop(int(rng.integers(len(order))))
        requested -= pods.gpu_milli(removed)
    if requested < limit and any(pods.gpu_milli(i) for i in range(len(pods.names))):
        while True:
            drawn = int(rng.integers(len(pods.names)))
            if requested + pods.gpu_milli(drawn) > limit:
                break
            order.append(drawn)
            requested += pods.gpu_milli(drawn)
    return order
