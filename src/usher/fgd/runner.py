"""Runs the FGD comparison: every policy on every seed, in worker processes, and the summary.

One run = one policy, one seed: the pods arrive in the seed's order (``arrivals``), each is
placed by the policy or left unplaced, and the timeline gives the allocation and fragmentation
curves. The summary per policy is the mean and the standard deviation over seeds of the
allocation ratio at 100% and 130% arrived and of the fragment at 90% arrived, in % of the
cluster's GPUs.

Every policy sees the same arrivals for a seed, so two policies' runs are paired: ``paired_lead``
gives one policy's lead over another per headline metric as the mean and the standard deviation
over seeds of the per-seed difference (positive: the first does better; less fragment is better).
A lead counts as beyond the seed spread when it exceeds that paired standard deviation and each
policy's own standard deviation (``Lead.clear``).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from usher.engine.policy.fragmentation import FragmentationModel

from .arrivals import arrival_order
from .cluster import ClusterArrays
from .metrics import Timeline, curve
from .policies import CHOOSERS, PolicyName
from .workload import NodeList, PodList, load_workload

HEADLINE_POINTS = {"alloc100": ("alloc", 100), "alloc130": ("alloc", 130), "frag90": ("frag", 90)}
LOWER_IS_BETTER = frozenset({"frag90"})
LEADER, BASELINE = "usher", "fgd"
"""The pair ``paired_lead`` reports by default: usher's lead over FGD."""


@dataclass
class SeedResult:
    policy: str
    seed: int
    alloc100: float
    alloc130: float
    frag90: float
    placed: int
    unplaced: int
    seconds: float
    alloc_curve: list[float | None] = field(repr=False)
    frag_curve: list[float | None] = field(repr=False)


@dataclass
class PolicySummary:
    alloc100: float
    alloc130: float
    frag90: float
    alloc100_sd: float
    alloc130_sd: float
    frag90_sd: float
    alloc_curve: list[float | None]
    seeds: dict[int, SeedResult]


def run_seed(policy: PolicyName, seed: int, nodes: NodeList, pods: PodList,
             fragmentation: FragmentationModel) -> SeedResult:
    """One run: arrivals in the seed's order, placed one by one by ``policy``."""
    started = time.perf_counter()
    order = arrival_order(pods, nodes.total_gpus, seed)
    cluster = ClusterArrays(nodes, fragmentation, order_seed=seed)
    rng = np.random.default_rng(seed)
    timeline = Timeline.empty()
    place = placer(policy, cluster, nodes, pods)
    arrived = placed = 0
    for index in order:
        demand = pods.demands[index]
        arrived += demand.gpu_milli * demand.gpus
        choice = place(index, rng)
        if choice is not None:
            node, slots = choice
            cluster.take(node, slots, demand, int(pods.memory[index]))
            placed += 1
        timeline.record(arrived, cluster.used_milli, cluster.fragment_total)
    alloc = curve(timeline, timeline.allocated, cluster.total_milli)
    frag = curve(timeline, timeline.fragment, cluster.total_milli)
    return SeedResult(
        policy=str(policy), seed=seed,
        alloc100=_at(alloc, 100), alloc130=_at(alloc, 130), frag90=_at(frag, 90),
        placed=placed, unplaced=len(order) - placed, seconds=time.perf_counter() - started,
        alloc_curve=alloc, frag_curve=frag,
    )


def _at(values: list[float | None], x: int) -> float:
    value = values[x]
    return float("nan") if value is None else value


def placer(policy: PolicyName, cluster: ClusterArrays, nodes: NodeList, pods: PodList):
    if policy == PolicyName.USHER:
        from .engine_policy import EnginePlacement

        return EnginePlacement(nodes, pods, cluster).place
    chooser = CHOOSERS[policy]

    def place(index: int, rng: np.random.Generator):
        return chooser(cluster, pods.demands[index], int(pods.memory[index]), rng)

    return place


# -- many runs ---------------------------------------------------------------------------

_WORKER: dict[str, object] = {}


def _init_worker(nodes_file: str, pods_file: str) -> None:
    nodes, pods = load_workload(Path(nodes_file), Path(pods_file))
    _WORKER["inputs"] = (nodes, pods, FragmentationModel.from_demands(pods.demands))


def _run_task(task: tuple[str, int]) -> SeedResult:
    nodes, pods, fragmentation = _WORKER["inputs"]  # type: ignore[misc]
    return run_seed(PolicyName(task[0]), task[1], nodes, pods, fragmentation)


