"""The ``usher`` policy of the FGD comparison: the engine's own placement, called as the engine does.

The trace nodes become an engine ``ClusterState`` with fragmentation-aware placement turned on
(``ClusterState.enable_fragmentation``: a workload profile, and the run's node order as the tie
order, the same order the baselines break ties with). The profile starts from the pod list, the
same knowledge of the workload that FGD's typical pods come from (with each pod's memory, which
the engine counts and FGD does not), and keeps learning from every arrival as the engine learns
from every submission. Each
arriving pod becomes a one-pod ``Job``; it is shown to the profile (``observe_job``, what
``Engine.submit`` does) and placed by ``Placer.place_gang``, the call the scheduling cycle makes.
The placement found is then mirrored into the comparison's arrays for the metrics.
"""

from __future__ import annotations

import numpy as np

from usher.engine.policy.fragmentation import WorkloadProfile, memory_units
from usher.engine.policy.placement import Placer, observe_job
from usher.engine.state import ClusterState, Job, Node, PodGroup

from .cluster import ClusterArrays
from .workload import NodeList, PodList

QUEUE = "fgd"


class EnginePlacement:
    """Places arriving pods with the engine's ``Placer`` on an engine ``ClusterState``."""

    def __init__(self, nodes: NodeList, pods: PodList, cluster: ClusterArrays) -> None:
        self.pods = pods
        state = ClusterState("fgd", [], {})
        for i, name in enumerate(nodes.names):
            gpus = int(nodes.gpus[i])
            state.add_node(Node(id=i, name=name, labels={}, gpu_model=nodes.models[int(nodes.model[i])],
                                gpu_memory=0, gpu_count=gpus, islands=[list(range(gpus))] if gpus else [],
                                cpu=int(nodes.cpu[i]), memory=int(nodes.memory[i])))
        state.finish_building()
        profile = WorkloadProfile()
        for demand, memory in zip(pods.demands, pods.memory):
            profile.observe(demand._replace(memory=memory_units(int(memory))))
        state.enable_fragmentation(profile, tie_rank=[int(r) for r in cluster.rank])
        self.state = state
        self._groups: dict[int, PodGroup] = {}
        self._next_id = 0

    def _group(self, index: int) -> PodGroup:
        group = self._groups.get(index)
        if group is None:
            d = self.pods.demands[index]
            group = PodGroup("pod", 1, d.gpu_milli * d.gpus, d.cpu, int(self.pods.memory[index]), d.models)
            self._groups[index] = group
        return group

    def place(self, index: int, rng: np.random.Generator) -> tuple[int, list[int]] | None:
        group = self._group(index)
        job = Job(id=self._next_id, name=f"{self.pods.names[index]}#{self._next_id}", queue=QUEUE, submit=0.0,
                  priority=0, duration=None, estimate=None, preemptible=True, checkpoint_every=None,
                  min_count=1, groups=(group,))
        self._next_id += 1
        observe_job(self.state, job)
        placer = Placer(self.state)
        if not placer.place_gang(job, [1]):
            return None
        placement = placer.taken[0]
        return placement.node_id, list(placement.gpus)
