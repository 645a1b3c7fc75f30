"""``usher generate``: a synthetic LLM-cluster scenario from a few parameters.

(``usher generate --from openb`` is ``usher.generate_openb``.)

Public traces have no multi-node gangs with topology needs, which is what an LLM cluster runs
most of its GPU-hours as. This writes a scenario that has them, from nodes, racks, queues, load
and a seed (the only source of randomness: the same parameters give the same file):

- ``nodes`` nodes of 8 H100s (two NVLink islands of four), cut into ``racks`` racks of
  consecutive nodes, four racks to a block; levels ``usher/block``, ``usher/rack``, hostname.
- ``queues`` queues in one cohort, the GPUs split evenly as nominal quota, free to borrow and
  to reclaim; traffic is skewed (queue i gets a share proportional to ``queues - i``), so some
  queues borrow while others lend.
- Jobs: single pods of 1, 2, 4 and 8 GPUs, and gangs of 2 to 32 pods x 8 GPUs (16 to 256 GPUs,
  never more than half the cluster). A gang that fits a rack requires one rack; a bigger one
  prefers one block (and spreads further when no block has room). Priorities low / normal / high;
  gangs checkpoint every 30 minutes; estimates overshoot run times by 0-100%.
- Run times are drawn from the Philly trace's run-time distribution
  (``philly-derived/philly_runtime_from_alibaba_v2020_analysis.csv``, read at generate time),
  clipped to 1 minute .. ``max_runtime``.
- Arrivals: jobs are drawn until their GPU-seconds reach ``load`` times what the cluster can
  do in ``days``; their submit times are then spread uniformly at random over those days (a
  Poisson process given its count), so the offered load is ``load`` whatever the draws.
"""

from __future__ import annotations

import csv
import math
import os
import random
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

RUNTIME_FILE = Path("philly-derived") / "philly_runtime_from_alibaba_v2020_analysis.csv"
RUNTIME_COLUMN = "runtime"
TRACES_ENV = "USHER_TRACES"
DEFAULT_TRACES = Path("..") / "shared" / "traces"
GPUS_PER_NODE = 8
RACKS_PER_BLOCK = 4
MAX_GANG_GPUS = 256
MIN_RUNTIME = 60.0


class GenerateSource(StrEnum):
    """What ``usher generate --from`` builds: these synthetic LLM gangs, or openb's pods at a load."""

    LLM = "llm"
    OPENB = "openb"


class GenerateError(ValueError):
    """Bad parameters or an unusable run-time file; the message says which and where."""


@dataclass(frozen=True, slots=True)
class Shape:
    """A kind of job: ``pods`` pods of ``gpus`` GPUs each, drawn with relative ``weight``."""

    pods: int
    gpus: int
    weight: float

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus


SHAPES: tuple[Shape, ...] = (
    Shape(1, 1, 0.28),
    Shape(1, 2, 0.08),
    Shape(1, 4, 0.12),
    Shape(1, 8, 0.20),
    Shape(2, 8, 0.09),
    Shape(4, 8, 0.07),
    Shape(8, 8, 0.05),
    Shape(16, 8, 0.07),
    Shape(32, 8, 0.04),
)

PRIORITIES: tuple[tuple[str, float], ...] = (("low", 0.3), ("normal", 0.6), ("high", 0.1))


@dataclass(frozen=True, slots=True)
class GenerateParams:
    nodes: int = 64
    racks: int = 8
    queues: int = 4
    load: float = 0.8
    seed: int = 0
    days: float = 7.0
    max_runtime: float = 86400.0

    def check(self) -> None:
        problems = []
        if self.nodes < 1:
            problems.append(f"--nodes must be 1 or more (got {self.nodes})")
        if not 1 <= self.racks <= max(self.nodes, 1):
            problems.append(f"--racks must be between 1 and the number of nodes, {self.nodes} (got {self.racks})")
        if self.queues < 1:
            problems.append(f"--queues must be 1 or more (got {self.queues})")
        problems += pace_problems(self.load, self.days, self.max_runtime)
        if problems:
            raise GenerateError("; ".join(problems))


def pace_problems(load: float, days: float, max_runtime: float) -> list[str]:
    """What is wrong with the flags every generator shares: --load, --days, --max-runtime."""
    problems = []
    if not 0 < load < math.inf:
        problems.append(f"--load must be above 0 (got {load:g})")
    if not 0 < days < math.inf:
        problems.append(f"--days must be above 0 (got {days:g})")
    if not MIN_RUNTIME <= max_runtime < math.inf:
        problems.append(f"--max-runtime must be at least {MIN_RUNTIME:g}s (got {max_runtime:g}s)")
    return problems


def traces_dir(option: Path | None) -> Path:
    """Where the traces are: the option, else ``$USHER_TRACES``, else ``../shared/traces``."""
    if option is not None:
        return option
    env = os.environ.get(TRACES_ENV)
    return Path(env) if env else DEFAULT_TRACES


