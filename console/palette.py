"""The command palette (ctrl+p): our views, our actions and our themes by name, nothing else.

Every action is listed from every view. One that cannot be used now is listed dimmed with the
reason (``Drain selected node — select a node in the Nodes view``, ``read-only console``, or the
RBAC rule that forbids it); choosing it says the reason instead of acting. Actions that act on a
row use the row selected in the current view. The themes are ours (``themes/*.yaml`` and the
operator's own); choosing one switches the console to it. Textual's own commands (its themes,
keys panel, screenshot, maximize) are not offered: the app defines no system commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content

#: (title, action, what it does); the action is run with ``App.run_action``
VIEWS: tuple[tuple[str, str, str], ...] = (
    ("Go to overview", "show('overview')", "cluster allocation, queues, pending reasons, events"),
    ("Go to queues", "show('queues')", "cohorts, quotas, borrowing and each queue's jobs"),
    ("Go to jobs", "show('jobs')", "every job with state, wait, reason, position and ETA"),
    ("Go to nodes", "show('nodes')", "GPUs used per node; cordon, uncordon, drain"),
    ("Go to topology", "show('topology')", "the GPU heatmap by block, rack and node"),
    ("Go to events", "show('events')", "the audit trail of operator actions and preemptions"),
)
ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("Approve selected job", "approve", "let a manual-approval job be admitted"),
    ("Hold selected job", "hold", "keep a job from being admitted"),
    ("Release selected job", "release", "undo a hold"),
    ("Preempt selected job", "preempt", "stop the gang and requeue it (asks first)"),
    ("Show details of selected job", "details", "why it waits, its runs and placements"),
    ("Show YAML of selected job's pods", "pod_yaml", "the pods as the API server has them (y)"),
    ("Show logs of selected job's pods", "pod_logs", "the last lines of each pod's log (l)"),
    ("Cordon selected node", "cordon", "no new pods on the node"),
    ("Uncordon selected node", "uncordon", "let pods land on the node again"),
    ("Drain selected node", "drain", "cordon and requeue every gang on it (asks first)"),
    ("Edit quota of selected queue", "edit_quota", "quota, borrowing and lending limits with a preview"),
    ("Filter the table", "filter", "show only the rows that contain a text (! inverts)"),
    ("Sort jobs by the next column", "sort", ""),
    ("Pause or resume the replay", "toggle_pause", ""),
    ("Replay faster", "faster", ""),
    ("Replay slower", "slower", ""),
    ("Help", "help", "the keys of the current view"),
    ("Quit", "quit", "leave the console"),
)


@dataclass(frozen=True, slots=True)
class Entry:
    title: str
    action: str
    help: str
    #: why it cannot be used now; None when it can
    unavailable: str | None = None

    def shown(self, title: Content) -> Content:
        """The title as listed: dimmed, with the reason, when unavailable."""
        if self.unavailable is None:
            return title
        return title.stylize("dim").append_text(f" — {self.unavailable}", "dim italic")

    @property
    def help_text(self) -> str:
        return f"unavailable: {self.unavailable}" if self.unavailable else self.help


def entries(app) -> Iterator[Entry]:
    """What the palette offers in ``app`` now: views, every action (with why one is unavailable),
    then the themes."""
    for title, action, help_text in VIEWS:
        yield Entry(title, action, help_text)
    for title, action, help_text in ACTIONS:
        yield Entry(title, action, help_text, app.unavailable_reason(action))
    for name in sorted(app._themes):
        current = " (in use)" if name == app.theme_name else ""
        yield Entry(f"Theme: {name}{current}", f"use_theme_named('{name}')", "switch the console's colours")


class UsherCommands(Provider):
    def _runner(self, entry: Entry):
        if entry.unavailable is not None:
            return partial(self.app.notify, f"{entry.title}: {entry.unavailable}", severity="warning")
        return partial(self.app.run_action, entry.action)

    async def discover(self) -> Hits:
        for entry in entries(self.app):
            yield DiscoveryHit(entry.shown(Content(entry.title)), self._runner(entry), text=entry.title, help=entry.help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in entries(self.app):
            score = matcher.match(entry.title)
            if score > 0:
                shown = entry.shown(matcher.highlight(entry.title))
                yield Hit(score, shown, self._runner(entry), text=entry.title, help=entry.help_text)