def run_bench(nodes_file: Path, pods_file: Path, seeds: list[int], policies: list[PolicyName],
              jobs: int | None = None) -> dict[str, PolicySummary]:
    """Every policy on every seed; ``jobs`` worker processes (default: one per core)."""
    load_workload(nodes_file, pods_file)  # bad input fails here, once, in this process
    tasks = [(str(p), s) for p in policies for s in seeds]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    if workers == 1:
        _init_worker(str(nodes_file), str(pods_file))
        results = [_run_task(t) for t in tasks]
    else:
        with ProcessPoolExecutor(workers, initializer=_init_worker,
                                 initargs=(str(nodes_file), str(pods_file))) as pool:
            results = list(pool.map(_run_task, tasks))
    return summarise(results, policies)


def summarise(results: list[SeedResult], policies: list[PolicyName]) -> dict[str, PolicySummary]:
    out: dict[str, PolicySummary] = {}
    for policy in policies:
        mine = [r for r in results if r.policy == str(policy)]
        out[str(policy)] = PolicySummary(
            alloc100=_mean([r.alloc100 for r in mine]),
            alloc130=_mean([r.alloc130 for r in mine]),
            frag90=_mean([r.frag90 for r in mine]),
            alloc100_sd=_sd([r.alloc100 for r in mine]),
            alloc130_sd=_sd([r.alloc130 for r in mine]),
            frag90_sd=_sd([r.frag90 for r in mine]),
            alloc_curve=_mean_curve([r.alloc_curve for r in mine]),
            seeds={r.seed: r for r in mine},
        )
    return out


@dataclass(frozen=True)
class Lead:
    """One policy's lead over another on one metric, paired by seed (positive: it does better)."""

    mean: float
    sd: float
    """Standard deviation over seeds of the per-seed difference."""
    own_sd: float
    """The larger of the two policies' own standard deviations over seeds."""
    seeds: int

    @property
    def beyond_paired_sd(self) -> bool:
        return self.mean > self.sd

    @property
    def clear(self) -> bool:
        """Ahead by more than the seed spread: the paired sd and each policy's own sd."""
        return self.mean > self.sd and self.mean > self.own_sd


def paired_lead(summary: dict[str, PolicySummary], leader: str = LEADER,
                baseline: str = BASELINE) -> dict[str, Lead] | None:
    """``leader``'s lead over ``baseline`` per headline metric; None unless both ran."""
    if leader not in summary or baseline not in summary:
        return None
    a, b = summary[leader], summary[baseline]
    seeds = sorted(set(a.seeds) & set(b.seeds))
    out: dict[str, Lead] = {}
    for metric in HEADLINE_POINTS:
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        diffs = [sign * (getattr(a.seeds[s], metric) - getattr(b.seeds[s], metric)) for s in seeds]
        own = max(getattr(a, f"{metric}_sd"), getattr(b, f"{metric}_sd"))
        out[metric] = Lead(_mean(diffs), _sd(diffs), own, len(seeds))
    return out


def _mean(values: list[float]) -> float:
    """Mean over the seeds that reached the point (NaN where none did)."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.fmean(known) if known else math.nan


def _sd(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.stdev(known) if len(known) > 1 else 0.0


def _mean_curve(curves: list[list[float | None]]) -> list[float | None]:
    out: list[float | None] = []
    for points in zip(*curves):
        known = [p for p in points if p is not None]
        out.append(statistics.fmean(known) if known else None)
    return out


def _number(value: float | int) -> float | int | None:
    """Rounded for JSON; None where a run never reached that point (NaN is not JSON)."""
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    return value


def as_json(summary: dict[str, PolicySummary]) -> dict:
    """The ``--json`` object: per policy the headline figures, their spread and every seed."""
    policies = {}
    for name, s in summary.items():
        policies[name] = {
            "alloc100": _number(s.alloc100), "alloc130": _number(s.alloc130), "frag90": _number(s.frag90),
            "spread": {"alloc100": _number(s.alloc100_sd), "alloc130": _number(s.alloc130_sd),
                       "frag90": _number(s.frag90_sd)},
            "seeds": {
                str(seed): {k: _number(v)
                            for k, v in asdict(r).items()
                            if k in ("alloc100", "alloc130", "frag90", "placed", "unplaced")}
                for seed, r in sorted(s.seeds.items())
            },
        }
    out: dict = {"policies": policies}
    lead = paired_lead(summary)
    if lead is not None:
        out["lead"] = {f"{LEADER}-{BASELINE}": {
            metric: {"mean": _number(x.mean), "sd": _number(x.sd), "beyond_paired_sd": x.beyond_paired_sd,
                     "beyond_each_sd": x.clear}
            for metric, x in lead.items()}}
    return out
