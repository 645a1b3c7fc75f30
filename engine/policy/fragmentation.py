"""GPU fragmentation measured against the expected workload (the FGD paper, ATC'23).

Free GPU capacity is only useful if a pod that is likely to arrive can use it. The FGD paper
("Beware of Fragmentation", Weng et al.) measures a node's *fragment* as the free milli-GPUs
that the typical pods of the workload could not use there, weighted by how common each typical
pod is:

- a typical pod that asks for no GPU, or that the node's GPU model does not accept, can use none
  of the free GPUs: all of them count as fragment for it;
- a typical pod that fits (enough GPUs with at least its share free, and enough CPU) can use the
  GPUs with at least its share free: only the GPUs with less free than its share are fragment;
- a typical pod that does not fit (too few such GPUs, or too little CPU): all free GPUs count.

The paper counts CPU and GPUs only. usher counts memory too (``PodDemand.memory``): a GPU on a
node whose memory is spoken for is as lost as one beside no free CPU. On openb's 8-GPU nodes
(384 GiB) eight 1-GPU pods of 48 GiB use up the memory, so a node mixing them with lighter pods
can end with a whole GPU and 13 cores free and no pod able to use them, which memory-blind FGD
scores as free room.

A pod without GPUs is scored against a stricter fragment that counts pods (``count_pods``): a
typical pod can use only as many free GPUs as the pods of its kind that the node's CPU and
memory would still hold. The paper's fragment asks only whether one of them fits, so it lets
CPU-only pods take the CPU beside free GPUs wherever one GPU pod would still fit.

GPU pods are also charged for GPU capacity they *strand* (``stranded``): free GPU capacity that
some typical pod of one GPU could use by its size but that none of those pods can use for the
node's free CPU and memory. The paper's fragment barely sees this: it weighs a GPU's free amount
by the typical pods that could not use it, and most could not use a partly used GPU anyway (a
GPU with 530 milli free is fragment for every pod but the shares of 530 or less), so taking the
last cores beside it changes the fragment by the small weight of those shares, while the 530 is
then lost for good. So ``best_placement`` counts a GPU pod's change of the stranded capacity in
full on top of the change of the fragment, while GPUs are the cluster's scarcer resource (the
typical pods ask less CPU per GPU than the cluster has; where CPU is the scarcer one, the cores
kept beside a GPU are worth more to the pods elsewhere than the GPU). The case it was written
for, memory-heavy GPU shares left alone on GPUs whose node others then filled, and what it
changed on the FGD comparison, are in docs/results.md.

The *typical pods* are the most common pod demands (CPU, GPU share or count, accepted models)
that together make up ``POPULARITY`` (95%) of the pods, re-weighted to sum to one.

``FragmentationModel.node_fragment`` evaluates that sum for one node. The typical pods are
grouped by GPU demand and models, and each group keeps its CPU thresholds sorted with the
cumulative weight, so a node costs one pass over its GPUs per group and a bisection for CPU.
Results are memoised per node shape (model, free CPU, sorted free GPUs, free memory while some
typical pod asks for memory) and by whether pods are counted: a cluster has far
fewer shapes than nodes, and a node that changes usually returns to a shape seen before.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

MILLI = 1000
"""Milli-GPUs per GPU (the engine's unit; ``state.MILLI``)."""

MEMORY_UNIT = 1 << 20
"""Bytes per unit of memory that fragmentation counts in (MiB; ``state.MEMORY_UNIT``): a pod's
request rounds up and a node's free memory down, so a pod counts as fitting only where it does
(to within a MiB), and nodes that differ by a few bytes of free memory share a shape. (In whole
GiB, a node with 58.5 GiB free looked to have 47 left after a pod of 10.2 GiB, not 48.)"""

POPULARITY = 0.95
"""Share of the pods that the typical pods must cover (the paper's simulator uses 95%)."""

PROTECT_PRESSURE = 0.6
"""Pressure at which a GPU model is kept for the pods restricted to it (``protected_models``):
measured on the FGD comparison's model-constrained workloads (0.5-0.7 lead fgd on all four)."""

COUNT_PODS_WITHOUT_GPUS = True
"""Score pods without GPUs by the fragment that counts pods (``best_placement``)."""

MEMO_LIMIT = 200_000
"""Node shapes remembered before the memo starts over (bounds memory on long runs)."""


def memory_units(memory_bytes: int) -> int:
    """A request of this many bytes in ``MEMORY_UNIT``, rounded up."""
    return -(-memory_bytes // MEMORY_UNIT)


class PodDemand(NamedTuple):
    """What one pod asks for, as fragmentation sees it."""

    cpu: int
    """Millicores."""
    gpu_milli: int
    """Milli-GPUs per GPU: 1000 for whole GPUs, the share for a shared GPU, 0 for none."""
    gpus: int
    """GPUs: the count for whole GPUs, 1 for a share, 0 for none."""
    models: frozenset[str] | None = None
    """Accepted GPU models; None accepts any."""
    memory: int = 0
    """Memory in ``MEMORY_UNIT`` (MiB), rounded up; 0 asks for none (FGD's memory-blind pods)."""

    @classmethod
    def of(cls, gpu_milli_total: int, cpu: int, models: frozenset[str] | None = None,
           memory_bytes: int = 0) -> PodDemand:
        """From the engine's units: a pod's total milli-GPUs (2000 = two GPUs, 460 = a share)
        and its memory in bytes."""
        memory = memory_units(memory_bytes)
        if gpu_milli_total <= 0:
            return cls(cpu, 0, 0, None, memory)
        if gpu_milli_total < MILLI:
            return cls(cpu, gpu_milli_total, 1, models, memory)
        return cls(cpu, MILLI, gpu_milli_total // MILLI, models, memory)

    def memory_blind(self) -> PodDemand:
        """The same demand without its memory."""
        return self._replace(memory=0) if self.memory else self


@dataclass(frozen=True, slots=True)
class TypicalPod:
    demand: PodDemand
    weight: float


def typical_pods(counts: Mapping[PodDemand, float], popularity: float = POPULARITY) -> tuple[TypicalPod, ...]:
    """The most common demands covering ``popularity`` of all pods, weights summing to one.

    Ties in count are broken by the larger demand first (CPU, then share, then GPU count), so
    the choice does not depend on the order the pods were seen in. Which demands are common is
    decided without memory, and each chosen demand's weight is then shared among the memory
    requests seen with it: memory splits pods that are otherwise alike (openb's 1-GPU pods of
    12 cores ask for 16 or 24 GiB), and cutting the split demands at ``popularity`` would drop
    common kinds of pod from the typical ones.
    """
    blind: dict[PodDemand, float] = {}
    for demand, count in counts.items():
        key = demand.memory_blind()
        blind[key] = blind.get(key, 0.0) + count
    chosen = _most_common(blind, popularity)
    weight = {pod.demand: pod.weight for pod in chosen}
    return tuple(TypicalPod(demand, weight[key] * count / blind[key])
                 for demand, count in counts.items() if (key := demand.memory_blind()) in weight)


def _most_common(counts: Mapping[PodDemand, float], popularity: float) -> tuple[TypicalPod, ...]:
    total = float(sum(counts.values()))
    if total <= 0:
        return ()
    ranked = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0].cpu, kv[0].gpu_milli, kv[0].gpus, sorted(kv[0].models or ())),
        reverse=True,
    )
    chosen: list[tuple[PodDemand, float]] = []
    covered = 0.0
    for demand, count in ranked:
        if covered >= popularity * total:
            break
        chosen.append((demand, count))
        covered += count
    return tuple(TypicalPod(demand, count / covered) for demand, count in chosen)


