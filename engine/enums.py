"""String enums shared by every layer of the engine: states, reasons, actions, policies.

They are ``StrEnum`` so that reports and logs carry the plain spec names
(``"WaitingForQuota"``) while code compares against named members.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a job stands, as the report's ``state`` field names it."""

    PENDING = "Pending"
    RUNNING = "Running"
    FINISHED = "Finished"
    AWAITING_APPROVAL = "AwaitingApproval"
    HELD = "Held"


class PendingReason(StrEnum):
    """Why a job that is not running has not started."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_QUOTA = "ExceedsQuota"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    TOPOLOGY_UNSATISFIABLE = "TopologyUnsatisfiable"
    AWAITING_APPROVAL = "AwaitingApproval"
    HELD = "Held"
    RESERVED_FOR_HIGHER_PRIORITY = "ReservedForHigherPriority"
    NO_MATCHING_NODES = "NoMatchingNodes"
    # Only on a cluster, where jobs are pods that can be malformed or arrive one by one:
    UNKNOWN_QUEUE = "UnknownQueue"
    #: the pod's namespace may not use the queue it names (or lands in): the queue's
    #: ``namespaces`` and ``namespaceSelector`` do not include it
    QUEUE_NOT_ALLOWED = "QueueNotAllowed"
    WAITING_FOR_GANG = "WaitingForGangMembers"
    INVALID_REQUEST = "InvalidRequest"
    #: the API server refused to bind one of its pods (an admission webhook, a policy): tried
    #: again after a wait that doubles with each refusal
    BIND_REFUSED = "BindRefused"
    #: a pod's volumes let it start nowhere yet (a claim or class not found, an unbound claim of
    #: an Immediate class, a ReadWriteOncePod claim in use), or its gang's claims are being bound
    WAITING_FOR_VOLUMES = "WaitingForVolumes"
    #: a pod's device claims are still to be made from their templates (by the cluster's
    #: resourceclaim controller): nothing is wrong, it waits for them
    WAITING_FOR_CLAIMS = "WaitingForResourceClaims"


class EndReason(StrEnum):
    """Why a run (an interval in which a job held resources) ended."""

    FINISHED = "Finished"
    PREEMPTED = "Preempted"
    DRAINED = "Drained"
    NODE_FAILED = "NodeFailed"
    OPERATOR_PREEMPTED = "OperatorPreempted"
    #: on a cluster: a member of the gang was lost (drained, deleted, failed), so usher stopped the rest
    GANG_BROKEN = "GangBroken"
    RUNNING = "Running"


class TopologyMode(StrEnum):
    """How strictly a pod group must sit inside one topology domain."""

    REQUIRED = "required"
    PREFERRED = "preferred"


class Approval(StrEnum):
    AUTO = "auto"
    MANUAL = "manual"


class WithinQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class Action(StrEnum):
    """Operator commands and node events, as a scenario's ``events`` list spells them."""

    DRAIN = "drain"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    FAIL = "fail"
    RECOVER = "recover"
    APPROVE = "approve"
    PREEMPT = "preempt"
    HOLD = "hold"
    RELEASE = "release"
    SET_QUOTA = "setQuota"


class AuditAction(StrEnum):
    """What the scheduler itself did, as its entries in the audit trail (the events view) name it."""

    PREEMPT = "preempt"
    BIND = "bind"  # a bind the backend could not carry out
    GROW = "grow"
    COMPLETE = "complete"  # on a cluster: a gang found partly bound was bound whole, its teardown refused
    SHRINK = "shrink"
    MOVE = "move"  # consolidation moved a job to make room for a gang
    MAKE_ROOM = "make-room"  # the gang that consolidation started
    KEEP_ROOM = "keep-room"  # on a cluster: a moved job came back to the room kept for it, or did not
    RETIRE_QUEUE = "retire-queue"  # on a cluster: a queue left the config while jobs of it run


class MoveMode(StrEnum):
    """How a backend can move a running job (consolidation): whether at all, and how."""

    #: never: consolidation is off
    NEVER = "never"
    #: stopped and started again elsewhere at the same moment (a replay)
    AT_ONCE = "at-once"
    #: on a cluster: its pods are evicted and its owner creates new ones later; the room found
    #: for it is kept until they come back and are bound there (``state.KeptRoom``)
    ON_RETURN = "on-return"


class DecisionKind(StrEnum):
    """What a scheduling cycle asks a backend to do."""

    BIND = "bind"
    EVICT = "evict"


class Capability(StrEnum):
    """What only some controllers can do, as the console asks it (``contract.ConsoleController``)."""

    #: a replay: its speed can be changed, it can be paused, it ends; a failure stops it for good
    PACE = "pace"
    #: a cluster: each job's pods can be read from the API server (YAML, logs)
    PODS = "pods"
    #: a cluster: the operator's RBAC may forbid actions, and can be asked which
    PERMISSIONS = "permissions"
