"""The pods of the cluster as inter-pod rules see them, and a pod group's rules for the engine.

``PodIndex`` is fed every pod the controller watches (usher's and, assigned, every other
scheduler's): its namespace, labels, node and its own required anti-affinity. A pod counts from
the moment it is on a node (or usher assumed its bind) until it is gone or finished; a
terminating pod still counts (kube-scheduler's InterPodAffinity counts it; its PodTopologySpread
does not, and ``evaluate`` follows both). Each change bumps ``version``.

``GroupRules`` is what the mirror puts on an engine ``PodGroup`` (the engine's
``PlacementRules``): the group's rules, the identity its pods have (namespace, labels they all
carry) and those of the other groups of its gang, so that the gang's pods placed so far in an
attempt count as pods on their nodes. It judges against the index as it is now, so a waiting job
need not be made anew when pods come and go; its equality leaves the index out, so jobs with
the same rules stay alike for the cycle's memo. A ``Judge`` is built once per index version,
nodes and placed pods, and reused for every node a diagnosis asks about.

A victim a preemption makes room with counts as gone for the gang it makes room for, and for that
gang only (kube-scheduler counts a terminating pod; KAI#2115 is what happens when the preemptor
does too: the reclaim never succeeds). Two kinds: the running jobs a preemption search has lifted
off the engine's state (``gone``, engine job ids the placer passes), and the jobs the engine
stopped as ``preempted`` for the gang (``Run.by``) whose pods are still being evicted. The index
knows each engine job's pods (``job_pods``, set by the mirror) to leave them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....enums import EndReason
from ....podrules.evaluate import Incoming, Judge, PlacedPod
from ....podrules.model import NO_RULES, AffinityTerm, PodRules
from .parse import parse_pod_rules

if TYPE_CHECKING:
    from ..constraints import NodeConstraints

#: the phases of a pod that holds nothing any more
_FINISHED = ("Succeeded", "Failed")


@dataclass(slots=True, frozen=True)
class _Entry:
    namespace: str
    labels: Mapping[str, str]
    node: str | None
    rules: PodRules
    terminating: bool

    @property
    def anti_affinity(self) -> tuple[AffinityTerm, ...]:
        return self.rules.anti_affinity


def placed_pod(namespace: str, labels: Mapping[str, str], node_id: int, rules: PodRules,
               terminating: bool = False) -> PlacedPod:
    """A pod on a node with the rules others see of it (``evaluate``, ``scoring``)."""
    return PlacedPod(namespace, labels, node_id, rules.anti_affinity, terminating, rules.affinity,
                     rules.preferred_affinity, rules.preferred_anti_affinity)


class PodIndex:
    """Every live pod's namespace, labels, node and required anti-affinity, by pod key."""

    def __init__(self, ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self._pods: dict[str, _Entry] = {}
        self.ns_labels: Mapping[str, Mapping[str, str]] = {} if ns_labels is None else ns_labels
        self.version = 0
        #: the engine's nodes (``refusal`` judges over them; the mirror sets them at each rebuild)
        self.nodes: Sequence[Any] | None = None
        #: the engine's state and the ids of its jobs whose groups carry ``GroupRules`` (set by
        #: the mirror): their pods placed by a cycle count before any is bound (``decided``)
        self.engine_state: Any = None
        self.ruled_jobs: set[int] = set()
        #: pods with a required anti-affinity of their own, placed or waiting (they may repel
        #: pods without rules, which then carry ``GroupRules`` too)
        self.repellers: dict[str, _Entry] = {}
        self._placed: tuple[int, int, list[PlacedPod]] | None = None
        self._judges: dict[tuple[Any, ...], Judge] = {}
        self._judged_at: tuple[int, int] = (-1, -1)
        #: every engine job's pod keys, and each key's latest job (``job_made``)
        self.job_pods: dict[int, tuple[str, ...]] = {}
        self.key_job: dict[str, int] = {}
        #: (state, its stop counter) and, by preemptor name, the jobs it stopped that way
        self._victims: tuple[int, int, dict[str, frozenset[int]]] = (-1, -1, {})

    def pod_changed(self, key: str, obj: Mapping[str, Any] | None) -> bool:
        """A pod as the API shows it (None: deleted). True when its anti-affinity came or went
        (pods waiting without rules of their own may now be repelled, or no longer)."""
        entry = None
        if obj is not None and (obj.get("status") or {}).get("phase") not in _FINISHED:
            meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
            labels = dict(meta.get("labels") or {})
            rules, _ = parse_pod_rules(spec, labels)
            entry = _Entry(meta.get("namespace", "default"), labels, spec.get("nodeName") or None,
                           rules, bool(meta.get("deletionTimestamp")))
        old = self._pods.get(key)
        if old is not None and entry is not None and old.node and not entry.node:
            entry = _Entry(entry.namespace, entry.labels, old.node, entry.rules, entry.terminating)  # assumed bound
        if old == entry:
            return False
        if entry is None:
            self._pods.pop(key, None)
        else:
            self._pods[key] = entry
        self.version += 1
        was = key in self.repellers
        if entry is not None and entry.anti_affinity:
            self.repellers[key] = entry  # waiting ones too: a cycle may place both
        else:
            self.repellers.pop(key, None)
        return was != (key in self.repellers) or (was and old != entry)

    def namespaces_changed(self) -> None:
        """A namespace's labels changed (``ns_labels`` is the mirror's own map): judge anew."""
        self.version += 1

    def assume_bound(self, key: str, node: str) -> None:
        """usher bound the pod to ``node``: it counts there before the watch shows it."""
        old = self._pods.get(key)
        if old is not None and old.node != node:
            self._pods[key] = _Entry(old.namespace, old.labels, node, old.rules, old.terminating)
            self.version += 1

    def repels(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether some pod (on a node, or usher's and waiting) has a required anti-affinity
        that picks such a pod."""
        return any(t.matches(e.namespace, namespace, labels, self.ns_labels)
                   for e in self.repellers.values() for t in e.anti_affinity)

    def placed(self, nodes: Sequence[Any], without: frozenset[str] = frozenset()) -> list[PlacedPod]:
        """Every pod on one of ``nodes`` (engine nodes: ``id``, ``name``), as rules see it,
        but those whose keys are in ``without``."""
        known = self._placed
        if known is None or known[0] != self.version or known[1] != id(nodes):
            ids = {n.name: n.id for n in nodes}
            pairs = [(k, placed_pod(e.namespace, e.labels, ids[e.node], e.rules, e.terminating))
                     for k, e in self._pods.items() if e.node in ids]
            known = self._placed = (self.version, id(nodes), pairs)
        if not without:
            return [p for _, p in known[2]]
        return [p for k, p in known[2] if k not in without]

    def job_made(self, job_id: int, keys: tuple[str, ...]) -> None:
        """The mirror made engine job ``job_id`` of the pods ``keys``."""
        self.job_pods[job_id] = keys
        for k in keys:
            self.key_job[k] = job_id

    def forget_jobs(self) -> None:
        """The mirror derives the engine's state afresh: its jobs are made anew."""
        self.job_pods = {}
        self.key_job = {}

    def victims_of(self, owner: str) -> frozenset[int]:
        """The engine jobs stopped as preempted for the job named ``owner`` and not yet started
        again (their pods may still be on their nodes, being evicted)."""
        state = self.engine_state
        if state is None or not owner:
            return frozenset()
        at, stops, by = self._victims
        if at != id(state) or stops != state.stop_counter:
            found: dict[str, set[int]] = {}
            for jid in self.job_pods:
                job = state.jobs[jid] if jid < len(state.jobs) else None
                if job is None or job.current_run is not None or not job.runs:
                    continue
                last = job.runs[-1]
                if last.by and last.end_reason == EndReason.PREEMPTED:
                    found.setdefault(last.by, set()).add(jid)
            by = {name: frozenset(ids) for name, ids in found.items()}
            self._victims = (id(state), state.stop_counter, by)
        return by.get(owner, frozenset())

    def gone_keys(self, owner: str, gone: frozenset[int]) -> frozenset[str]:
        """The pods that count as gone for the job ``owner``: those of the jobs ``gone`` and of
        the victims stopped for it (``victims_of``)."""
        jobs = gone | self.victims_of(owner)
        if not jobs:
            return frozenset()
        # a pod made anew under an evicted one's name (a StatefulSet's) belongs to a later job
        return frozenset(k for j in jobs for k in self.job_pods.get(j, ()) if self.key_job.get(k) == j)

    def decided(self, gone: frozenset[int] = frozenset()) -> list[tuple[GroupRules, int]]:
        """The pods of usher's jobs with rules that the engine placed and that are not on a node
        here yet (a cycle's decision, a bind still in PreBind): each group's rules and node id.
        Without them, two jobs with rules decided in one cycle (a Deployment's replicas, one job
        each) would not see each other."""
        state = self.engine_state
        out: list[tuple[GroupRules, int]] = []
        if state is None:
            return out
        for jid in sorted(self.ruled_jobs - gone):
            job = state.jobs[jid] if jid < len(state.jobs) else None
            run = None if job is None else job.current_run
            if run is None:
                continue
            groups = {g.name: g.rules for g in job.groups if isinstance(g.rules, GroupRules)}
            for p in run.placements:
                name, _, k = p.pod.rpartition("-")
                rules = groups.get(name)
                if rules is None or not k.isdigit():
                    continue
                keys = rules.pod_keys
                entry = self._pods.get(keys[int(k)]) if int(k) < len(keys) else None
                if entry is None or not entry.node:
                    out.append((rules, p.node_id))
        return out

    def judge(self, rules: GroupRules, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
              gone: frozenset[int] = frozenset()) -> Judge:
        """The ``Judge`` of a group's pod over ``nodes``, with the gang's ``placed`` pods and the
        engine's ``decided`` ones counted, and the pods that count as gone for its job left out
        (``gone_keys``)."""
        at = (self.version, id(nodes))
        if at != self._judged_at:
            self._judges.clear()
            self._judged_at = at
        without = self.gone_keys(rules.owner, gone)
        decided = self.decided(gone)
        key = (rules, tuple(placed), tuple((id(r), n) for r, n in decided), without)
        judge = self._judges.get(key)
        if judge is None:
            pods = self.placed(nodes, without)
            pods += [placed_pod(r.namespace, r.labels, n, r.rules) for r, n in decided]
            for group, node_id in placed:
                ns, labels, their = rules.gang.get(group, (rules.namespace, {}, NO_RULES))
                pods.append(placed_pod(ns, labels, node_id, their))
            constraints = rules.constraints
            me = Incoming(
                rules.namespace, rules.labels, rules.rules,
                node_affinity=(lambda n: constraints.selector_matches(n.labels) and constraints.affinity_matches(n.name, n.labels))
                if constraints is not None else (lambda n: True),
                tolerates=(lambda n: constraints.untolerated(n.taints) is None) if constraints is not None else (lambda n: True),
            )
            judge = self._judges[key] = Judge(me, pods, nodes, self.ns_labels)
            if len(self._judges) > 256:
                self._judges.clear()
        return judge


def _frozen(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


@dataclass(slots=True, frozen=True)
class GroupRules:
    """A pod group's rules against other pods, as the engine's ``PlacementRules`` (see the module)."""

    namespace: str
    labels_items: tuple[tuple[str, str], ...]
    rules: PodRules
    #: every group of the gang by name: its namespace, labels and rules
    gang_items: tuple[tuple[str, str, tuple[tuple[str, str], ...], PodRules], ...]
    constraints: NodeConstraints | None
    index: PodIndex = field(compare=False, hash=False, repr=False)
    #: the keys of the group's pods, in the engine's order (``g0-3`` is the fourth)
    pod_keys: tuple[str, ...] = field(default=(), compare=False, hash=False, repr=False)
    #: the name of the engine job it is a group of (victims stopped for it count as gone)
    owner: str = field(default="", compare=False, hash=False)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.labels_items)

    @property
    def gang(self) -> dict[str, tuple[str, dict[str, str], PodRules]]:
        return {name: (ns, dict(labels), rules) for name, ns, labels, rules in self.gang_items}

    def allowed(self, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
                gone: frozenset[int] = frozenset()) -> frozenset[int]:
        return self.index.judge(self, nodes, placed, gone).allowed()

    def tiers(self, nodes: Sequence[Any], placed: Sequence[tuple[str, int]],
              allowed: frozenset[int], gone: frozenset[int] = frozenset()) -> tuple[frozenset[int], ...]:
        return self.index.judge(self, nodes, placed, gone).preference(allowed)

    def refusal(self, node: Any, placed: Sequence[tuple[str, int]] = ()) -> str | None:
        nodes = self._nodes
        if nodes is None:
            return None
        found = self.index.judge(self, nodes, placed).refusal(node)
        return None if found is None else found.words

    def words(self) -> str:
        return self.rules.words()

    @property
    def _nodes(self) -> Sequence[Any] | None:
        return self.index.nodes


def group_rules(index: PodIndex, groups: Sequence[tuple[str, str, Mapping[str, str], PodRules, NodeConstraints | None, tuple[str, ...]]],
                owner: str = "") -> dict[str, GroupRules] | None:
    """Each group's ``GroupRules`` for a gang (the engine job named ``owner``) whose groups are
    ``(name, namespace, labels their pods share, rules, node constraints, pod keys)``; None when
    no group has rules and no pod on the cluster repels any (the gang's groups then carry none
    and pay nothing)."""
    if not any(g[3] for g in groups) and not any(index.repels(g[1], g[2]) for g in groups):
        return None
    gang = tuple((name, ns, _frozen(labels), rules) for name, ns, labels, rules, _, _k in groups)
    return {name: GroupRules(ns, _frozen(labels), rules, gang, constraints, index, keys, owner)
            for name, ns, labels, rules, constraints, keys in groups}


def shared_labels(all_labels: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The labels every one of a group's pods carries with the same value."""
    if not all_labels:
        return {}
    first, *rest = all_labels
    return {k: v for k, v in first.items() if all(o.get(k) == v for o in rest)}