def read_runtimes(traces: Path) -> list[float]:
    """The Philly run times (seconds) from ``traces``; a one-line error naming file and line."""
    path = traces / RUNTIME_FILE
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise GenerateError(
            f"cannot read the run-time distribution {path}: {exc.strerror or exc}; "
            f"point --traces (or ${TRACES_ENV}) at the folder that holds {RUNTIME_FILE}"
        ) from None
    values: list[float] = []
    with handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None or RUNTIME_COLUMN not in reader.fieldnames:
            raise GenerateError(f"{path}:1: expected a header row with a {RUNTIME_COLUMN!r} column")
        for row in reader:
            text = (row.get(RUNTIME_COLUMN) or "").strip()
            try:
                value = float(text)
            except ValueError:
                raise GenerateError(
                    f"{path}:{reader.line_num}: column {RUNTIME_COLUMN}: expected a number of seconds (got {text!r})"
                ) from None
            if not 0 <= value < math.inf:
                raise GenerateError(
                    f"{path}:{reader.line_num}: column {RUNTIME_COLUMN}: expected 0 or more seconds (got {text!r})"
                )
            values.append(value)
    if not values:
        raise GenerateError(f"{path}: no run times in the file")
    return values


def _weighted(rng: random.Random, items: list, weights: list[float]):
    return rng.choices(items, weights=weights, k=1)[0]


def generate(params: GenerateParams, runtimes: list[float]) -> str:
    """The scenario as YAML text (pure: everything random comes from ``params.seed``)."""
    params.check()
    rng = random.Random(params.seed)
    total_gpus = params.nodes * GPUS_PER_NODE
    per_rack = math.ceil(params.nodes / params.racks)
    racks = math.ceil(params.nodes / per_rack)
    per_block = per_rack * RACKS_PER_BLOCK
    biggest = min(MAX_GANG_GPUS, max(GPUS_PER_NODE, total_gpus // 2))
    shapes = [s for s in SHAPES if s.total_gpus <= biggest]
    queue_names = [f"team-{i + 1}" for i in range(params.queues)]
    queue_weights = [float(params.queues - i) for i in range(params.queues)]
    window = params.days * 86400.0

    name = f"llm-{params.nodes}n-load{params.load:g}-seed{params.seed}"
    lines = [
        f"# usher generate --nodes {params.nodes} --racks {params.racks} --queues {params.queues} "
        f"--load {params.load:g} --seed {params.seed} --days {params.days:g} --max-runtime {params.max_runtime:g}",
        f"# {params.nodes} nodes x {GPUS_PER_NODE} GPUs in {racks} racks of {per_rack} nodes, "
        f"{RACKS_PER_BLOCK} racks to a block; run times from the Philly trace "
        "(Microsoft, via alibaba/clusterdata cluster-trace-gpu-v2020, CC BY 4.0).",
        f"name: {name}",
        "topology: {levels: [usher/block, usher/rack, kubernetes.io/hostname]}",
        "priorityClasses: {low: 10, normal: 100, high: 1000}",
        "nodeGroups:",
        f"  - {{prefix: gpu, count: {params.nodes}, layout: {{usher/rack: {per_rack}, usher/block: {per_block}}},",
        f"     template: {{gpus: {GPUS_PER_NODE}, gpuModel: H100, gpuMemory: 80Gi, cpu: 96, memory: 1Ti,"
        " nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]}}",
        "queues:",
    ]
    base, extra = divmod(total_gpus, params.queues)
    for i, q in enumerate(queue_names):
        quota = base + (1 if i < extra else 0)
        lines.append(
            f"  - {{name: {q}, cohort: cluster, quota: {{gpu: {quota}}},"
            " preemption: {withinQueue: LowerPriority, reclaimWithinCohort: Any}}"
        )
    lines.append("jobs:")
    target = params.load * total_gpus * window
    drawn: list[tuple[Shape, float]] = []
    offered = 0.0
    while offered < target:
        shape = _weighted(rng, shapes, [s.weight for s in shapes])
        runtime = min(max(rng.choice(runtimes), MIN_RUNTIME), params.max_runtime)
        drawn.append((shape, runtime))
        offered += shape.total_gpus * runtime
    submits = sorted(rng.uniform(0.0, window) for _ in drawn)
    for count, ((shape, runtime), now) in enumerate(zip(drawn, submits), start=1):
        queue = _weighted(rng, queue_names, queue_weights)
        priority = _weighted(rng, [p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])
        estimate = math.ceil(runtime * rng.uniform(1.0, 2.0))
        pod = f"count: {shape.pods}, gpu: {shape.gpus}, cpu: {10 * shape.gpus}, memory: {100 * shape.gpus}Gi"
        extras = ""
        if shape.pods > 1:
            if shape.pods <= per_rack:
                pod += ", topology: {required: usher/rack}"
            else:
                pod += ", topology: {preferred: usher/block}"
            extras = ", checkpointEvery: 30m"
        lines.append(
            f"  - {{name: job-{count:05d}, queue: {queue}, submit: {now:.0f}, priority: {priority},"
            f" duration: {runtime:.0f}, estimate: {estimate}{extras}, pods: [{{{pod}}}]}}"
        )
    return "\n".join(lines) + "\n"
