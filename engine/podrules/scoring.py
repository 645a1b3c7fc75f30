"""kube-scheduler's InterPodAffinity and PodTopologySpread scores, as usher's preference tiers.

The soft rules (``preferredDuringSchedulingIgnoredDuringExecution`` terms, ``ScheduleAnyway``
spread) never keep a pod off a node; they rank the nodes the hard rules allow, as upstream's
Score plugins do, and usher turns the ranking into preference tiers (a pod goes to the best tier
with room, best-fit within it, then the next), as it does for preferred node affinity:

- **InterPodAffinity**: per topology pair, the weights of the pod's preferred affinity terms
  that pick a pod there, less those of its preferred anti-affinity terms; symmetrically the
  weights of the pods already there whose preferred terms pick this pod, and 1
  (``hardPodAffinityWeight``) for each whose *required* affinity picks it; a node scores the sum
  over its labels' pairs, normalised to 0..100 between the lowest and highest node;
- **PodTopologySpread**: per ``ScheduleAnyway`` constraint, the pods it counts in the node's
  domain, weighted by log(domains + 2); fewer is better, normalised as upstream
  (``100 * (max + min - score) / max``); a node without a constraint's key scores 0.

Each plugin counts with weight 2 (upstream's default), summed. Preferred node affinity and
untolerated ``PreferNoSchedule`` taints are ranked first (``constraints``), these rules within
each of their tiers: a deviation from upstream's one weighted sum, kept so the two rankings
stay apart.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from .model import Incoming, InclusionPolicy, NodeLike, PlacedPod, Unsatisfiable

MAX_SCORE = 100
#: upstream's default weights of the two plugins, and ``hardPodAffinityWeight``
PLUGIN_WEIGHT = 2
HARD_AFFINITY_WEIGHT = 1


def affinity_pairs(me: Incoming, pods: Iterable[PlacedPod], by_id: Mapping[int, NodeLike],
                   ns_labels: Mapping[str, Mapping[str, str]]) -> Counter[tuple[str, str]]:
    """InterPodAffinity's raw score per (topology key, value)."""
    rules = me.rules
    out: Counter[tuple[str, str]] = Counter()
    for p in pods:
        node = by_id.get(p.node_id)
        if node is None:
            continue
        labels = node.labels
        for sign, terms in ((1, rules.preferred_affinity), (-1, rules.preferred_anti_affinity)):
            for w in terms:
                value = labels.get(w.term.topology_key)
                if value is not None and w.term.matches(me.namespace, p.namespace, p.labels, ns_labels):
                    out[(w.term.topology_key, value)] += sign * w.weight
        for sign, terms in ((1, p.preferred_affinity), (-1, p.preferred_anti_affinity)):
            for w in terms:
                value = labels.get(w.term.topology_key)
                if value is not None and w.term.matches(p.namespace, me.namespace, me.labels, ns_labels):
                    out[(w.term.topology_key, value)] += sign * w.weight
        for t in p.affinity:
            value = labels.get(t.topology_key)
            if value is not None and t.matches(p.namespace, me.namespace, me.labels, ns_labels):
                out[(t.topology_key, value)] += HARD_AFFINITY_WEIGHT
    return out


def spread_raw(me: Incoming, pods: Sequence[PlacedPod], nodes: Sequence[NodeLike],
               by_id: Mapping[int, NodeLike]) -> list[tuple[str, float, Counter[str]]] | None:
    """Per ``ScheduleAnyway`` constraint: its key, weight and pods counted per domain."""
    soft = [c for c in me.rules.spread if c.when == Unsatisfiable.SCHEDULE_ANYWAY]
    if not soft:
        return None
    keys = [c.topology_key for c in soft]
    out = []
    for c in soft:
        eligible = [n for n in nodes if all(k in n.labels for k in keys)
                    and (c.node_affinity_policy == InclusionPolicy.IGNORE or me.node_affinity(n))
                    and (c.node_taints_policy == InclusionPolicy.IGNORE or me.tolerates(n))]
        ids = {n.id for n in eligible}
        counts: Counter[str] = Counter({n.labels[c.topology_key]: 0 for n in eligible})
        for p in pods:
            if p.terminating or p.node_id not in ids or p.namespace != me.namespace or not c.counts(p.labels):
                continue
            counts[by_id[p.node_id].labels[c.topology_key]] += 1
        out.append((c.topology_key, math.log(len(counts) + 2), counts))
    return out


def tiers(nodes: Sequence[NodeLike], affinity: Counter[tuple[str, str]] | None,
          spread: list[tuple[str, float, Counter[str]]] | None) -> tuple[frozenset[int], ...]:
    """The nodes grouped by their summed normalised score, best first, the lowest left out (it
    is the fallback: anywhere allowed); empty when every node scores alike."""
    if not nodes:
        return ()
    total = [0.0] * len(nodes)
    if affinity:
        raw = [sum(affinity.get((k, v), 0) for k, v in n.labels.items()) for n in nodes]
        low, high = min(raw), max(raw)
        if high > low:
            for i, r in enumerate(raw):
                total[i] += PLUGIN_WEIGHT * MAX_SCORE * (r - low) / (high - low)
    if spread:
        raw_s: list[float | None] = []
        for n in nodes:
            if any(k not in n.labels for k, _, _ in spread):
                raw_s.append(None)
            else:
                raw_s.append(sum(w * counts.get(n.labels[k], 0) for k, w, counts in spread))
        known = [r for r in raw_s if r is not None]
        if known:
            low, high = min(known), max(known)
            for i, r in enumerate(raw_s):
                if r is not None and high > 0:
                    total[i] += PLUGIN_WEIGHT * MAX_SCORE * (high + low - r) / high
                elif r is not None:
                    total[i] += PLUGIN_WEIGHT * MAX_SCORE
    levels: dict[int, set[int]] = {}
    for n, s in zip(nodes, total):
        levels.setdefault(round(s), set()).add(n.id)
    ranked = sorted(levels, reverse=True)
    return tuple(frozenset(levels[s]) for s in ranked[:-1])
