"""Placement: where the pods of a job go, framework style (filter, score, reserve).

The Kubernetes scheduler framework runs Filter plugins over nodes, Score plugins over the
feasible ones, and picks the best. At 5,000 nodes that is too slow to do for every pod, so as in
kube-scheduler (``percentageOfNodesToScore``) we score a sample: the capacity index yields nodes in
best-fit order (fewest whole GPUs free that still fit; the GPU model, schedulability and the GPU
count are the index's pre-filter), the rest of the filters check each candidate, and the first
``SCORE_SAMPLE`` feasible nodes of the tightest bucket are scored. The filters are defined once,
a feature a module, in ``filters`` (``filters.registry`` lists them): the hot path runs the
``now`` checks a pod can trip (``hot_checks``), and ``filters.registry.diagnose`` runs every
filter over every node when a person asks why a pod does not fit.

A gang is placed atomically: each pod is reserved on the state as it is chosen (later pods see
the capacity it took), and if any pod cannot be placed, every reservation is undone.

Topology (Kueue's TAS): a pod group with ``required: LEVEL`` goes into one domain of that level,
the tightest that fits (BestFit); ``preferred`` tries that level, then each level above, then
anywhere. Inside a node (``inside_node``) a multi-GPU pod takes GPUs of one NVLink island where it can (the
tightest island that fits), and a shared pod goes onto an already shared GPU where it can, so
that whole GPUs stay whole.

Node constraints come from the backend as node ids: ``PodGroup.eligible`` (the nodes a pod may go
on; a Kubernetes nodeSelector, node affinity, taints) is checked wherever the GPU model is, by
``node_allowed``; ``PodGroup.preferred`` (preference tiers) makes ``choose_node`` try the best
tier first, best-fit within it, before the rest. A pod allowed on few nodes is placed by
scanning them instead of the capacity index.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter

from ..enums import PendingReason, TopologyMode
from ..memo import memo_of
from ..state import MILLI, ClusterState, Domain, Job, Node, PodGroup, PodPlacement
from .filters.gpu_model import accepts
from .filters.pod_rules import narrowed
from .filters.registry import Check, hot_checks, never_fits, node_allowed
from .fragmentation import MEMORY_UNIT, FragmentationModel, PodDemand
from .inside_node import SCORES, GpuBinPack, lowest_shared_gpu, lowest_whole_gpus, pick_shared_gpu, pick_whole_gpus
from .registry import Scoring

SCORE_SAMPLE = 8
#: a pod whose eligible nodes (or preference tier) are at most this share of the cluster is
#: placed by scanning them rather than the capacity index
NARROW_SHARE = 0.25
#: fragmentation scores (0-100) this close count as equal when keeping a pod that could go
#: elsewhere off a protected GPU model (``FragmentationModel.protected_models``); 12 points are
#: about half a GPU of fragment near no change, measured on the FGD comparison's gpuspec workloads
SCORE_BAND = 12
#: CPU balance (see ``Placer._least_fragmenting``): how far, in cores per GPU, the CPU a node
#: keeps per free GPU may stray from the cluster's before it counts one step worse ...
BALANCE_STEP = 4
#: ... and only while pods of several GPUs are less than this share of the typical GPU demand
BALANCE_SEVERAL_GPU_LIMIT = 0.1
#: CPU balance leaves alone the nodes that are the only ones able to hold some wide pod seen:
#: those of a pod of several GPUs that fewer than this share of the GPU nodes could hold empty
WIDE_HOST_SHARE = 0.1


@dataclass(slots=True)
class Guard:
    """Capacity a long-running job may not take because a backfill reservation needs it.

    Maps node id to ``[whole GPUs, cpu, memory]`` that jobs ending after the reservation's
    start may still use on that node; nodes not listed are unrestricted.
    """

    headroom: dict[int, list[int]] = field(default_factory=dict)

    def allows(self, node_id: int, whole: int, cpu: int, memory: int) -> bool:
        h = self.headroom.get(node_id)
        return h is None or (whole <= h[0] and cpu <= h[1] and memory <= h[2])

    def consume(self, node_id: int, whole: int, cpu: int, memory: int) -> None:
        h = self.headroom.get(node_id)
        if h is not None:
            h[0] -= whole
            h[1] -= cpu
            h[2] -= memory


# -- choosing a node ----------------------------------------------------------------------


#: best fit among topology domains: the fewest whole GPUs free, then the name
_BEST_FIT_DOMAIN = attrgetter("whole_free", "name")


@dataclass(slots=True)
class Placer:
    """Places pods on a state, recording what it took so the caller can keep or undo it."""

    state: ClusterState
    guard: Guard | None = None
    taken: list[PodPlacement] = field(default_factory=list)
    scoring: Scoring = Scoring.USHER
    #: running jobs whose pods count as gone for pod rules (a preemption search's lifted victims)
    gone: frozenset[int] = frozenset()
    #: while a gang is placed: where in ``taken`` its pods start (pod rules count them)
    _gang_mark: int | None = field(default=None, init=False, repr=False)

    def _fits_node(self, node: Node, pod: PodGroup, checks: tuple[Check, ...]) -> bool:
        """Whether a candidate the index (or ``node_allowed``) let through passes the pod's
        compiled ``checks`` (``filters.registry.hot_checks``) and the backfill guard."""
        for check in checks:
            if not check(node, pod):
                return False
        # a pod sharing a GPU may take a whole one (the first slice of it): on a reserved node it
        # needs room for one whole GPU, or it could break up one the reservation counts on
        if self.guard is not None and not self.guard.allows(node.id, pod.whole_gpus or (1 if pod.share else 0), pod.cpu, pod.memory):
            return False
        return True

    def _models(self, pod: PodGroup) -> Iterable[list[set[int]]]:
        buckets = self.state.buckets
        if pod.models is None or not pod.gpu_milli:
            return buckets.values()
        return [buckets[m] for m in pod.models if m in buckets]

    def _best_in(self, nodes: Iterable[Node], pod: PodGroup) -> Node | None:
        best: Node | None = None
        best_score = -1
        plugins = SCORES if self.scoring == Scoring.USHER else (GpuBinPack(),)
        for node in nodes:
            s = sum(p.weight * p.score(node, pod) for p in plugins)
            if s > best_score or (s == best_score and best is not None and node.id < best.id):
                best, best_score = node, s
        return best

    def _gang_so_far(self) -> list[tuple[str, int]]:
        """The pods of the gang being placed that are placed so far: pod group name and node id."""
        mark = self._gang_mark
        return [] if mark is None else [(p.pod.rpartition("-")[0], p.node_id) for p in self.taken[mark:]]

    def first_refused(self, job: Job, counts: list[int]) -> tuple[PodGroup, list[tuple[str, int]]] | None:
        """Where placing the gang (topology aside) stops: the pod group of the first pod that
        finds no node, with the gang's pods placed before it (then all undone); None when the
        gang would fit. For explaining rules against other pods, which count the gang's own."""
        order = sorted(range(len(job.groups)), key=lambda i: -job.groups[i].gpu_milli)
        self._gang_mark = len(self.taken)
        try:
            for gi in order:
                pod = job.groups[gi]
                for k in range(counts[gi]):
                    node = self.choose_node(pod)
                    if node is None:
                        placed = self._gang_so_far()
                        self.undo(job)
                        return pod, placed
                    self.put(job, pod, node, f"{pod.name}-{k}")
            self.undo(job)
            return None
        finally:
            self._gang_mark = None

    def choose_node(self, pod: PodGroup, within: list[int] | None = None) -> Node | None:
        """The best node for one pod, optionally only among the node ids ``within``.

        Only nodes the pod is allowed on (``node_allowed``) are considered; with preference
        tiers, the best node of the first tier that has room, else the best node anywhere. A pod
        with rules against other pods is first narrowed to the nodes they allow now, counting
        the gang's pods placed so far (``pod_rules.narrowed``).
        """
        if pod.rules is not None:
            pod = narrowed(pod, self.state.nodes, self._gang_so_far(), self.gone)
        for tier in pod.preferred:
            node = self._choose(pod, within, tier)
            if node is not None:
                return node
        return self._choose(pod, within, None)

    def _choose(self, pod: PodGroup, within: list[int] | None, among: frozenset[int] | None) -> Node | None:
        """``choose_node`` over the nodes ``within`` (None: all) that are also in ``among`` (None: all)."""
        if within is None and self.state.workload is not None:
            model = self.state.workload.model()
            if model is not None:
                return self._least_fragmenting(pod, model, among)
        nodes = self.state.nodes
        if self.scoring == Scoring.FIRST_FIT:
            return self._first_fit(pod, within, among)
        if pod.share:
            return self._choose_shared(pod, within, among)
        g = pod.whole_gpus
        checks = hot_checks(pod)
        if within is None:
            narrow = min((s for s in (pod.eligible, among) if s is not None), key=len, default=None)
            if narrow is not None and len(narrow) <= NARROW_SHARE * len(nodes):
                within = sorted(narrow)
        if within is not None:
            feasible = [
                n
                for n in (nodes[i] for i in within)
                if n.schedulable
                and n.whole_free >= g
                and node_allowed(pod, n)
                and (among is None or n.id in among)
                and self._fits_node(n, pod, checks)
            ]
            if not feasible:
                return None
            tight = min(n.whole_free for n in feasible)
            return self._best_in((n for n in feasible if n.whole_free == tight), pod)
        # The buckets already hold only nodes of an accepted GPU model (``_models``).
        eligible = pod.eligible
        model_buckets = list(self._models(pod))
        top = self.state.max_gpus
        for k in range(g, top + 1):
            feasible: list[Node] = []
            for buckets in model_buckets:
                for nid in buckets[k]:
                    node = nodes[nid]
                    if (
                        (eligible is None or nid in eligible)
                        and (among is None or nid in among)
                        and self._fits_node(node, pod, checks)
                    ):
                        feasible.append(node)
                        if len(feasible) >= SCORE_SAMPLE:
                            break
                if len(feasible) >= SCORE_SAMPLE:
                    break
            if feasible:
                return self._best_in(feasible, pod)
        return None

    def _first_fit(self, pod: PodGroup, within: list[int] | None, among: frozenset[int] | None) -> Node | None:
        """The first node, in cluster order, that the pod fits (no scoring)."""
        nodes = self.state.nodes
        g, share = pod.whole_gpus, pod.share
        checks = hot_checks(pod)
        for nid in range(len(nodes)) if within is None else within:
            node = nodes[nid]
            if not node.schedulable or not node_allowed(pod, node) or (among is not None and nid not in among):
                continue
            if share:
                if not any(f >= share for f in node.gpu_free):
                    continue
            elif node.whole_free < g:
                continue
            if self._fits_node(node, pod, checks):
                return node
        return None

    def _least_fragmenting(self, pod: PodGroup, model: FragmentationModel, among: frozenset[int] | None) -> Node | None:
        """Fragmentation-aware choice: the node whose fragment grows least (FGD's score).

        While the typical pods ask less CPU per GPU than the cluster has (GPUs are the scarcer
        resource), a GPU pod's score also counts the GPU capacity it strands
        (``FragmentationModel.stranded``). Nodes are visited one shape at a time (model, free CPU, sorted free GPUs, free memory),
        since nodes of a shape score alike; the score is memoised per shape and demand. When
        some pods of the workload accept only some GPU models, a GPU pod that accepts more than
        one model first avoids the models those pods are expected to need most (``protected_models``)
        among scores within ``SCORE_BAND`` of each other. Among equal scores a GPU pod goes to
        the node whose CPU per free GPU it leaves nearest the cluster's (``BALANCE_STEP``), while
        pods of several GPUs are a small part of the typical demand
        (``BALANCE_SEVERAL_GPU_LIMIT``) and no pod is pinned to GPU models (balance and
        protection pull the same pods different ways; on the FGD gpuspec workloads protection
        alone does better): GPUs left beside too little CPU are lost to CPU-hungry
        pods, CPU left beside too few GPUs to all GPU pods. Balance first spares the nodes that
        only a few can match for some wide pod seen (``_wide_hosts``). Then equal scores go to
        a node already in use for a GPU pod, and for a pod without GPUs to a node whose GPUs are
        all taken (its CPU is of no use to GPU pods any more); then, for a pod that takes no
        whole GPU (a share, or none), to the node with the least GPU left free (best fit), so
        the emptier nodes stay whole for the pods that need whole GPUs, and for a pod of whole
        GPUs to the node with the most GPUs in use (where pods come and go, jobs of whole GPUs
        wait less; counting GPUs in use rather than whole GPUs free keeps small nodes, often of
        a model some pods need, from looking tight); then to the node first in the state's tie
        order.
        """
        state = self.state
        nodes = state.nodes
        demand = PodDemand.of(pod.gpu_milli, pod.cpu, pod.models, pod.memory)
        whole, share = pod.whole_gpus, pod.share
        eligible = pod.eligible
        best: Node | None = None
        best_key: tuple[int, ...] | None = None
        protected: frozenset[str] = frozenset()
        if model.model_sets and pod.gpu_milli and (pod.models is None or len(pod.models) > 1):
            protected = model.protected_models(state.free_by_model)
        balance = pod.gpu_milli > 0 and model.several_gpu_share < BALANCE_SEVERAL_GPU_LIMIT and not model.model_sets
        cpu_per_gpu = state.cpu_per_gpu
        count_stranded = pod.gpu_milli > 0 and model.cpu_per_gpu < cpu_per_gpu
        wide_hosts = self._wide_hosts(model) if balance else frozenset()
        checks = hot_checks(pod)
        for shape, members in state.shapes.items():
            gpu_model, cpu_free, free, memory_free = shape
            if cpu_free < pod.cpu:
                continue
            if pod.gpu_milli:
                if pod.models is not None and gpu_model not in pod.models:
                    continue
                if whole and (len(free) < whole or free[whole - 1] < MILLI):
                    continue
                if share and (not free or free[0] < share):
                    continue
            node = None
            for rank, nid in members:
                candidate = nodes[nid]
                if (
                    (eligible is None or nid in eligible)
                    and (among is None or nid in among)
                    and self._fits_node(candidate, pod, checks)
                ):
                    node = candidate
                    break
            if node is None:
                continue
            score = model.best_placement(gpu_model, cpu_free, free, demand, memory_free, count_stranded)[0]
            if pod.gpu_milli:
                preferred = int(not (all(f == MILLI for f in free) and cpu_free == node.cpu))
            else:
                preferred = int(not any(free))
            imbalance = 0
            if balance:
                gpus_left = sum(free) - pod.gpu_milli
                if gpus_left > 0:
                    imbalance = int(abs((cpu_free - pod.cpu) / gpus_left - cpu_per_gpu) / BALANCE_STEP)
            spare = int(node.id not in wide_hosts)
            head = (score // SCORE_BAND, int(gpu_model not in protected), score, spare, -imbalance, preferred)
            if best_key is not None and head < best_key[:6]:
                continue
            key = (*head, sum(1 for f in free if f < MILLI) if whole else -sum(free), -rank)
            if best_key is None or key > best_key:
                best, best_key = node, key
        return best

    def _wide_hosts(self, model: FragmentationModel) -> frozenset[int]:
        """The GPU nodes that are among the few (``WIDE_HOST_SHARE``) able to hold, empty, a
        wide pod of the workload: CPU balance would fill them with small pods, since their CPU
        per GPU is often the cluster's, and the wide pod would wait for one to empty (the openb
        8-GPU pods of 120 cores, which only the 39 G3 nodes of 128 cores hold). Memoised per
        model and node count in the cycle's memo."""
        state = self.state
        memo = memo_of(state)
        known = memo.wide_hosts
        if known is not None and known[0] is model and known[1] == len(state.nodes):
            return known[2]
        gpu_nodes = [n for n in state.nodes if n.gpu_count]
        hosts: set[int] = set()
        for d in model.wide:
            able = [n.id for n in gpu_nodes
                    if n.gpus_in_service >= d.gpus and n.cpu >= d.cpu and n.memory >= d.memory * MEMORY_UNIT
                    and (d.models is None or n.gpu_model in d.models)]
            if len(able) < WIDE_HOST_SHARE * len(gpu_nodes):
                hosts.update(able)
        found = frozenset(hosts)
        memo.wide_hosts = (model, len(state.nodes), found)
        return found

    def _choose_shared(self, pod: PodGroup, within: list[int] | None, among: frozenset[int] | None) -> Node | None:
        nodes = self.state.nodes
        share = pod.share
        pool: Iterable[int] = self.state.partial_nodes if within is None else within
        best: Node | None = None
        best_left = MILLI + 1
        checks = hot_checks(pod)
        for nid in pool:
            node = nodes[nid]
            if not node.schedulable or not node_allowed(pod, node) or (among is not None and nid not in among):
                continue
            if not self._fits_node(node, pod, checks):
                continue
            for f in node.gpu_free:
                if share <= f < MILLI and f - share < best_left:
                    best, best_left = node, f - share
        if best is not None:
            return best
        # no partly used GPU has room: the first slice of a whole GPU, with all else the pod asks
        whole = PodGroup(pod.name, 1, MILLI, pod.cpu, pod.memory, pod.models, eligible=pod.eligible, extra=pod.extra)
        return self._choose(whole, within, among)

    def put(self, job: Job, pod: PodGroup, node: Node, pod_name: str) -> PodPlacement:
        first_fit = self.scoring == Scoring.FIRST_FIT
        if pod.share:
            gpu = lowest_shared_gpu(node, pod.share) if first_fit else pick_shared_gpu(node, pod.share)
            assert gpu is not None
            took_whole = 1 if node.gpu_free[gpu] == MILLI else 0
            gpus, share = [gpu], pod.share
        else:
            pick = pick_whole_gpus if self.scoring == Scoring.USHER else lowest_whole_gpus
            gpus, share = pick(node, pod.whole_gpus), 0
            took_whole = len(gpus)
        placement = PodPlacement(pod_name, node.id, gpus, share, pod.cpu, pod.memory, extra=pod.extra)
        self.state.allocate(node, gpus, share, pod.cpu, pod.memory, pod.extra)
        node.jobs.add(job.id)
        if self.guard is not None:
            self.guard.consume(node.id, took_whole, pod.cpu, pod.memory)
        self.taken.append(placement)
        return placement

    def undo(self, job: Job, mark: int = 0) -> None:
        """Give back every placement taken since ``mark`` (all of them by default)."""
        tail = self.taken[mark:]
        del self.taken[mark:]
        state = self.state
        for p in reversed(tail):
            node = state.nodes[p.node_id]
            state.release(node, p.gpus, p.share, p.cpu, p.memory, p.extra)
            if self.guard is not None:
                h = self.guard.headroom.get(node.id)
                if h is not None:
                    whole = len(p.gpus) if not p.share else int(node.gpu_free[p.gpus[0]] == MILLI)
                    h[0] += whole
                    h[1] += p.cpu
                    h[2] += p.memory
        for nid in {p.node_id for p in tail}:
            node = state.nodes[nid]
            if not any(p.node_id == nid for p in self.taken) and not _job_still_on(job, node):
                node.jobs.discard(job.id)

    # -- groups and gangs -----------------------------------------------------------------

    def _place_group_on(self, job: Job, pod: PodGroup, n: int, start: int, within: list[int] | None) -> bool:
        for k in range(start, start + n):
            node = self.choose_node(pod, within)
            if node is None:
                return False
            self.put(job, pod, node, f"{pod.name}-{k}")
        return True

    def _domain_capacity(self, pod: PodGroup, node_ids: list[int], need: int) -> int:
        """How many pods of ``pod`` fit in these nodes now (stops counting at ``need``)."""
        nodes = self.state.nodes
        count = 0
        g, share = pod.whole_gpus, pod.share
        for nid in node_ids:
            node = nodes[nid]
            if not node.schedulable or not node_allowed(pod, node):
                continue
            fit = 1 << 30
            if pod.cpu:
                fit = min(fit, node.cpu_free // pod.cpu)
            if pod.memory:
                fit = min(fit, node.mem_free // pod.memory)
            if g:
                whole = node.whole_free
                if self.guard is not None and nid in self.guard.headroom:
                    whole = min(whole, self.guard.headroom[nid][0])
                fit = min(fit, whole // g)
            elif share:
                fit = min(fit, sum(f // share for f in node.gpu_free))
            count += fit
            if count >= need:
                return count
        return count

    def _place_group_topology(self, job: Job, pod: PodGroup, n: int, start: int, unconstrained_ok: bool) -> bool:
        state = self.state
        level = pod.topology_level
        assert level is not None
        levels = [level] if pod.topology_mode == TopologyMode.REQUIRED else list(range(level, -1, -1))
        need_whole = pod.whole_gpus * n
        for li in levels:
            cands = [d for d in state.domains[li] if d.whole_free >= need_whole and d.labelled]
            if self.scoring != Scoring.FIRST_FIT and len(cands) > 1:
                # best fit: the first domain of the sorted order usually takes the gang, so it is
                # found with min() and the rest sorted only when it does not
                if self._place_group_in(job, pod, n, start, min(cands, key=_BEST_FIT_DOMAIN)):
                    return True
                cands.sort(key=_BEST_FIT_DOMAIN)
                del cands[0]
            for dom in cands:
                if self._place_group_in(job, pod, n, start, dom):
                    return True
        if unconstrained_ok and pod.topology_mode == TopologyMode.PREFERRED:
            return self._place_group_on(job, pod, n, start, None)
        return False

    def _place_group_in(self, job: Job, pod: PodGroup, n: int, start: int, dom: Domain) -> bool:
        """Place ``n`` pods of ``pod`` in one topology domain, or take nothing."""
        g = pod.whole_gpus
        # at most this many pods fit by whole GPUs alone (from the domain's counts of nodes by
        # GPUs free): a domain of scattered free GPUs is passed over at once
        if g and sum(nodes * (free // g) for free, nodes in enumerate(dom.free_hist) if free >= g) < n:
            return False
        if self._domain_capacity(pod, dom.node_ids, n) < n:
            return False
        mark = len(self.taken)
        if self._place_group_on(job, pod, n, start, dom.node_ids):
            return True
        self.undo(job, mark)
        return False

    def place_gang(self, job: Job, counts: list[int], ignore_topology: bool = False) -> bool:
        """Place ``counts[i]`` pods of each group of ``job``; all or nothing."""
        order = sorted(range(len(job.groups)), key=lambda i: -job.groups[i].gpu_milli)
        self._gang_mark = len(self.taken)
        try:
            for gi in order:
                pod = job.groups[gi]
                n = counts[gi]
                if n == 0:
                    continue
                if pod.topology_mode is not None and not ignore_topology:
                    ok = self._place_group_topology(job, pod, n, 0, True)
                else:
                    ok = self._place_group_on(job, pod, n, 0, None)
                if not ok:
                    self.undo(job)
                    return False
            return True
        finally:
            self._gang_mark = None


def observe_job(state: ClusterState, job: Job) -> None:
    """Teach the state's workload profile (when fragmentation is on) a submitted job's pods."""
    if state.workload is None:
        return
    for g in job.groups:
        state.workload.observe(PodDemand.of(g.gpu_milli, g.cpu, g.models, g.memory), g.count)


def _job_still_on(job: Job, node: Node) -> bool:
    run = job.current_run
    if run is None:
        return False
    return any(p.node_id == node.id for p in run.placements)


def gang_counts(job: Job, minimal: bool) -> list[int]:
    """Pods per group for the full gang, or for the smallest gang ``minCount`` allows."""
    full = [g.count for g in job.groups]
    if not minimal or job.min_count >= job.total_pods:
        return full
    need = job.min_count
    counts = []
    for g in job.groups:
        take = min(g.count, need)
        counts.append(take)
        need -= take
    return counts


def request_of(job: Job, counts: list[int]) -> tuple[int, int, int]:
    gpu = cpu = mem = 0
    for g, n in zip(job.groups, counts):
        gpu += g.gpu_milli * n
        cpu += g.cpu * n
        mem += g.memory * n
    return (gpu, cpu, mem)


def no_matching_nodes(state: ClusterState, job: Job) -> PodGroup | None:
    """The first pod group that no node could ever hold, even empty (``never_fits``)."""
    nodes = state.nodes
    for pod in job.groups:
        if all(never_fits(node, pod) for node in nodes):
            return pod
    return None


def pods_fitting_by_gpus(state: ClusterState, pod: PodGroup) -> int:
    """How many whole-GPU pods like ``pod`` the schedulable nodes could take, counting GPUs only."""
    w = pod.whole_gpus
    if pod.eligible is not None:
        nodes = state.nodes
        return sum(
            nodes[i].whole_free // w for i in pod.eligible if nodes[i].schedulable and accepts(pod, nodes[i])
        )
    return sum(
        len(b) * (k // w)
        for model, buckets in state.buckets.items()
        if pod.models is None or model in pod.models
        for k, b in enumerate(buckets)
    )


def classify_failure(state: ClusterState, job: Job, counts: list[int]) -> PendingReason:
    """Why a gang that did not fit does not fit: no node could ever hold it, topology, or room."""
    if no_matching_nodes(state, job) is not None:
        return PendingReason.NO_MATCHING_NODES
    need = sum(g.whole_gpus * n for g, n in zip(job.groups, counts))
    if need > state.total_whole_free:
        return PendingReason.INSUFFICIENT_CAPACITY
    if len(job.groups) == 1 and job.groups[0].whole_gpus:
        # Would the pods fit anywhere, ignoring topology? Count from the capacity buckets.
        g, n = job.groups[0], counts[0]
        if pods_fitting_by_gpus(state, g) < n:
            return PendingReason.INSUFFICIENT_CAPACITY
        if g.topology_mode == TopologyMode.REQUIRED:
            return PendingReason.TOPOLOGY_UNSATISFIABLE
    if any(g.topology_mode == TopologyMode.REQUIRED for g in job.groups):
        placer = Placer(state)
        if placer.place_gang(job, counts, ignore_topology=True):
            placer.undo(job)
            return PendingReason.TOPOLOGY_UNSATISFIABLE
    return PendingReason.INSUFFICIENT_CAPACITY
