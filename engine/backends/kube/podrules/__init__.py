"""Inter-pod placement rules on a cluster: reading them from pod specs and the pods around.

``parse`` reads a pod's rules (problems name the field path); ``pods`` keeps the pods of the
cluster as these rules see them and answers the engine's ``PlacementRules`` for a pod group. The
rules themselves (``model``), their evaluation (``evaluate``) and ranking (``scoring``) are the
engine's ``podrules``, shared with the replay; they are re-exported here. Pure: no I/O.
"""

from ....podrules.evaluate import Incoming, Judge, PlacedPod, Refusal
from ....podrules.model import NO_RULES, AffinityTerm, LabelSelector, PodRules, RuleKind, SpreadConstraint
from .parse import parse_pod_rules

__all__ = [
    "NO_RULES", "AffinityTerm", "Incoming", "Judge", "LabelSelector", "PlacedPod", "PodRules", "Refusal",
    "RuleKind", "SpreadConstraint", "parse_pod_rules",
]
