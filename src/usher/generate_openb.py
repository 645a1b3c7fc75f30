"""``usher generate --from openb``: the Alibaba openb pods at a chosen offered load.

The openb trace replayed at its own pace leaves its 1,213 GPU nodes nearly empty (0.2% of the
GPUs busy), so every policy ties. This writes a scenario that loads the same cluster with the
same pods at a target load instead:

- Nodes: the 1,213 rows of ``alibaba-gpu-v2023/openb_node_list_gpu_node.csv`` (6,212 GPUs),
  each listed with its GPU count and model, CPU and memory, so the file stands alone.
- Pods: each arrival is a row of ``openb_pod_list_default.csv`` drawn uniformly at random, with
  its CPU, memory, GPU count or GPU share and GPU models, and its own run time
  (``deletion_time - scheduled_time``, so size and run time keep their correlation). The 897
  pods the trace never scheduled have no run time and are not drawn. CPU-only pods are drawn
  too: they take no GPU but take CPU and memory.
- Run times are capped at ``max_runtime`` (default 2 h). The trace's run times are heavy-tailed
  (median 10 min, p90 2.2 h, p99 32 h, max 145 days). The replay starts in steady state (below),
  but those first pods are placed all at once; only once they have all ended, one cap later, is
  every placement one the policy made as pods came and went. 2 h keeps 90% of the pods' run
  times as the trace has them and makes that turnover take two hours; a cap of a day would need
  a replay of days at ~130,000 pods a day, too slow to compare five policies.
- Arrivals: pods are drawn until their GPU-seconds (GPUs or share x run time) reach ``load``
  times the cluster's GPUs over the window from one cap before the start to the end of
  ``days``; their submit times are spread uniformly at random over it (a Poisson process given
  its count). Pods submitted before the start and still running then are submitted at 0 with
  what is left of their run; the others before the start are dropped. So the replay starts with
  the pods a cluster at that load would be running, and the offered GPU load
  ``sum(gpu x duration) / (GPUs x window)`` of the pods arriving in the window is ``load`` up to
  the draws' noise (under 1% at 6,212 GPUs over hours).
- Times are whole multiples of ``TICK`` (10 s; run times rounded up, at least one tick): at
  5 arrivals a second a replay would otherwise run a scheduling cycle every second or so, each
  costing a walk over 7,000 running pods; batched, it runs at most one every 10 s.

- Priority from the trace's QoS class (``qos``): ``LS`` (latency-sensitive) and ``Guaranteed``
  pods get priority 100 and may not be preempted, ``Burstable`` 50 and may not be preempted,
  ``BE`` (best effort, 42% of the pods) priority 0 and preemptible. So a policy that preempts
  can start a latency-sensitive pod at once on a full cluster by stopping best-effort ones,
  and one that orders by priority starts it first; a policy that does neither makes it queue
  behind best-effort pods (``engine.scenario.traces.QOS_CLASSES``, as a scenario's ``traces:``
  import reads them).

One queue, ``openb``, without quota; every job's estimate is its run time. ``seed`` is the only
source of randomness: the same parameters give the same file.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from usher.engine.scenario.errors import Locator
from usher.engine.scenario.models import JobSpec, NodeSpec, TraceFormat, TraceSpec
from usher.engine.scenario.traces import MIB, import_traces
from usher.generate import pace_problems

OPENB_FOLDER = Path("alibaba-gpu-v2023")
NODE_FILE = "openb_node_list_gpu_node.csv"
POD_FILE = "openb_pod_list_default.csv"
QUEUE = "openb"
DEFAULT_DAYS = 0.5
DEFAULT_MAX_RUNTIME = 7200.0
TICK = 10.0
"""Submit times and run times are whole multiples of this many seconds (see the module's doc)."""


class OpenbError(ValueError):
    """Bad parameters or unusable trace files; the message names the flag or the file."""


@dataclass(frozen=True, slots=True)
class OpenbParams:
    """What ``usher generate --from openb`` takes."""

    load: float = 0.9
    seed: int = 0
    days: float = DEFAULT_DAYS
    max_runtime: float = DEFAULT_MAX_RUNTIME

    def check(self) -> None:
        problems = pace_problems(self.load, self.days, self.max_runtime)
        if problems:
            raise OpenbError("; ".join(problems))

    @property
    def window(self) -> float:
        """The submission window in seconds."""
        return self.days * 86400.0


@dataclass(frozen=True, slots=True)
class OpenbTrace:
    """The cluster and the pods to draw from: nodes in file order, pods with a run time."""

    nodes: list[NodeSpec]
    pods: list[JobSpec]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def read_openb(traces: Path) -> OpenbTrace:
    """The node list and the scheduled pods of the default pod list under ``traces``.

    A missing or malformed file is one ``OpenbError`` naming the file (and the line and column
    of the first bad rows), as ``usher check`` words them for a scenario's ``traces:`` import.
    """
    folder = traces / OPENB_FOLDER
    hint = f"point --traces (or $USHER_TRACES) at the folder that holds {OPENB_FOLDER}/"
    for name in (NODE_FILE, POD_FILE):
        if not (folder / name).is_file():
            raise OpenbError(f"cannot read {folder / name}: no such file; {hint}")
    spec = TraceSpec.model_construct(format=TraceFormat.OPENB, nodes=NODE_FILE, pods=POD_FILE, queue=QUEUE, prefix="")
    read = import_traces([spec], folder, Locator("--traces", lambda _path: None))
    if read.problems:
        raise OpenbError("; ".join(str(p) for p in read.problems[:3]))
    pods = [job for job in read.jobs if job.duration is not None and job.duration > 0]
    if not read.nodes or not any(n.gpus for n in read.nodes):
        raise OpenbError(f"{folder / NODE_FILE}: no GPU nodes in the file")
    if not any(job.pods[0].gpu for job in pods):
        raise OpenbError(f"{folder / POD_FILE}: no GPU pod with a run time (deletion_time - scheduled_time) in the file")
    return OpenbTrace(read.nodes, pods)


def ticks_up(seconds: float, cap: float) -> float:
    """``seconds`` up to a whole number of ticks (one at least), and no more than ``cap`` allows."""
    most = max(1, math.floor(cap / TICK))
    return TICK * min(max(1, math.ceil(seconds / TICK)), most)


def _quantity_mib(value: int) -> str:
    return f"{value // MIB}Mi" if value % MIB == 0 else str(value)


def _node_line(node: NodeSpec) -> str:
    model = f", gpuModel: {node.gpu_model}" if node.gpu_model else ""
    cpu = f", cpu: {node.cpu}m" if node.cpu is not None else ""
    memory = f", memory: {_quantity_mib(node.memory)}" if node.memory is not None else ""
    return f"  - {{name: {node.name}, gpus: {node.gpus}{model}{cpu}{memory}}}"


def _job_line(number: int, source: JobSpec, submit: float, duration: float) -> str:
    pod = source.pods[0]
    gpu = f"{pod.gpu:g}"
    models = f", gpuModel: [{', '.join(pod.gpu_model)}]" if pod.gpu_model else ""
    rank = f", priority: {source.priority}" if source.priority else ""
    shield = "" if source.preemptible else ", preemptible: false"
    return (
        f"  - {{name: {source.name}-{number:06d}, queue: {QUEUE}, submit: {submit:.0f}, duration: {duration:.0f}"
        f"{rank}{shield}, pods: [{{gpu: {gpu}{models}, cpu: {pod.cpu}m, memory: {_quantity_mib(pod.memory)}}}]}}"
    )


def generate_openb(params: OpenbParams, trace: OpenbTrace) -> str:
    """The scenario as YAML text (pure: everything random comes from ``params.seed``)."""
    params.check()
    rng = random.Random(params.seed)
    gpus = trace.gpus
    # arrivals from one cap before the start: those still running at 0 are submitted at 0 with
    # what is left of their run, so the replay starts in steady state instead of from empty
    start = -params.max_runtime
    span = params.window - start
    target = params.load * gpus * span
    drawn: list[tuple[JobSpec, float]] = []
    offered = 0.0
    while offered < target:
        pod = rng.choice(trace.pods)
        duration = ticks_up(pod.duration or 0.0, params.max_runtime)
        drawn.append((pod, duration))
        offered += pod.pods[0].gpu * duration
    submits = [rng.uniform(start, params.window) for _ in drawn]
    jobs: list[tuple[float, float, JobSpec]] = []
    running = 0
    for (pod, duration), submit in zip(drawn, submits):
        if submit < 0:
            if submit + duration <= 0:
                continue
            running += 1
            duration, submit = submit + duration, 0.0
        jobs.append((TICK * math.floor(submit / TICK), ticks_up(duration, params.max_runtime), pod))
    jobs.sort(key=lambda job: job[0])
    lines = [
        (f"# usher generate --from openb --load {params.load:g} --seed {params.seed} --days {params.days:g}"
         f" --max-runtime {params.max_runtime:g}"),
        (f"# {len(trace.nodes):,} GPU nodes ({gpus:,} GPUs); {len(jobs):,} pods drawn from the {len(trace.pods):,}"
         " scheduled pods of the Alibaba GPU trace v2023 (openb, default pod list), run times capped at"
         f" {params.max_runtime:g} s, {running:,} of them running at the start (submitted at 0 with what is left);"
         " priority by QoS class: LS and Guaranteed 100, Burstable 50, not preemptible; BE 0, preemptible."),
        f"name: openb-load{params.load:g}-seed{params.seed}",
        f"queues: [{{name: {QUEUE}}}]",
        "nodes:",
        *(_node_line(node) for node in trace.nodes),
        "jobs:",
    ]
    for number, (submit, duration, pod) in enumerate(jobs, start=1):
        lines.append(_job_line(number, pod, submit, duration))
    return "\n".join(lines) + "\n"
