"""kube-scheduler's InterPodAffinity and PodTopologySpread filters, for one pod over many nodes.

``Judge`` is built once for a pod and the pods around it (every assigned pod of the cluster,
whatever scheduler placed it, terminating ones included until they are gone, plus the pods of the
pod's own gang placed so far in an attempt) and then answers, per node, the first rule that keeps
the pod off it. Counting is done once per (topology key, value), as the plugins' PreFilter does:

- **affinity**: a node passes when, for every required term, some pod matching *all* the terms
  sits in the node's domain of the term's key; a pod that matches its own terms may go anywhere
  with the keys while no pod matches them at all (the first of a series);
- **anti-affinity**: no pod a required term picks in the node's domain of its key; and
  symmetrically, no pod already there whose own required anti-affinity picks this pod;
- **topology spread** (``DoNotSchedule``): the domains are those of the nodes that carry every
  constraint's key and pass the pod's node affinity (``nodeAffinityPolicy: Honor``) and, with
  ``nodeTaintsPolicy: Honor``, its tolerations; pods counted are those the selector picks in the
  pod's namespace, not terminating; placing here gives the domain count + 1 - the smallest
  count (0 when fewer domains than ``minDomains``), which may not exceed ``maxSkew``.

Pure (no I/O) and independent of the engine's state: nodes are anything with ``id``, ``labels``
and ``taints``, so tests and the mirror both feed it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import scoring
from .model import Incoming, InclusionPolicy, NodeLike, PlacedPod, RuleKind, SpreadConstraint

__all__ = ["Incoming", "Judge", "NodeLike", "PlacedPod", "Refusal"]


@dataclass(slots=True, frozen=True)
class Refusal:
    """Why the pod may not go on a node: the rule and its words (the same words for every node
    refused alike, so a diagnosis can count them)."""

    kind: RuleKind
    words: str


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


class Judge:
    """The rules of one incoming pod, counted against the pods around it (see the module)."""

    def __init__(self, me: Incoming, pods: Iterable[PlacedPod], nodes: Sequence[NodeLike],
                 ns_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.me = me
        self.nodes = nodes
        self.ns_labels = ns_labels
        rules = me.rules
        by_id = {n.id: n for n in nodes}
        self._by_id = by_id
        pods = list(pods)
        # affinity: per term key and value, pods that match every term
        self.affinity_counts: Counter[tuple[str, str]] = Counter()
        self.affinity_any = 0
        # anti-affinity: per term index, pods it picks by their node's value of the key
        self.anti_counts: list[Counter[str]] = [Counter() for _ in rules.anti_affinity]
        self.anti_totals = [0] * len(rules.anti_affinity)
        # symmetry: per (key, value), pods whose own required anti-affinity picks this pod
        self.existing: Counter[tuple[str, str]] = Counter()
        self.existing_words: dict[tuple[str, str], str] = {}
        for p in pods:
            node = by_id.get(p.node_id)
            if node is None:
                continue
            labels = node.labels
            if rules.affinity and all(t.matches(me.namespace, p.namespace, p.labels, ns_labels) for t in rules.affinity):
                self.affinity_any += 1
                for t in rules.affinity:
                    value = labels.get(t.topology_key)
                    if value is not None:
                        self.affinity_counts[(t.topology_key, value)] += 1
            for i, t in enumerate(rules.anti_affinity):
                if t.matches(me.namespace, p.namespace, p.labels, ns_labels):
                    self.anti_totals[i] += 1
                    value = labels.get(t.topology_key)
                    if value is not None:
                        self.anti_counts[i][value] += 1
            for t in p.anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None and t.matches(p.namespace, me.namespace, me.labels, ns_labels):
                    pair = (t.topology_key, value)
                    self.existing[pair] += 1
                    self.existing_words.setdefault(pair, t.selector.words() if t.selector else "")
        self.spread = [_Spread(c, me, pods, nodes, by_id, rules.hard_spread) for c in rules.hard_spread]
        self._pods = pods

    def preference(self, ids: Iterable[int]) -> tuple[frozenset[int], ...]:
        """The soft rules' ranking of the nodes ``ids`` as preference tiers, best first
        (``scoring``); empty when they rank every node alike."""
        nodes = [self._by_id[i] for i in sorted(ids) if i in self._by_id]
        affinity = scoring.affinity_pairs(self.me, self._pods, self._by_id, self.ns_labels)
        spread = scoring.spread_raw(self.me, self._pods, self.nodes, self._by_id)
        if not affinity and spread is None:
            return ()
        return scoring.tiers(nodes, affinity, spread)

    def refusal(self, node: NodeLike) -> Refusal | None:
        """The first rule that keeps the pod off ``node`` (None: the rules allow it)."""
        me, labels = self.me, node.labels
        rules = me.rules
        if rules.affinity:
            missing = next((t.topology_key for t in rules.affinity if t.topology_key not in labels), None)
            if missing is not None:
                return Refusal(RuleKind.MISSING_KEY, f"no {missing} label for its pod affinity")
            if not all(self.affinity_counts.get((t.topology_key, labels[t.topology_key]), 0) for t in rules.affinity):
                # the first of a series: no pod matches the terms anywhere, and the pod matches them
                first = not self.affinity_counts and all(
                    t.matches(me.namespace, me.namespace, me.labels, self.ns_labels) for t in rules.affinity)
                if not first:
                    t = rules.affinity[0]
                    what = t.selector.words() if t.selector else "no selector"
                    return Refusal(RuleKind.AFFINITY,
                                   f"affinity to pods of {what}: {_pods(self.affinity_any)} match, none on its {t.topology_key}")
        for i, t in enumerate(rules.anti_affinity):
            value = labels.get(t.topology_key)
            if value is not None and self.anti_counts[i].get(value):
                what = t.selector.words() if t.selector else "no selector"
                return Refusal(RuleKind.ANTI_AFFINITY,
                               f"anti-affinity with {_pods(self.anti_totals[i])} of {what} (one per {t.topology_key})")
        # the pod's own rules are named first (the words tell more); the set allowed is the same
        if self.existing:
            for key, value in labels.items():
                n = self.existing.get((key, value))
                if n:
                    return Refusal(RuleKind.EXISTING_ANTI_AFFINITY,
                                   f"anti-affinity of {_pods(n)} already on its {key} ({self.existing_words[(key, value)]})")
        for s in self.spread:
            refused = s.refusal(node)
            if refused is not None:
                return refused
        return None

    def allowed(self, ids: Iterable[int] | None = None) -> frozenset[int]:
        """The node ids (of ``ids``, else all) the rules allow."""
        nodes = self.nodes if ids is None else [self._by_id[i] for i in ids if i in self._by_id]
        return frozenset(n.id for n in nodes if self.refusal(n) is None)


class _Spread:
    """One ``DoNotSchedule`` constraint's counts per domain (PodTopologySpread's PreFilter)."""

    def __init__(self, c: SpreadConstraint, me: Incoming, pods: list[PlacedPod], nodes: Sequence[NodeLike],
                 by_id: Mapping[int, NodeLike], every: tuple[SpreadConstraint, ...]) -> None:
        self.c = c
        keys = [k.topology_key for k in every]
        eligible = [
            n for n in nodes
            if all(k in n.labels for k in keys)
            and (c.node_affinity_policy == InclusionPolicy.IGNORE or me.node_affinity(n))
            and (c.node_taints_policy == InclusionPolicy.IGNORE or me.tolerates(n))
        ]
        ids = {n.id for n in eligible}
        self.counts: Counter[str] = Counter({n.labels[c.topology_key]: 0 for n in eligible})
        for p in pods:
            if p.terminating or p.node_id not in ids or p.namespace != me.namespace or not c.counts(p.labels):
                continue
            self.counts[by_id[p.node_id].labels[c.topology_key]] += 1
        smallest = min(self.counts.values(), default=0)
        if c.min_domains is not None and len(self.counts) < c.min_domains:
            smallest = 0
        self.smallest = smallest
        self.self_match = 1 if c.counts(me.labels) else 0

    def refusal(self, node: NodeLike) -> Refusal | None:
        c = self.c
        value = node.labels.get(c.topology_key)
        if value is None:
            return Refusal(RuleKind.MISSING_KEY, f"no {c.topology_key} label for its topology spread")
        skew = self.counts.get(value, 0) + self.self_match - self.smallest
        if skew > c.max_skew:
            return Refusal(RuleKind.SPREAD, f"spread over {c.topology_key} would reach skew {skew}, max {c.max_skew}")
        return None
