"""The console's views and actions, and when an action can be used.

One table per question the app, the palette and the help screen ask: which views there are and
what ``:`` words name them (``VIEW_ALIASES``), which actions change the cluster (``MUTATING``:
gone in ``--readonly``, disabled when RBAC forbids them), which need a selected job, node or
queue, and why an action cannot be used here (``WHERE``). :class:`Availability` answers Textual's
``check_action`` from these tables, so a binding, the palette and ``?`` agree on what is enabled.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from usher.engine.enums import Action

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class View(StrEnum):
    OVERVIEW = "overview"
    QUEUES = "queues"
    JOBS = "jobs"
    NODES = "nodes"
    TOPOLOGY = "topology"
    EVENTS = "events"


VIEW_ALIASES = {
    "o": View.OVERVIEW, "overview": View.OVERVIEW, "home": View.OVERVIEW,
    "queue": View.QUEUES, "queues": View.QUEUES, "cq": View.QUEUES,
    "j": View.JOBS, "job": View.JOBS, "jobs": View.JOBS, "po": View.JOBS, "pods": View.JOBS,
    "n": View.NODES, "no": View.NODES, "node": View.NODES, "nodes": View.NODES,
    "t": View.TOPOLOGY, "topo": View.TOPOLOGY, "topology": View.TOPOLOGY, "heatmap": View.TOPOLOGY,
    "e": View.EVENTS, "ev": View.EVENTS, "event": View.EVENTS, "events": View.EVENTS, "audit": View.EVENTS,
}

#: actions that change the cluster: gone in --readonly, disabled when RBAC forbids them
MUTATING = {
    "approve": Action.APPROVE,
    "hold": Action.HOLD,
    "release": Action.RELEASE,
    "preempt": Action.PREEMPT,
    "cordon": Action.CORDON,
    "uncordon": Action.UNCORDON,
    "drain": Action.DRAIN,
    "edit_quota": Action.SET_QUOTA,
}
JOB_ACTIONS = {"approve", "hold", "release", "preempt", "details", "pod_yaml", "pod_logs"}
NODE_ACTIONS = {"cordon", "uncordon", "drain"}
REPLAY_ACTIONS = {"toggle_pause", "faster", "slower"}
TABLE_ACTIONS = {"filter", "invert", "sort", "sort_reverse"}
#: why an action cannot be used in the view on screen (the palette and help say it)
WHERE = {
    **{a: "select a job in the Jobs or Queues view" for a in JOB_ACTIONS},
    "details": "select a job in the Jobs or Queues view, or an event in the Events view",
    **{a: "select a node in the Nodes view" for a in NODE_ACTIONS},
    "edit_quota": "select a queue in the Queues view",
    "sort": "only the Jobs view sorts",
    "sort_reverse": "only the Jobs view sorts",
    "filter": "this view has no table to filter",
    "invert": "this view has no table to filter",
}


class Availability(_Base):
    """The app's answers to "can this action be used now, and if not, why?"."""

    readonly: bool
    live: bool
    is_replay: bool
    view: View
    forbidden: dict[Action, str]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MUTATING:
            if self.readonly:
                return False
            if MUTATING[action] in self.forbidden:
                return None
        if action in REPLAY_ACTIONS:
            return self.is_replay and self.live
        if action == "details":
            return self.view in (View.JOBS, View.QUEUES, View.EVENTS)
        if action in JOB_ACTIONS:
            return self.view in (View.JOBS, View.QUEUES)
        if action in NODE_ACTIONS:
            return self.view == View.NODES
        if action == "edit_quota":
            return self.view == View.QUEUES
        if action in TABLE_ACTIONS:
            if action in ("sort", "sort_reverse"):
                return self.view == View.JOBS
            return self.view in (View.JOBS, View.NODES, View.EVENTS, View.QUEUES)
        return True

    def disabled_reason(self, action: str) -> str | None:
        """Why a mutating action cannot be used here, in words (None when it can)."""
        if action not in MUTATING:
            return None
        if self.readonly:
            return "read-only console"
        return self.forbidden.get(MUTATING[action])

    def unavailable_reason(self, action: str) -> str | None:
        """Why ``action`` cannot be used now, in words, None when it can: read-only, RBAC, or
        the view it needs (``select a node in the Nodes view``)."""
        if self.check_action(action, ()):
            return None
        if reason := self.disabled_reason(action):
            return reason
        if action in REPLAY_ACTIONS:
            return "only a replay has a speed" if not self.is_replay else "this replay is stopped"
        return WHERE.get(action, "not here")
