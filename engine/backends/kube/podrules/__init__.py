"""Inter-pod placement rules for usher: pod affinity, anti-affinity and topology spread.

``parse`` reads a pod's rules (problems name the field path), ``model`` holds them as hashable
values, ``evaluate`` judges a pod's rules over nodes against the pods around it (kube-scheduler's
InterPodAffinity and PodTopologySpread filters), ``scoring`` ranks the nodes by the soft rules
(their Score plugins) as preference tiers, ``pods`` keeps the pods of the cluster as these rules
see them and answers the engine's ``PlacementRules`` for a pod group. Pure: no I/O.
"""

from .evaluate import Incoming, Judge, PlacedPod, Refusal
from .model import NO_RULES, AffinityTerm, LabelSelector, PodRules, RuleKind, SpreadConstraint
from .parse import parse_pod_rules

__all__ = [
    "NO_RULES", "AffinityTerm", "Incoming", "Judge", "LabelSelector", "PlacedPod", "PodRules", "Refusal",
    "RuleKind", "SpreadConstraint", "parse_pod_rules",
]
