"""usher places pods by their volumes, and binds a gang's volumes all or none.

The public face of a small package: ``model`` parses claims, volumes, classes, capacities and
CSINodes into records; ``fit`` says which nodes a pod may use by its claims (kube-scheduler's
VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits filters); ``gang`` is the
PreBind for a whole gang (what to write, how far it got, what to undo); ``pins`` whether a gang
fits where its volumes hold its pods; ``reasons`` words every
outcome so that a user can act on it; ``index`` keeps the informers' storage objects and each
pod's claims, and answers the mirror. Pure: no I/O; the kube controller does the writes.
"""

from __future__ import annotations

from .fit import FREE, NO_CLAIMS, Choice, PodClaims, Storage, VolumeFit, choose, fit_nodes, matches, sort_claims
from .index import PATHS, StorageKind, VolumeIndex
from .gang import NOTHING, Placed, Plan, Progress, Step, leftovers, plan, progress, undo
from .model import (AccessMode, BindingMode, Capacity, Claim, Known, PodVolume, Source, StorageClass, Volume,
                    VolumeMode, parse_capacity, parse_claim, parse_class, parse_csidriver,
                    parse_csinode, parse_volume, pod_volumes)
from .pins import NodeRoom, PinnedPod, stuck
from .reasons import NODE_WORDS, Blocker, VolumeReason

__all__ = [
    "FREE", "NO_CLAIMS", "NOTHING", "NODE_WORDS", "PATHS",
    "AccessMode", "BindingMode", "Blocker", "NodeRoom", "PinnedPod", "stuck", "Capacity", "Choice", "Claim", "Known", "Placed", "Plan", "PodClaims",
    "PodVolume", "Progress", "Source", "Step", "Storage", "StorageClass", "StorageKind", "Volume", "VolumeFit", "VolumeMode",
    "VolumeIndex", "VolumeReason",
    "choose", "fit_nodes", "leftovers", "matches", "parse_capacity", "parse_claim", "parse_class", "parse_csidriver", "parse_csinode",
    "parse_volume", "plan", "pod_volumes", "progress", "sort_claims", "undo",
]
