"""Synthetic scenarios for the benchmarks, written as scenario YAML (the path users take).

Run times are drawn with the seed from the Philly run-time distribution in
``../shared/traces/philly-derived`` (clipped to 1 minute .. 1 day); without that file, from a
log-uniform stand-in with the same median. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

PHILLY = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly-derived" / "philly_runtime_from_alibaba_v2020_analysis.csv"


def runtimes(rng: random.Random, n: int) -> list[int]:
    if PHILLY.exists():
        with PHILLY.open() as f:
            values = [float(row["runtime"]) for row in csv.DictReader(f)]
        values = [v for v in values if v > 0]
        return [int(min(max(rng.choice(values), 60), 86400)) for _ in range(n)]
    return [int(math.exp(rng.uniform(math.log(60), math.log(86400)))) for _ in range(n)]


def b1_placement(nodes: int = 5000, jobs: int = 10000, seed: int = 0) -> str:
    """B1: nodes x 8 GPUs, ``jobs`` single-pod jobs of 1-8 GPUs submitted at once."""
    rng = random.Random(seed)
    lines = [
        "name: b1-placement",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, template: {{gpus: 8, gpuModel: H100, cpu: 96, memory: 1Ti,"
        " nvlink: [[0,1,2,3],[4,5,6,7]]}}",
        "queues: [{name: q}]",
        "jobs:",
    ]
    for i in range(jobs):
        g = rng.randint(1, 8)
        lines.append(f"  - {{name: j{i}, queue: q, duration: {rng.randint(600, 7200)}, pods: [{{gpu: {g}, cpu: {4 * g}, memory: {32 * g}Gi}}]}}")
    return "\n".join(lines) + "\n"


def b2_busy(nodes: int = 1000, jobs: int = 20000, days: float = 7.0, seed: int = 0, load: float = 0.9) -> str:
    """B2: racks of 8 nodes in blocks of 8 racks, 4 cohorted queues, a week of mixed jobs.

    Sizes: 1, 2, 4, 8 GPUs on one node, and gangs of 2-4 pods x 8 GPUs (16-32 GPUs) that require
    one rack. Run times from Philly, scaled (each capped at two days) so that the work offered
    is ``load`` times what the cluster can do over the submission window.
    """
    rng = random.Random(seed)
    horizon = days * 86400
    shapes = [(1, 1, 0.35), (1, 2, 0.15), (1, 4, 0.15), (1, 8, 0.2), (2, 8, 0.07), (3, 8, 0.04), (4, 8, 0.04)]
    weights = [w for _, _, w in shapes]
    picks = rng.choices(range(len(shapes)), weights=weights, k=jobs)
    times = runtimes(rng, jobs)
    cap = 2 * 86400
    target = load * nodes * 8 * horizon

    def offered(scale: float) -> float:
        return sum(shapes[p][0] * shapes[p][1] * min(cap, max(60, t * scale)) for p, t in zip(picks, times))

    lo, hi = 0.0, 1.0
    while offered(hi) < target and hi < 1e6:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if offered(mid) < target else (lo, mid)
    scale = hi
    lines = [
        "name: b2-busy",
        "topology: {levels: [usher/block, usher/rack, kubernetes.io/hostname]}",
        "priorityClasses: {low: 10, normal: 100, high: 1000}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, layout: {{usher/rack: 8, usher/block: 64}},"
        " template: {gpus: 8, gpuModel: H100, cpu: 96, memory: 1Ti, nvlink: [[0,1,2,3],[4,5,6,7]]}}",
        "queues:",
    ]
    per = nodes * 8 // 4
    for q in range(4):
        lines.append(
            f"  - {{name: team-{q}, cohort: lab, quota: {{gpu: {per}}}, weight: {1 + q % 2},"
            " preemption: {withinQueue: LowerPriority, reclaimWithinCohort: LowerPriority}}"
        )
    lines.append("jobs:")
    prios = ["low", "normal", "normal", "high"]
    for i, (p, t) in enumerate(zip(picks, times)):
        count, gpu, _ = shapes[p]
        submit = int(rng.uniform(0, horizon))
        duration = int(min(cap, max(60, t * scale)))
        estimate = int(duration * rng.uniform(1.0, 2.0))
        topo = ", topology: {required: usher/rack}" if count > 1 else ""
        lines.append(
            f"  - {{name: j{i}, queue: team-{rng.randrange(4)}, submit: {submit}, priority: {rng.choice(prios)},"
            f" duration: {duration}, estimate: {estimate}, checkpointEvery: 1800,"
            f" pods: [{{count: {count}, gpu: {gpu}, cpu: {8 * gpu}, memory: {64 * gpu}Gi{topo}}}]}}"
        )
    return "\n".join(lines) + "\n"


def b3_scale(nodes: int = 5000, jobs: int = 100000, seed: int = 0) -> str:
    """B3: 5,000 nodes and 100,000 jobs of mixed shapes submitted at once."""
    rng = random.Random(seed)
    lines = [
        "name: b3-scale",
        "topology: {levels: [usher/block, usher/rack, kubernetes.io/hostname]}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {nodes}, layout: {{usher/rack: 8, usher/block: 64}}, template: {{gpus: 8, gpuModel: H100, cpu: 96, memory: 1Ti}}}}",
        "queues: [{name: a, cohort: c, quota: {gpu: 20000}}, {name: b, cohort: c, quota: {gpu: 20000}}]",
        "jobs:",
    ]
    for i in range(jobs):
        count, gpu = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)])
        topo = ", topology: {required: usher/rack}" if count > 1 else ""
        lines.append(
            f"  - {{name: j{i}, queue: {'ab'[i % 2]}, duration: {rng.randint(600, 86400)}, pods: [{{count: {count}, gpu: {gpu}{topo}}}]}}"
        )
    return "\n".join(lines) + "\n"
