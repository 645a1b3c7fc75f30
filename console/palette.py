"""The command palette provider (ctrl+p): every view, action and theme by name.

Actions that act on a row use the row selected in the current view; an action that is not
available here (read-only, forbidden by RBAC, another view) is listed with the reason instead.
"""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

ENTRIES: tuple[tuple[str, str, str], ...] = (
    ("Go to overview", "show('overview')", "cluster allocation, queues, pending reasons, events"),
    ("Go to queues", "show('queues')", "cohorts, quotas, borrowing and each queue's jobs"),
    ("Go to jobs", "show('jobs')", "every job with state, wait, reason, position and ETA"),
    ("Go to nodes", "show('nodes')", "GPUs used per node; cordon, uncordon, drain"),
    ("Go to topology", "show('topology')", "the GPU heatmap by block, rack and node"),
    ("Go to events", "show('events')", "the audit trail of operator actions and preemptions"),
    ("Approve selected job", "approve", "let a manual-approval job be admitted"),
    ("Hold selected job", "hold", "keep a job from being admitted"),
    ("Release selected job", "release", "undo a hold"),
    ("Preempt selected job", "preempt", "stop the gang and requeue it (asks first)"),
    ("Show details of selected job", "details", "why it waits, its runs and placements"),
    ("Cordon selected node", "cordon", "no new pods on the node"),
    ("Uncordon selected node", "uncordon", "let pods land on the node again"),
    ("Drain selected node", "drain", "cordon and requeue every gang on it (asks first)"),
    ("Edit quota of selected queue", "edit_quota", "quota, borrowing and lending limits with a preview"),
    ("Pause or resume the replay", "toggle_pause", ""),
    ("Replay faster", "faster", ""),
    ("Replay slower", "slower", ""),
    ("Help", "help", "the keys of the current view"),
)


class UsherCommands(Provider):
    def _entries(self):
        app = self.app
        for title, action, help_text in ENTRIES:
            name = action.split("(")[0]
            allowed = app.check_action(name, ())
            if allowed is False:
                continue
            if allowed is None:
                yield title, None, f"unavailable: {app.disabled_reason(name) or 'not here'}"
            else:
                yield title, action, help_text
        for name in sorted(app._themes):
            yield f"Theme: {name}", f"use_theme_named('{name}')", "switch the console's colours"

    def _runner(self, action: str | None, reason: str):
        if action is None:
            return partial(self.app.notify, reason, severity="warning")
        return partial(self.app.run_action, action)

    async def discover(self) -> Hits:
        for title, action, help_text in self._entries():
            yield DiscoveryHit(title, self._runner(action, help_text), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), self._runner(action, help_text), help=help_text)
