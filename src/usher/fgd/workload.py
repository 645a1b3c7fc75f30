"""The inputs of the FGD comparison: the node list and the pod list, as flat arrays.

Both files are read by the scenario's openb trace importer (``usher.engine.scenario.traces``),
so a malformed row is reported exactly as in a scenario: file, line and column. A pod becomes
a ``PodDemand`` (CPU, milli-GPUs per GPU, GPU count, accepted models) plus its memory; a node
keeps its CPU, memory, GPU count and model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from usher.engine.policy.fragmentation import PodDemand
from usher.engine.scenario.errors import Locator, Problem, ScenarioError
from usher.engine.scenario.models import TraceFormat, TraceSpec
from usher.engine.scenario.traces import import_traces
from usher.engine.state import MILLI

MAX_GPUS_PER_NODE = 8
"""Columns of the per-GPU free matrix; wider nodes are refused with a clear error."""

TRACE_QUEUE = "fgd"


@dataclass(frozen=True)
class NodeList:
    names: list[str]
    cpu: np.ndarray  # millicores
    memory: np.ndarray  # bytes
    gpus: np.ndarray
    model: np.ndarray  # index into `models`
    models: list[str]

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True)
class PodList:
    names: list[str]
    demands: list[PodDemand]
    memory: np.ndarray  # bytes

    def gpu_milli(self, i: int) -> int:
        d = self.demands[i]
        return d.gpu_milli * d.gpus


def load_workload(nodes_file: Path, pods_file: Path) -> tuple[NodeList, PodList]:
    """Read both CSV files; raises ``ScenarioError`` naming file, line and column on bad rows."""
    problems = [
        Problem(str(path), "", None, "no such file") for path in (nodes_file, pods_file) if not path.is_file()
    ]
    if problems:
        raise ScenarioError(problems)
    spec = TraceSpec(format=TraceFormat.OPENB, nodes=str(nodes_file.resolve()),
                     pods=str(pods_file.resolve()), queue=TRACE_QUEUE)
    imported = import_traces([spec], Path("/"), Locator("command line", lambda _path: None))
    if imported.problems:
        raise ScenarioError(imported.problems)
    too_wide = [n for n in imported.nodes if n.gpus > MAX_GPUS_PER_NODE]
    if too_wide:
        first = imported.nodes.index(too_wide[0])
        origin = imported.node_origins[first]
        raise ScenarioError([Problem(origin.file, "gpu", origin.line,
                                     f"at most {MAX_GPUS_PER_NODE} GPUs per node (got {too_wide[0].gpus})")])
    if not imported.nodes or sum(n.gpus for n in imported.nodes) == 0:
        raise ScenarioError([Problem(str(nodes_file), "", None, "no node with a GPU in the node list")])
    if not imported.jobs:
        raise ScenarioError([Problem(str(pods_file), "", None, "no pod in the pod list")])
    models = sorted({n.gpu_model or "" for n in imported.nodes})
    model_index = {m: i for i, m in enumerate(models)}
    nodes = NodeList(
        names=[n.name for n in imported.nodes],
        cpu=np.array([n.cpu for n in imported.nodes], dtype=np.int64),
        memory=np.array([n.memory for n in imported.nodes], dtype=np.int64),
        gpus=np.array([n.gpus for n in imported.nodes], dtype=np.int64),
        model=np.array([model_index[n.gpu_model or ""] for n in imported.nodes], dtype=np.int64),
        models=models,
    )
    demands: list[PodDemand] = []
    memory: list[int] = []
    for job in imported.jobs:
        pod = job.pods[0]
        models_accepted = frozenset(pod.gpu_model) if pod.gpu_model else None
        demands.append(PodDemand.of(round(pod.gpu * MILLI), int(pod.cpu), models_accepted))
        memory.append(int(pod.memory))
    pods = PodList(names=[j.name for j in imported.jobs], demands=demands, memory=np.array(memory, dtype=np.int64))
    return nodes, pods
