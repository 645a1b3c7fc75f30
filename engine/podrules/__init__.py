"""Inter-pod placement rules, the backend-free part: pod affinity, anti-affinity, topology spread.

``model`` holds the rules as hashable values, ``evaluate`` judges a pod's rules over nodes against
the pods around it (kube-scheduler's InterPodAffinity and PodTopologySpread filters), ``scoring``
ranks the nodes by the soft rules (their Score plugins) as preference tiers. Each backend feeds
them the pods it knows: on a cluster ``backends/kube/podrules`` (which also reads the rules from
pod specs), in a replay ``replay`` (a scenario job's ``antiAffinity`` and ``spread``, judged
against the jobs running on the engine's state). They live here, below both, so that each rule is
written once. Pure: no I/O, and nothing of the engine's state beyond what a node carries.
"""

from .evaluate import Incoming, Judge, PlacedPod, Refusal
from .model import (NO_RULES, AffinityTerm, InclusionPolicy, LabelSelector, PodRules, RuleKind, SpreadConstraint,
                    Unsatisfiable)

__all__ = [
    "NO_RULES", "AffinityTerm", "InclusionPolicy", "Incoming", "Judge", "LabelSelector", "PlacedPod", "PodRules",
    "Refusal", "RuleKind", "SpreadConstraint", "Unsatisfiable",
]