@dataclass(slots=True)
class _DemandGroup:
    """Typical pods with one GPU demand and model set: CPU thresholds with cumulative weight,
    and each pod's (CPU, memory, weight) in CPU order."""

    gpu_milli: int
    gpus: int
    models: frozenset[str] | None
    cpu_thresholds: list[int] = field(default_factory=list)
    cumulative: list[float] = field(default_factory=list)
    needs: list[tuple[int, int, float]] = field(default_factory=list)
    asks_memory: bool = False

    def weight_fitting_cpu(self, cpu_free: int) -> float:
        i = bisect_right(self.cpu_thresholds, cpu_free)
        return self.cumulative[i - 1] if i else 0.0

    def weight_fitting(self, cpu_free: int, memory_free: int | None) -> float:
        """Weight of the pods that fit this much free CPU and memory (None: memory unbounded)."""
        if memory_free is None or not self.asks_memory:
            return self.weight_fitting_cpu(cpu_free)
        weight = 0.0
        for cpu, memory, w in self.needs:
            if cpu > cpu_free:
                break
            if memory <= memory_free or not memory:
                weight += w
        return weight


class FragmentationModel:
    """Fragment of a node against a set of typical pods, in milli-GPUs."""

    def __init__(self, pods: Iterable[TypicalPod], wide: Iterable[PodDemand] = ()) -> None:
        self.pods: tuple[TypicalPod, ...] = tuple(pods)
        #: every distinct demand of several whole GPUs seen, typical or not (rare wide pods fall
        #: outside the typical pods, yet may fit only a few nodes: ``policy.placement`` keeps
        #: those nodes for them)
        self.wide: frozenset[PodDemand] = frozenset(wide)
        groups: dict[tuple[int, int, frozenset[str] | None], dict[tuple[int, int], float]] = {}
        gpu_demand: dict[frozenset[str] | None, float] = {}  # milli-GPUs by accepted models
        several = 0.0  # milli-GPUs of pods of several whole GPUs
        for pod in self.pods:
            d = pod.demand
            if d.gpus <= 0:
                continue  # a pod without GPUs can use no free GPU: it only adds to the base term
            by_need = groups.setdefault((d.gpu_milli, d.gpus, d.models), {})
            by_need[d.cpu, d.memory] = by_need.get((d.cpu, d.memory), 0.0) + pod.weight
            milli = pod.weight * d.gpus * d.gpu_milli
            gpu_demand[d.models] = gpu_demand.get(d.models, 0.0) + milli
            if d.gpus > 1:
                several += milli
        self.groups: list[_DemandGroup] = []
        for (milli, gpus, models), by_need in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            group = _DemandGroup(milli, gpus, models)
            group.needs = [(cpu, memory, weight) for (cpu, memory), weight in sorted(by_need.items())]
            group.asks_memory = any(memory for _, memory, _ in group.needs)
            running = 0.0
            for cpu, _, weight in group.needs:
                running += weight
                if group.cpu_thresholds and group.cpu_thresholds[-1] == cpu:
                    group.cumulative[-1] = running
                else:
                    group.cpu_thresholds.append(cpu)
                    group.cumulative.append(running)
            self.groups.append(group)
        #: whether some typical pod asks for memory (else memory never changes a fragment)
        self.counts_memory = any(group.asks_memory for group in self.groups)
        total = sum(gpu_demand.values())
        #: share of the typical pods' GPU demand from pods of several whole GPUs
        self.several_gpu_share = several / total if total else 0.0
        #: each accepted-model set of the typical pods that name one, with its share of the
        #: typical pods' GPU demand (see ``protected_models``)
        self.model_sets: tuple[tuple[frozenset[str], float], ...] = tuple(
            (models, amount / total) for models, amount in gpu_demand.items() if models is not None
        )
        gpu_milli = sum(pod.weight * pod.demand.gpus * pod.demand.gpu_milli for pod in self.pods)
        #: millicores the typical pods ask per milli-GPU, pods without GPUs included (inf
        #: without GPU pods): compared with the cluster's to tell whether GPUs are its scarcer
        #: resource (``best_placement``'s ``count_stranded``)
        self.cpu_per_gpu = (sum(pod.weight * pod.demand.cpu for pod in self.pods) / gpu_milli
                            if gpu_milli else math.inf)
        #: the groups of one GPU (shares and single whole GPUs), by share
        self._single = [group for group in self.groups if group.gpus == 1]
        self._memo: dict[tuple[str, int, tuple[int, ...], int | None, bool], float] = {}
        self._stranded: dict[tuple[str, int, tuple[int, ...], int | None], int] = {}
        self._placements: dict[tuple[str, int, tuple[int, ...], PodDemand, int | None, bool], tuple[int, int]] = {}

    @classmethod
    def from_demands(cls, demands: Iterable[PodDemand], popularity: float = POPULARITY) -> FragmentationModel:
        counts: dict[PodDemand, float] = {}
        for d in demands:
            counts[d] = counts.get(d, 0.0) + 1.0
        return cls(typical_pods(counts, popularity), wide_demands(counts))

    def protected_models(self, free_by_model: Mapping[str, int]) -> frozenset[str]:
        """GPU models that the pods restricted to them are expected to need most of.

        FGD's fragment is blind to scarcity: a pod that could run on any GPU model is as happy
        on the few nodes of a model that a quarter of the pods insist on as on the common one,
        and those pods then find their model full while GPUs of another model stay free. So
        each restricted set's share of the GPU demand is spread over its models in proportion
        to their free GPUs, and a model's *pressure* is that demand over the model's share of
        the cluster's free GPUs: at 1 the restricted pods alone would take the model's fair
        share of what is left. A model at ``PROTECT_PRESSURE`` or more is protected
        (``policy.placement`` keeps pods that can go elsewhere off it among near-equal scores).
        """
        free_total = sum(free_by_model.values())
        if not self.model_sets or free_total <= 0:
            return frozenset()
        pressure: dict[str, float] = {}
        for models, share in self.model_sets:
            free = sum(free_by_model.get(m, 0) for m in models)
            if free <= 0:
                continue
            for m in models:
                if free_by_model.get(m, 0) > 0:
                    pressure[m] = pressure.get(m, 0.0) + share * free_total / free
        return frozenset(m for m, p in pressure.items() if p >= PROTECT_PRESSURE)

    def node_fragment(self, model: str, cpu_free: int, gpu_free: Sequence[int],
                      memory_free: int | None = None, count_pods: bool = False) -> float:
        """Free milli-GPUs on this node that the typical pods could not use, weighted.
        ``memory_free`` is in ``MEMORY_UNIT``; None counts the node's memory as unbounded.

        With ``count_pods`` a typical pod can use only as many free GPUs as the pods of its
        kind that fit the node's free CPU and memory would take, not every GPU with room as
        soon as one of them fits (the paper's measure): 40 cores beside 8 free GPUs hold two
        pods of 16 cores, so six of the GPUs are fragment for them.
        """
        if not self.counts_memory:
            memory_free = None
        key = (model, cpu_free, tuple(sorted(gpu_free, reverse=True)), memory_free, count_pods)
        value = self._memo.get(key)
        if value is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            value = self._evaluate(model, cpu_free, key[2], memory_free, count_pods)
            self._memo[key] = value
        return value

    def stranded(self, model: str, cpu_free: int, free_desc: tuple[int, ...], memory_free: int | None = None) -> int:
        """Free milli-GPUs on this node that some typical pod of one GPU could use by its size
        and GPU model, but that none of those pods can use for the node's free CPU and memory
        (``free_desc`` in any order; ``memory_free`` in ``MEMORY_UNIT``, None: unbounded)."""
        if not self.counts_memory:
            memory_free = None
        key = (model, cpu_free, free_desc, memory_free)
        value = self._stranded.get(key)
        if value is None:
            if len(self._stranded) >= MEMO_LIMIT:
                self._stranded.clear()
            value = 0
            for free in set(free_desc):
                if free > 0 and self._strands(model, cpu_free, free, memory_free):
                    value += free * free_desc.count(free)
            self._stranded[key] = value
        return value

    def _strands(self, model: str, cpu_free: int, free: int, memory_free: int | None) -> bool:
        """Whether a GPU with ``free`` milli-GPUs free is too big for the typical pods of one GPU
        that the node's CPU and memory still hold, though some of them would fit it."""
        sized = False
        for group in self._single:
            if group.gpu_milli > free:
                break
            if group.models is not None and model not in group.models:
                continue
            if group.weight_fitting(cpu_free, memory_free) > 0:
                return False
            sized = True
        return sized

    def best_placement(self, model: str, cpu_free: int, free_desc: tuple[int, ...],
                       demand: PodDemand, memory_free: int | None = None,
                       count_stranded: bool = False) -> tuple[int, int]:
        """Score (0-100) of placing ``demand`` on a node of this shape, and for a shared GPU the
        free amount of the GPU to take (-1 otherwise). The node must fit the pod.

        The score is the paper's: ``100 * sigmoid(decrease / 1000)`` of the node's fragment,
        truncated to an integer, so placements that differ by a few milli-GPUs tie and the
        tie-break (see ``policy.placement``) decides among them.

        A pod without GPUs is scored by the fragment that counts pods (``node_fragment``'s
        ``count_pods``). The paper's fragment asks only whether one typical pod still fits
        beside the free GPUs, so it sees no harm in a CPU-only pod taking 50 of a node's 96
        cores beside 8 free GPUs, and CPU-only pods use up the CPU that GPU pods need where
        CPU is short (the FGD comparison's cpu250: usher's lead over fgd +0.17 -> +0.68 points).
        For GPU pods the paper's fragment does better (counting pods for them too cost default
        +0.55 -> +0.30 and multigpu50 +0.04 -> -0.31).

        With ``count_stranded`` a GPU pod's score also counts the change of the node's
        ``stranded`` capacity, in full (see the module's docstring); the caller asks for it while
        GPUs are the cluster's scarcer resource. Pods without GPUs are scored without it (with
        them, and without that condition, usher's lead on cpu250 fell from +0.70 to +0.18).
        """
        if not self.counts_memory:
            memory_free = None
        count_stranded = count_stranded and demand.gpus > 0
        key = (model, cpu_free, free_desc, demand, memory_free, count_stranded)
        found = self._placements.get(key)
        if found is not None:
            return found
        if len(self._placements) >= MEMO_LIMIT:
            self._placements.clear()
        count_pods = demand.gpus == 0 and COUNT_PODS_WITHOUT_GPUS
        before = self.node_fragment(model, cpu_free, free_desc, memory_free, count_pods)
        if count_stranded:
            before += self.stranded(model, cpu_free, free_desc, memory_free)
        cpu_after = cpu_free - demand.cpu
        memory_after = None if memory_free is None else memory_free - demand.memory
        if demand.gpus == 0 or demand.gpu_milli >= MILLI:
            k = demand.gpus
            left = (0,) * k + free_desc[k:] if k else free_desc
            after = self.node_fragment(model, cpu_after, left, memory_after, count_pods)
            if count_stranded:
                after += self.stranded(model, cpu_after, left, memory_after)
            found = (fgd_score(before - after), -1)
        else:
            best_score, best_free = -1, -1
            for f in sorted({f for f in free_desc if f >= demand.gpu_milli}):  # tightest first wins ties
                i = free_desc.index(f)
                after_free = free_desc[:i] + (f - demand.gpu_milli,) + free_desc[i + 1:]
                after = self.node_fragment(model, cpu_after, after_free, memory_after)
                if count_stranded:
                    after += self.stranded(model, cpu_after, after_free, memory_after)
                score = fgd_score(before - after)
                if score > best_score:
                    best_score, best_free = score, f
            found = (best_score, best_free)
        self._placements[key] = found
        return found

    def _evaluate(self, model: str, cpu_free: int, free_desc: tuple[int, ...], memory_free: int | None,
                  count_pods: bool) -> float:
        total = sum(free_desc)
        if total <= 0:
            return 0.0
        fragment = float(total)
        for group in self.groups:
            if group.models is not None and model not in group.models:
                continue
            need, share = group.gpus, group.gpu_milli
            if need > len(free_desc) or free_desc[need - 1] < share:
                continue  # fewer than `need` GPUs with `share` free (free_desc is sorted)
            with_room = need
            while with_room < len(free_desc) and free_desc[with_room] >= share:
                with_room += 1
            if count_pods:
                fragment -= self._usable_by_count(group, cpu_free, free_desc[:with_room], memory_free)
                continue
            weight = group.weight_fitting(cpu_free, memory_free)
            if weight:
                fragment -= weight * sum(free_desc[:with_room])
        return fragment

    @staticmethod
    def _usable_by_count(group: _DemandGroup, cpu_free: int, with_room: tuple[int, ...],
                         memory_free: int | None) -> float:
        """Weighted free milli-GPUs the group's pods could use on the GPUs ``with_room`` for
        them (free amounts, high to low), counting how many of each pod the node's free CPU and
        memory hold (each takes ``gpus`` GPUs, the roomiest first)."""
        usable = 0.0
        for cpu, memory, weight in group.needs:
            if cpu > cpu_free:
                break
            pods = cpu_free // cpu if cpu else len(with_room)
            if memory and memory_free is not None:
                pods = min(pods, memory_free // memory)
            if pods > 0:
                usable += weight * sum(with_room[:pods * group.gpus])
        return usable


def wide_demands(demands: Iterable[PodDemand]) -> frozenset[PodDemand]:
    """The demands of several whole GPUs among these."""
    return frozenset(d for d in demands if d.gpus > 1 and d.gpu_milli >= MILLI)


def fgd_score(decrease: float) -> int:
    """The FGD paper's node score for a fragment decrease in milli-GPUs: 0 to 100."""
    return int(100.0 / (1.0 + math.exp(-decrease / MILLI)))


class WorkloadProfile:
    """The pod demands seen so far, and a ``FragmentationModel`` of them kept fresh.

    The scheduler learns the workload from the jobs submitted to it (as the paper's typical
    pods come from the workload's pod list). The model is rebuilt when the pods seen have grown
    by ``REFRESH_GROWTH`` since the last build, so early decisions use an early picture and the
    picture settles as the workload does.
    """

    REFRESH_GROWTH = 0.1

    def __init__(self, popularity: float = POPULARITY) -> None:
        self.popularity = popularity
        self.counts: dict[PodDemand, float] = {}
        self.seen = 0.0
        self._built_at = 0.0
        self._model: FragmentationModel | None = None

    def observe(self, demand: PodDemand, count: int = 1) -> None:
        self.counts[demand] = self.counts.get(demand, 0.0) + count
        self.seen += count

    def model(self) -> FragmentationModel | None:
        """The current model, rebuilt if the workload seen has grown; None before any pod."""
        if self.seen and (self._model is None or self.seen >= self._built_at * (1 + self.REFRESH_GROWTH)):
            self._model = FragmentationModel(typical_pods(self.counts, self.popularity), wide_demands(self.counts))
            self._built_at = self.seen
        return self._model
