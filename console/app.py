"""The operator console: one Textual app over a controller's state and its command queue.

The console is a client of the controller, the same for a replay and a cluster, through the
contract both declare (``usher.engine.contract.ConsoleController``: the members each has, and
``Capability`` flags for what only one can do, such as a replay's speed or a cluster's pods): the
controller runs in the app's event loop, the app reads its state through a cached view model
(``model.ConsoleModel``) and sends operator commands with ``controller.post``, awaiting each
result. It redraws twice a second, and only the view on screen, and only when the state, the
clock or the telemetry changed.

Keys follow k9s: ``:`` command mode (``:queues``, ``:jobs``, ``:nodes``, ``:topology``,
``:events``, ``:q`` quits; Tab completes), ``/`` filter (``!`` inverts), ``esc`` back (closes a
dialog or the prompt, leaves a detail, clears the filter, returns to the previous view), ``?``
help, single letters act on the selected row (``y`` its pods' YAML, ``l`` their logs, ``ctrl+d``
preempts as ``p`` does). The header shows where you are (``jobs › llm-pretrain``); an error on
the status line stays until the view changes or the next action succeeds. ``ctrl+p`` lists our
views, actions (those unavailable here with the reason) and themes. Every binding has an id
(``keys.BindingId``) and can be remapped in ``~/.config/usher/keys.yaml``. ``--readonly``
removes every action that changes anything; on a cluster, actions the operator's RBAC forbids
are shown disabled with the reason.

On a cluster the header says ``live`` while every informer is in touch with the API server;
when contact is lost it says ``reconnecting (12s)``, then, past ``connection.STALE_AFTER``,
``stale since 14:02:07``, and the views are dimmed: what they show is as of that moment. The
informers reconnect (resuming, or listing again) by themselves, and the header goes back to
``live`` once they have.
"""

from __future__ import annotations

import asyncio
import re
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Input, Label, Static

from usher.engine import fmt
from usher.engine.controller import Command
from usher.engine.contract import ConsoleController, require
from usher.engine.core import CommandError
from usher.engine.enums import Action, Capability, JobState
from usher.engine.state import INF, MILLI
from usher.engine.backends.kube.connection import Connection, ConnectionState
from usher.engine.whatif import drain_impact, preempt_impact, quota_preview

from .config_errors import ConfigErrors
from .dialogs import ConfirmDialog, QuotaDialog, QuotaEdit, TextScreen
from .footer import UsherFooter
from .heatmap import scope_title
from .keygate import GATED, KeyGate
from .keys import BindingId, default_keymap_path, load_keymap
from .model import (
    JOB_COLUMNS,
    NODE_COLUMNS,
    QUEUE_COLUMNS,
    ConsoleModel,
    JobRow,
    RunState,
    link_text,
    moment,
    node_used_milli,
    span,
    state_version,
)
from .palette import UsherCommands
from .pods import NO_LOGS_ON_A_REPLAY, logs_text, replay_job_yaml, yaml_text
from .prompt import HINT, QUIT_WORDS, CommandPrompt, completions
from .table import Row, RowTable
from .themes import DEFAULT_THEME, UsherTheme, load_themes, user_theme_dir
from .views import HeatmapPane, TextPane, render_outside_job, render_overview

#: seconds between redraw checks; a redraw happens only when something changed
REFRESH = 0.5
#: seconds before a cluster controller that failed is started again (doubling up to 30 s)
CONTROLLER_RESTART = 1.0


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

#: jobs view: sort keys per column (the row's typed values, not its text)
JOB_SORT = (
    lambda r: r.name,
    lambda r: str(r.state),
    lambda r: r.queue,
    lambda r: -r.priority,
    lambda r: -r.gpus,
    lambda r: -r.pods,
    lambda r: -r.wait,
    lambda r: r.reason,
    lambda r: (r.position is None, r.position or 0),
    lambda r: (r.eta is None, r.eta or 0.0),
)
#: how each table folds as the terminal narrows: its columns, most important first; the first
#: ``essential`` stay (``shrink`` ones cut short for them); what folds away is on the detail page
JOB_FOLD: dict[str, Any] = {
    "keep": ("job", "state", "reason", "ETA", "pos", "GPUs", "queue", "wait", "prio", "pods"),
    "essential": 5,
    "shrink": ("job", "reason"),
}
QUEUE_FOLD: dict[str, Any] = {
    "keep": ("queue", "used", "quota", "pending", "running", "borrowed", "lent", "share"),
    "essential": 3,
    "shrink": ("queue",),
}
NODE_FOLD: dict[str, Any] = {"keep": ("node", "GPUs", "status", "jobs", "model", "labels"), "shrink": ("labels", "node")}
EVENT_FOLD: dict[str, Any] = {"shrink": ("result", "target")}
STATE_TONE = {
    JobState.RUNNING: "success",
    JobState.PENDING: "",
    JobState.AWAITING_APPROVAL: "warning",
    JobState.HELD: "warning",
    JobState.FINISHED: "dim",
}


#: what the engine's reply says when a command changed nothing ("not held; nothing to release")
NOTHING_DONE = "nothing to "
#: jobs-view columns whose sort key puts the largest first (the others sort a to z)
DESCENDING = frozenset({3, 4, 5, 6})


def asks_words(job) -> str:
    """What a job asks for, in pods and GPUs: ``4 pods x 8 GPUs (worker)``; a pod group's name
    is added only when it is one a person gave (not the ``g0`` a cluster's gang is built with)."""
    parts = []
    for g in job.groups:
        if g.gpu_milli >= MILLI and g.gpu_milli % MILLI == 0:
            each = fmt.plural(g.gpu_milli // MILLI, "GPU")
        elif g.gpu_milli:
            each = f"{fmt.gpus(g.gpu_milli)} of a GPU"
        else:
            each = "no GPU"
        name = "" if not g.name or re.fullmatch(r"g\d+|pods?", g.name) else f" ({g.name})"
        parts.append(f"{fmt.plural(g.count, 'pod')} x {each}{name}")
    return " + ".join(parts)


class UsherApp(App[int]):
    TITLE = "usher"
    CSS_PATH = "usher.tcss"
    CSS = """
    #views.-stale {
        opacity: 55%;
    }
    """
    #: ours only: no Textual system commands (its themes, keys panel, screenshot, maximize)
    COMMANDS = {UsherCommands}
    ENABLE_COMMAND_PALETTE = True
    AUTO_FOCUS = None

    BINDINGS = [
        Binding("colon", "command_mode", "Command", id=str(BindingId.COMMAND)),
        Binding("slash", "filter", "Filter", id=str(BindingId.FILTER)),
        Binding("exclamation_mark", "invert", "Invert", show=False, id=str(BindingId.INVERT)),
        Binding("escape", "back", "Back", show=False, id=str(BindingId.BACK)),
        Binding("question_mark", "help", "Help", id=str(BindingId.HELP)),
        Binding("q,ctrl+q", "quit", "Quit", id=str(BindingId.QUIT)),
        Binding("1", "show('overview')", "Overview", show=False, id=str(BindingId.VIEW_OVERVIEW)),
        Binding("2", "show('queues')", "Queues", show=False, id=str(BindingId.VIEW_QUEUES)),
        Binding("3", "show('jobs')", "Jobs", show=False, id=str(BindingId.VIEW_JOBS)),
        Binding("4", "show('nodes')", "Nodes", show=False, id=str(BindingId.VIEW_NODES)),
        Binding("5", "show('topology')", "Topology", show=False, id=str(BindingId.VIEW_TOPOLOGY)),
        Binding("6", "show('events')", "Events", show=False, id=str(BindingId.VIEW_EVENTS)),
        Binding("enter", "details", "Details", id=str(BindingId.DETAILS)),
        Binding("a", "approve", "Approve", id=str(BindingId.APPROVE)),
        Binding("h", "hold", "Hold", id=str(BindingId.HOLD)),
        Binding("r", "release", "Release", id=str(BindingId.RELEASE)),
        Binding("p,ctrl+d", "preempt", "Preempt", id=str(BindingId.PREEMPT)),
        Binding("y", "pod_yaml", "YAML", show=False, id=str(BindingId.YAML)),
        Binding("l", "pod_logs", "Logs", show=False, id=str(BindingId.LOGS)),
        Binding("c", "cordon", "Cordon", id=str(BindingId.CORDON)),
        Binding("u", "uncordon", "Uncordon", id=str(BindingId.UNCORDON)),
        Binding("d", "drain", "Drain", id=str(BindingId.DRAIN)),
        Binding("e", "edit_quota", "Edit quota", id=str(BindingId.EDIT_QUOTA)),
        Binding("o", "sort", "Sort", show=False, id=str(BindingId.SORT)),
        Binding("O", "sort_reverse", "Reverse", show=False, id=str(BindingId.SORT_REVERSE)),
        Binding("space", "toggle_pause", "Pause", id=str(BindingId.PAUSE)),
        Binding("plus,equals_sign", "faster", "Faster", id=str(BindingId.FASTER)),
        Binding("minus", "slower", "Slower", id=str(BindingId.SLOWER)),
        Binding("T", "next_theme", "Theme", show=False, id=str(BindingId.THEME)),
    ]

    def __init__(
        self,
        controller: ConsoleController,
        speed: float | None = 60.0,
        readonly: bool = False,
        theme: str = DEFAULT_THEME,
        keymap: Path | None = None,
        live: bool = True,
        clock=time.monotonic,
    ) -> None:
        super().__init__()
        #: the replay's or the cluster's controller, checked against the console's contract
        self.controller: ConsoleController = require(controller)
        self.speed = speed
        self.readonly = readonly
        self.live = live
        #: the controller's last published snapshot (``_on_snapshot``); None: none published yet
        self._snapshot = None
        self.model = ConsoleModel(
            lambda: self.controller.state, borrowing=self._policy_borrows, verdicts=controller.verdicts,
            outside=lambda: self.snapshot().outside,
        )
        #: a replay: it has a pace (speed, pause), it ends, and a failure ends it
        self.is_replay = Capability.PACE in controller.capabilities
        self.view = View.OVERVIEW
        self.history: list[View] = []
        self.filters: dict[View, str] = {}
        self.job_sort: tuple[int, bool] | None = None
        self.forbidden: dict[Action, str] = {}
        self.status_text = Text("")
        self.status_tone = ""
        self.prompt_mode: str | None = None
        self._drawn: dict[View, tuple] = {}
        self._bar: Text | None = None
        #: job id -> (its row's data, the row drawn from it): unchanged jobs reuse their row
        self._job_rows: dict[str, tuple[JobRow, Row]] = {}
        self._clock = clock
        self._themes, theme_errors = load_themes([user_theme_dir()])
        self._startup_notes: list[tuple[str, str]] = [(e, "error") for e in theme_errors]
        if theme not in self._themes:
            self._startup_notes.append((f"unknown theme {theme!r}; using {DEFAULT_THEME} (known: {', '.join(sorted(self._themes))})", "error"))
            theme = DEFAULT_THEME
        self.theme_name = theme
        self._keymap_path = keymap
        #: the terminal's keys and pastes, one at a time (a burst is handled as typed slowly)
        self.keys = KeyGate(self, super().on_event)

    # -- building ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="bar")
        with ContentSwitcher(initial=str(View.OVERVIEW), id="views"):
            with Vertical(id=str(View.OVERVIEW)):
                yield TextPane(id="overview-text")
            with Vertical(id=str(View.QUEUES)):
                yield ConfigErrors(lambda: self.controller.config_refusals, id="config-errors")
                yield RowTable(QUEUE_COLUMNS, id="queue-table", **QUEUE_FOLD)
                yield Label("", id="queue-jobs-title")
                yield RowTable(JOB_COLUMNS, id="queue-jobs", **JOB_FOLD)
            with Vertical(id=str(View.JOBS)):
                yield RowTable(JOB_COLUMNS, id="job-table", **JOB_FOLD)
            with Vertical(id=str(View.NODES)):
                yield RowTable(NODE_COLUMNS, id="node-table", **NODE_FOLD)
            with Vertical(id=str(View.TOPOLOGY)):
                yield HeatmapPane(id="heatmap")
            with Vertical(id=str(View.EVENTS)):
                yield RowTable(("time", "actor", "action", "target", "result"), id="event-table", **EVENT_FOLD)
        yield CommandPrompt(id="prompt")
        yield Static(id="status")
        yield UsherFooter()

    def on_mount(self) -> None:
        for ut in self._themes.values():
            self.register_theme(ut.textual)
        self.theme = self._themes[self.theme_name].textual.name
        self._load_keymap()
        for message, severity in self._startup_notes:
            self.notify(message, severity=severity, timeout=8)  # type: ignore[arg-type]
        self.query_one("#prompt", Input).display = False
        self.set_interval(REFRESH, self.redraw)
        # a key whose dialog it closed leaves nothing to wait for: the gate is checked for that
        self.set_interval(REFRESH, self.keys.check)
        if self.live:
            # watching the controller is what makes a replay sample its synthetic GPU telemetry
            self.controller.subscribe(self._on_snapshot)
            self.run_worker(self._run_controller(), exclusive=True, name="controller", exit_on_error=False)
            if Capability.PERMISSIONS in self.controller.capabilities and not self.readonly:
                self.run_worker(self._ask_rbac(), name="rbac")
        self.redraw(force=True)
        # and again once laid out: what a view shows depends on the room it has
        self.call_after_refresh(self.redraw, True)

    async def on_event(self, event: events.Event) -> None:
        # keys and pastes as the terminal sends them (not yet given to a widget) go through the
        # gate; everything else, and a key bubbling back up from a widget, as Textual does
        if isinstance(event, GATED) and not event.is_forwarded:
            await self.keys.take(event)
            return
        await super().on_event(event)

    async def _run_controller(self) -> None:
        """Run the controller; if it fails, say so and, on a cluster, start it again: the
        console outlives its source of data (a replay that fails stops where it is)."""
        delay = CONTROLLER_RESTART
        while True:
            try:
                await self.controller.run(self.speed)
                return
            except Exception as exc:  # noqa: BLE001 - shown to the operator, never a crash of the console
                again = "" if self.is_replay else f"; starting it again in {fmt.duration(delay)}"
                self.set_status(f"✗ the controller stopped: {exc}{again}", "error")
                self.notify(f"{type(exc).__name__}: {exc}", title="controller stopped", severity="error")
            if self.is_replay:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _policy_borrows(self) -> bool:
        return self.controller.policy.borrowing

    def _on_snapshot(self, snapshot) -> None:
        """Snapshots arrive after every step; the refresh timer draws, so they are only kept."""
        self._snapshot = snapshot

    def snapshot(self):
        """The controller's last published snapshot (before the first: one asked for now)."""
        if self._snapshot is None:
            self._snapshot = self.controller.snapshot()
        return self._snapshot

    def _load_keymap(self) -> None:
        path = self._keymap_path or default_keymap_path()
        if self._keymap_path is None and not path.exists():
            return
        try:
            self.set_keymap(load_keymap(path))
        except ValueError as exc:
            self.notify(f"keymap ignored: {exc}", severity="error", timeout=10)

    async def _ask_rbac(self) -> None:
        await self.controller.synced.wait()
        try:
            self.forbidden = await self.controller.forbidden_actions()
        except Exception as exc:  # noqa: BLE001 - an unanswerable review leaves actions as they are
            self.set_status(f"could not check permissions: {exc}", "warning")
            return
        if self.screen_stack:  # the answer can come while the console is closing
            self.refresh_bindings()

    @property
    def palette(self):
        return self._themes[self.theme_name].heatmap

    @property
    def usher_theme(self) -> UsherTheme:
        return self._themes[self.theme_name]

    # -- what is enabled -----------------------------------------------------------------

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

    def get_system_commands(self, screen):
        """None: the palette offers the console's own views, actions and themes only."""
        return iter(())

    # -- the header, the status line -------------------------------------------------------

    def connection(self) -> Connection | None:
        """How a cluster controller is in touch with its API server (None for a replay)."""
        return self.controller.connection

    def run_state(self) -> RunState:
        if not self.is_replay:
            connection = self.connection()
            if connection is None or connection.live or not self._synced():
                return RunState.LIVE
            return RunState.STALE if connection.state is ConnectionState.STALE else RunState.RECONNECTING
        if self.controller.done:
            return RunState.FINISHED
        return RunState.PAUSED if self.controller.paused or not self.live else RunState.RUNNING

    def bar_text(self) -> Text:
        now = self.controller.now
        t = Text()
        t.append(" usher ", Style(bold=True, reverse=True))
        t.append(f"  {self.controller.state.name}  ", Style(bold=True))
        t.append(f"{moment(now)}  ")
        rs = self.run_state()
        speed = self.controller.speed
        connection = self.connection() if rs in (RunState.RECONNECTING, RunState.STALE) else None
        if connection is not None:
            theme = self.current_theme
            colour = theme.error if rs == RunState.STALE else theme.warning
            t.append(f" {link_text(rs, connection.since, time.time())} ", Style(bold=True, reverse=True, color=colour))
        else:
            t.append(str(rs) + (f" ×{speed:g}" if rs == RunState.RUNNING and speed else ""))
        t.append("   ")
        t.append_text(self.breadcrumbs())
        flt = self.filters.get(self.view)
        if flt:
            t.append(f"   filter: {flt}", Style(italic=True))
        if self.readonly:
            t.append("   ")
            t.append(" READ-ONLY ", Style(bold=True, reverse=True, color=self.current_theme.warning))
        if not self.is_replay and not self._synced():
            t.append("   connecting…", Style(dim=True))
        return t

    def _synced(self) -> bool:
        return self.controller.synced.is_set()

    def set_status(self, text: str, tone: str = "") -> None:
        theme = self.current_theme
        colour = {"error": theme.error, "warning": theme.warning, "success": theme.success}.get(tone)
        self.status_text = Text(text, Style(color=colour) if colour else Style())
        self.status_tone = tone
        self.query_one("#status", Static).update(self.status_text)

    def clear_error(self) -> None:
        """Take an error or warning off the status line (the view changed, or something worked)."""
        if self.status_tone in ("error", "warning"):
            self.set_status("")

    def breadcrumbs(self) -> Text:
        """Where the operator is: the view, then what is selected in it (``queues › research ›
        llm-pretrain``, ``topology › block-a › rack-2``)."""
        t = Text(str(self.view), Style(bold=True))
        try:
            trail = self._trail()
        except NoMatches:
            trail = []  # the views are not mounted (starting, closing): the view alone
        for crumb in trail:
            t.append(" › ", Style(dim=True))
            t.append(crumb if len(crumb) <= 40 else crumb[:39] + "…")
        return t

    def _trail(self) -> list[str]:
        trail: list[str] = []
        if self.view == View.QUEUES:
            queue = self.query_one("#queue-table", RowTable).current_key
            trail = [queue] if queue else []
            if queue and self.focused is self.query_one("#queue-jobs", RowTable):
                job = self.query_one("#queue-jobs", RowTable).current_key
                trail += [job] if job else []
        elif self.view in (View.JOBS, View.NODES):
            key = self.selected_job() if self.view == View.JOBS else self.selected_node()
            trail = [key] if key else []
        elif self.view == View.TOPOLOGY:
            trail = scope_title(self.controller.state, self.query_one("#heatmap", HeatmapPane).hm).split(" › ")[1:]
        return trail

    def _refresh_bar(self) -> None:
        bar = self.bar_text()
        if bar != self._bar:
            self._bar = bar
            self.query_one("#bar", Static).update(bar)

    # -- drawing -------------------------------------------------------------------------

    def redraw(self, force: bool = False) -> None:
        """Redraw the header and the visible view if anything they show changed."""
        if not self.is_mounted:
            return
        try:
            self._redraw(force)
        except NoMatches:
            # the widgets are being replaced (starting, a theme change, closing): the next
            # redraw draws them
            return

    def _redraw(self, force: bool) -> None:
        bar = self.bar_text()
        if bar != self._bar:
            self.query_one("#bar", Static).update(bar)
            self._bar = bar
        stale = self.run_state() in (RunState.RECONNECTING, RunState.STALE)
        self.query_one("#views").set_class(stale, "-stale")
        now = self.controller.now
        telemetry = self.controller.telemetry
        key = (
            state_version(self.controller.state),
            self.snapshot().outside,
            round(now, 0),
            telemetry.version,
            self.filters.get(self.view),
            self.job_sort,
            self.theme_name,
            self.query_one("#views").size,
        )
        if not force and self._drawn.get(self.view) == key:
            return
        getattr(self, f"_draw_{self.view}")(now)
        self._drawn[self.view] = key

    def _draw_overview(self, now: float) -> None:
        pane = self.query_one("#overview-text", TextPane)
        telemetry = self.controller.telemetry
        util = self._mean_utilization(telemetry, now)
        text = render_overview(
            self.model.overview(now),
            self.model.queue_rows(),
            self.controller.state.audit,
            self.palette,
            self.size.width - 2,  # the pane's padding
            util,
            self.model.awaiting_approval(),
            telemetry.source_errors() if telemetry is not None else {},
            height=self.query_one("#views").size.height,
        )
        pane.show(text)

    def _mean_utilization(self, telemetry, now: float) -> float | None:
        if telemetry is None:
            return None
        from usher.engine.telemetry import Metric

        values = []
        for node in self.controller.state.nodes:
            for g in range(node.gpu_count):
                v = telemetry.value(node.name, g, Metric.UTILIZATION, now)
                if v is not None:
                    values.append(v)
        return sum(values) / len(values) if values else None

    def _filtered(self, view: View, rows: list[Row]) -> list[Row]:
        text = self.filters.get(view, "")
        if not text:
            return rows
        invert = text.startswith("!")
        needle = text[1:].lower() if invert else text.lower()
        return [r for r in rows if (needle in " ".join(r.cells).lower()) != invert]

    def _job_table_rows(self, rows: list[JobRow], now: float) -> list[Row]:
        cache = self._job_rows
        out = []
        for r in rows:
            hit = cache.get(r.name)
            if hit is None or hit[0] != r or r.eta is not None:
                hit = (r, Row(r.name, r.cells(now), STATE_TONE.get(r.state, "")))
                cache[r.name] = hit
            out.append(hit[1])
        return out

    def _draw_jobs(self, now: float) -> None:
        rows = self.model.job_rows(now)
        table = self.query_one("#job-table", RowTable)
        if self.job_sort is not None:
            col, reverse = self.job_sort
            rows.sort(key=JOB_SORT[col], reverse=reverse)
            table.set_sort(col, (col in DESCENDING) != reverse)
        else:
            table.set_sort(None)
        table.set_rows(self._filtered(View.JOBS, self._job_table_rows(rows, now)))

    def _draw_queues(self, now: float) -> None:
        table = self.query_one("#queue-table", RowTable)
        rows = [
            Row(q.name, q.cells(), "dim" if q.name.startswith("cohort ") else ("warning" if q.borrowed else ""))
            for q in self.model.queue_rows()
        ]
        table.set_rows(rows)
        queue = self.selected_queue()
        title = self.query_one("#queue-jobs-title", Label)
        jobs = self.query_one("#queue-jobs", RowTable)
        if queue is None:
            title.update(" select a queue to see its jobs")
            jobs.set_rows([])
            return
        listed = self._filtered(View.QUEUES, self._job_table_rows(self.model.queue_jobs(queue, now), now))
        title.update(f" {queue}: running, then waiting in admission order ({fmt.plural(len(listed), 'job')})")
        jobs.set_rows(listed)

    def _draw_nodes(self, now: float) -> None:
        rows = [
            Row(n.name, n.cells(), "error" if n.failed else ("warning" if n.cordoned else ""))
            for n in self.model.node_rows()
        ]
        self.query_one("#node-table", RowTable).set_rows(self._filtered(View.NODES, rows))

    def _draw_topology(self, now: float) -> None:
        self.query_one("#heatmap", HeatmapPane).draw(
            self.controller.state, self.palette, self.controller.telemetry, now
        )

    def _draw_events(self, now: float) -> None:
        audit = self.controller.state.audit
        rows = [
            Row(str(i), (moment(e.time), e.actor, e.action, e.target, e.result), "error" if "rejected" in e.result or "failed" in e.result else "")
            for i, e in enumerate(audit)
        ]
        table = self.query_one("#event-table", RowTable)
        at_end = table.cursor >= len(table.rows) - 1
        table.set_rows(self._filtered(View.EVENTS, rows))
        if at_end and table.rows:
            table.select_key(table.rows[-1].key)

    # -- selection -----------------------------------------------------------------------

    def selected_queue(self) -> str | None:
        key = self.query_one("#queue-table", RowTable).current_key
        if key is None or key.startswith("cohort ") or key not in self.controller.state.queues:
            return None
        return key

    def selected_job(self) -> str | None:
        if self.view == View.JOBS:
            return self.query_one("#job-table", RowTable).current_key
        if self.view == View.QUEUES:
            return self.query_one("#queue-jobs", RowTable).current_key
        return None

    def selected_node(self) -> str | None:
        if self.view == View.NODES:
            return self.query_one("#node-table", RowTable).current_key
        return None

    def on_row_table_highlighted(self, event: RowTable.Highlighted) -> None:
        if event.table.id == "queue-table":
            self._drawn.pop(View.QUEUES, None)
            self.redraw(force=True)
        self._refresh_bar()

    # -- views and modes -----------------------------------------------------------------

    def action_show(self, view: str) -> None:
        self.switch_to(View(view))

    def switch_to(self, view: View, remember: bool = True) -> None:
        if view != self.view:
            self.clear_error()
            if remember:
                self.history.append(self.view)
                del self.history[:-20]
        self.view = view
        self.query_one("#views", ContentSwitcher).current = str(view)
        self.redraw()
        focus = {
            View.QUEUES: "#queue-table",
            View.JOBS: "#job-table",
            View.NODES: "#node-table",
            View.TOPOLOGY: "#heatmap",
            View.EVENTS: "#event-table",
        }.get(view)
        if focus:
            self.query_one(focus).focus()
        else:
            self.set_focus(None)
        self.refresh_bindings()
        self._refresh_bar()

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """Run an action; one of the app's that worked and said nothing takes an earlier error
        off the status line (a view change does too, in ``switch_to``)."""
        before = self.status_text
        handled = await super().run_action(action, default_namespace, namespaces)
        if handled and default_namespace in (None, self) and self.status_text is before:
            self.clear_error()
        return handled

    def action_command_mode(self) -> None:
        self._open_prompt("command", ":")

    def action_filter(self) -> None:
        self._open_prompt("filter", self.filters.get(self.view, ""))

    def _open_prompt(self, mode: str, value: str) -> None:
        prompt = self.query_one("#prompt", CommandPrompt)
        self.prompt_mode = mode
        prompt.placeholder = HINT if mode == "command" else "filter (start with ! to invert)"
        prompt.completer = self.complete_command if mode == "command" else None
        prompt.paste_lines = self._paste_into_prompt
        prompt.value = value
        prompt.display = True
        prompt.focus()
        prompt.cursor_position = len(value)

    def complete_command(self, text: str) -> list[str]:
        """What Tab completes ``text`` (typed after ``:``) to: commands, then theme names."""
        return completions(text, self._themes, replay=self.is_replay)

    def _close_prompt(self) -> None:
        prompt = self.query_one("#prompt", CommandPrompt)
        prompt.completer = None
        prompt.paste_lines = None
        prompt.display = False
        self.prompt_mode = None
        self.switch_to(self.view, remember=False)

    def on_paste(self, event: events.Paste) -> None:
        """A paste no text field took (the views have the focus): see ``paste_text``."""
        event.stop()
        if self.screen is not self.screen_stack[0]:
            # a dialog or a page is open: its keys are its own, and no command runs under it
            self.notify("paste ignored: close this dialog first (esc)", severity="warning")
            return
        self.paste_text(event.text)

    def paste_text(self, text: str) -> None:
        """What a paste does outside a text field: it is typed into the prompt, never taken as
        single-key actions (pasting ``drain`` must not drain). Each whole line that starts with
        ``:`` runs as a command, with ``/`` sets the filter; a last line with no newline is left
        open in the prompt to finish; any other line is said to be ignored."""
        *whole, last = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in whole:
            line = line.strip()
            self._run_pasted_line(line)
            if line[1:].split()[:1] and line.startswith(":") and line[1:].split()[0].lower() in QUIT_WORDS:
                return  # a pasted :q quits; nothing after it runs
        last = last.strip()
        if last.startswith(":"):
            self._open_prompt("command", last)
        elif last.startswith("/"):
            self._open_prompt("filter", last[1:])
            self.filters[self.view] = last[1:]
            self.redraw()
        elif last:
            self._ignore_pasted(last)

    def _run_pasted_line(self, line: str) -> None:
        if line.startswith(":"):
            self.run_command_line(line[1:])
        elif line.startswith("/"):
            self.filters[self.view] = line[1:].strip()
            self.redraw(force=True)
        elif line:
            self._ignore_pasted(line)

    def _ignore_pasted(self, line: str) -> None:
        shown = line if len(line) <= 30 else line[:29] + "…"
        self.set_status(f"pasted text ignored: {shown!r} (paste a :command or a /filter)", "warning")

    def _paste_into_prompt(self, text: str) -> None:
        """A paste with a newline into the open prompt: what it completes runs as if Enter was
        pressed, and the lines after it as a paste (``paste_text``)."""
        prompt = self.query_one("#prompt", CommandPrompt)
        at = prompt.cursor_position
        typed = prompt.value[:at] + text + prompt.value[at:]
        if self.prompt_mode == "filter":
            typed = "/" + typed
        self._close_prompt()
        self.paste_text(typed)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "prompt" and self.prompt_mode == "filter":
            self.filters[self.view] = event.value
            self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "prompt":
            return
        mode, text = self.prompt_mode, event.value.strip()
        self._close_prompt()
        if mode == "filter":
            self.filters[self.view] = text
            self.redraw(force=True)
        else:
            self.run_command_line(text.lstrip(":"))

    def run_command_line(self, text: str) -> None:
        """What ``:`` mode understands: a view name, ``theme NAME``, ``speed X``, ``quit``."""
        words = text.split()
        if not words:
            return
        head, rest = words[0].lower(), words[1:]
        if head in QUIT_WORDS:
            self.exit(0)
        elif head in VIEW_ALIASES:
            self.switch_to(VIEW_ALIASES[head])
        elif head == "theme" and rest:
            self.use_theme(rest[0])
        elif head == "theme":
            self.set_status(f":theme needs a name: {', '.join(sorted(self._themes))}", "error")
        elif head == "speed" and not self.is_replay:
            self.set_status(":speed: only a replay has a speed", "error")
        elif head == "speed" and not rest:
            self.set_status(":speed needs a number (×1 is real time)", "error")
        elif head == "speed":
            try:
                self.controller.speed = max(1.0, float(rest[0]))
                self.set_status(f"speed ×{self.controller.speed:g}")
            except ValueError:
                self.set_status(f"speed: {rest[0]!r} is not a number", "error")
        elif head == "help":
            self.action_help()
        else:
            self.set_status(f"unknown command :{text}   try {HINT}", "error")

    def action_back(self) -> None:
        if self.prompt_mode is not None:
            self._close_prompt()
            return
        if self.filters.get(self.view):
            self.filters[self.view] = ""
            self.redraw(force=True)
            return
        if self.view == View.TOPOLOGY and self.query_one("#heatmap", HeatmapPane).action_zoom_out():
            return
        if self.view == View.QUEUES and self.focused is self.query_one("#queue-jobs", RowTable):
            self.query_one("#queue-table", RowTable).focus()  # from a queue's jobs back to the queues
            self._refresh_bar()
            return
        if self.history:
            self.switch_to(self.history.pop(), remember=False)
        elif self.view != View.OVERVIEW:
            self.switch_to(View.OVERVIEW, remember=False)

    def action_invert(self) -> None:
        text = self.filters.get(self.view, "")
        self.filters[self.view] = text[1:] if text.startswith("!") else "!" + text
        self.redraw(force=True)

    def action_sort(self) -> None:
        col = 0 if self.job_sort is None else (self.job_sort[0] + 1) % len(JOB_COLUMNS)
        self.job_sort = (col, False)
        self._say_sort()
        self.redraw(force=True)

    def action_sort_reverse(self) -> None:
        col, reverse = self.job_sort or (0, False)
        self.job_sort = (col, not reverse)
        self._say_sort()
        self.redraw(force=True)

    def _say_sort(self) -> None:
        col, reverse = self.job_sort or (0, False)
        largest = (col in DESCENDING) != reverse
        self.set_status(f"jobs sorted by {JOB_COLUMNS[col]} {'▼ descending' if largest else '▲ ascending'} (o: next column, O: reverse)")

    def use_theme(self, name: str) -> None:
        if name not in self._themes:
            self.set_status(f"unknown theme {name!r}; known: {', '.join(sorted(self._themes))}", "error")
            return
        self.theme_name = name
        self.theme = self._themes[name].textual.name
        self.set_status(f"theme {name}")
        self.redraw(force=True)

    def action_use_theme_named(self, name: str) -> None:
        self.use_theme(name)

    def action_next_theme(self) -> None:
        names = sorted(self._themes)
        self.use_theme(names[(names.index(self.theme_name) + 1) % len(names)])

    def action_help(self) -> None:
        body = Text()
        body.append(f"Keys in the {self.view} view\n\n", Style(bold=True))
        keys_of: dict[tuple[str, str], list[str]] = {}
        listed = []
        for key, active in sorted(self.active_bindings.items(), key=lambda kv: kv[1].binding.description):
            b = active.binding
            if not b.description:
                continue
            if (b.action, b.description) not in keys_of:
                keys_of[(b.action, b.description)] = []
                listed.append(active)
            keys_of[(b.action, b.description)].append(self.get_key_display(b))
        for active in listed:
            b = active.binding
            keys = ", ".join(keys_of[(b.action, b.description)])
            action = b.action.split("(")[0]
            reason = self.disabled_reason(action)
            line = f"  {keys:<12} {b.description:<14} {b.id or ''}"
            if not active.enabled:
                body.append(line + f"   (disabled: {reason or 'not here'})\n", Style(dim=True))
            else:
                body.append(line + "\n")
        body.append(
            "\n  :            command mode: queues, jobs, nodes, topology, events, theme NAME, speed X, q\n"
            "               (Tab completes the command, again to cycle; :q and :quit quit)\n"
            "  /            filter the table (start with ! to invert); ! inverts the current filter\n"
            "  esc          back: close a dialog or the prompt, leave a queue's jobs, clear the filter,\n"
            "               zoom out, previous view\n"
            "  y, l         the selected job's pods as YAML, their logs (on a cluster, from the API)\n"
            "  ctrl+d       preempt the selected job (k9s's delete), as p\n"
            "  ctrl+p       command palette: views, every action by name (why one is unavailable), themes\n"
            f"\n  Remap keys in {default_keymap_path()} (binding-id: keys).\n"
        )
        if self.readonly:
            body.append("\n  Read-only: every action that changes the cluster is removed.\n", Style(bold=True))
        self.push_screen(TextScreen("Help", body))

    # -- replay controls -----------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.controller.paused = not self.controller.paused
        self.set_status("paused" if self.controller.paused else "resumed")
        self.redraw(force=True)

    def action_faster(self) -> None:
        self.controller.speed = min(86_400.0, (self.controller.speed or 60.0) * 2)
        self.set_status(f"speed ×{self.controller.speed:g}")

    def action_slower(self) -> None:
        self.controller.speed = max(1.0, (self.controller.speed or 60.0) / 2)
        self.set_status(f"speed ×{self.controller.speed:g}")

    # -- operator actions ----------------------------------------------------------------

    def post(self, cmd: Command) -> None:
        """Send ``cmd`` to the controller and report its result on the status line."""
        self.run_worker(self._post(cmd), group="commands")

    async def _post(self, cmd: Command) -> str | None:
        target = cmd.job or cmd.node or cmd.queue or ""
        try:
            result = await self.controller.post(cmd)
        except CommandError as exc:
            self.set_status(f"✗ {cmd.action} {target}: {exc}", "error")
            self.notify(str(exc), title=f"{cmd.action} failed", severity="error")
            return None
        if NOTHING_DONE in result:
            # a command that changed nothing (releasing a job that is not held) is no success
            self.set_status(f"• {cmd.action} {target}: {result}", "warning")
        else:
            self.set_status(f"✓ {cmd.action} {target}: {result}", "success")
        self.redraw(force=True)
        return result

    def _job_or_say(self) -> str | None:
        job = self.selected_job()
        if job is None:
            self.set_status("select a job first", "warning")
        return job

    def action_approve(self) -> None:
        if (job := self._job_or_say()) is not None:
            self.post(Command(Action.APPROVE, job=job))

    def action_hold(self) -> None:
        if (job := self._job_or_say()) is not None:
            self.post(Command(Action.HOLD, job=job))

    def action_release(self) -> None:
        if (job := self._job_or_say()) is not None:
            state = self.controller.state
            if job not in state.job_by_name or not state.job(job).held:
                self.set_status(f"{job} is not held; nothing to release", "warning")
                return
            self.post(Command(Action.RELEASE, job=job))

    def action_preempt(self) -> None:
        name = self._job_or_say()
        if name is None:
            return
        state = self.controller.state
        if name not in state.job_by_name or state.job(name).current_run is None:
            self.set_status(f"{name} is not running; nothing to preempt", "warning")
            return
        job = state.job(name)
        impact = preempt_impact(state, job, self.controller.now)
        body = Text()
        body.append(f"{name} ({job.queue}, priority {job.priority}) stops on every node, as one gang:\n", Style(bold=True))
        for spot in impact.pods[:16]:
            share = f" ({fmt.gpus(spot.share * MILLI)} of a GPU)" if spot.share else ""
            body.append(f"  {spot.pod:<28} {spot.node:<16} GPUs {','.join(map(str, spot.gpus))}{share}\n")
        if len(impact.pods) > 16:
            body.append(f"  … and {len(impact.pods) - 16} more pods\n")
        if impact.checkpoint_every:
            body.append(f"\nWork lost: {span(impact.work_lost)} since its last checkpoint (every {span(impact.checkpoint_every)}).\n")
        else:
            body.append(f"\nWork lost: {span(impact.work_lost)}: it has no checkpoints, so all of this run.\n", Style(bold=True))
        body.append("It goes back to its queue and restarts when admitted again.\n")
        if impact.likely_starters:
            body.append(f"Likely to start instead: {', '.join(impact.likely_starters[:10])}\n")
        else:
            body.append("Nothing waiting would start at once in the freed room.\n", Style(dim=True))
        self.push_screen(
            ConfirmDialog(f"Preempt {name}?", body, "Preempt"),
            lambda yes: self.post(Command(Action.PREEMPT, job=name)) if yes else self.set_status("preempt cancelled"),
        )

    def _node_or_say(self) -> str | None:
        node = self.selected_node()
        if node is None:
            self.set_status("select a node first", "warning")
        return node

    def _node_dialog(self, action: Action) -> None:
        name = self._node_or_say()
        if name is None:
            return
        state = self.controller.state
        node = state.node(name)
        jobs = drain_impact(state, name)
        body = Text()
        used = fmt.gpus(node_used_milli(node))
        body.append(f"{name}: {node.gpu_model} x{node.gpu_count}, {used} {'GPU' if used == '1' else 'GPUs'} in use, "
                    f"{'cordoned' if node.cordoned else 'schedulable'}{', failed' if node.failed else ''}\n\n")
        if action == Action.DRAIN:
            body.append("Drain cordons the node and evicts every pod on it. ", Style(bold=True))
            body.append("Each gang with a pod here stops everywhere and is requeued:\n")
            for j in jobs:
                body.append(f"  {j}\n")
            if not jobs:
                body.append("  (no jobs run here)\n", Style(dim=True))
        elif action == Action.CORDON:
            body.append("Cordon stops new pods landing here; running jobs keep running")
            body.append(f" ({', '.join(jobs)})" if jobs else "")
            body.append(".\n")
        else:
            body.append("Uncordon lets the scheduler place pods here again.\n")
        self.push_screen(
            ConfirmDialog(f"{str(action).capitalize()} {name}?", body, str(action).capitalize(), danger=action == Action.DRAIN),
            lambda yes: self.post(Command(action, node=name)) if yes else self.set_status(f"{action} cancelled"),
        )

    def action_cordon(self) -> None:
        self._node_dialog(Action.CORDON)

    def action_uncordon(self) -> None:
        self._node_dialog(Action.UNCORDON)

    def action_drain(self) -> None:
        self._node_dialog(Action.DRAIN)

    def action_edit_quota(self) -> None:
        name = self.selected_queue()
        if name is None:
            self.set_status("select a queue (not a cohort) first", "warning")
            return
        state = self.controller.state
        queue = state.queues[name]

        def preview(edit: QuotaEdit):
            return quota_preview(state, name, edit.nominal, edit.borrowing_limit, edit.lending_limit, self.controller.now)

        def apply(edit: QuotaEdit | None) -> None:
            if edit is None:
                self.set_status("quota edit cancelled")
                return
            changes: dict[str, dict[str, float | None]] = {}
            for attr, values in (("quota", edit.nominal), ("borrowing", edit.borrowing_limit), ("lending", edit.lending_limit)):
                current = getattr(queue, {"quota": "nominal", "borrowing": "borrowing_limit", "lending": "lending_limit"}[attr])
                diff = {
                    res: (None if v == INF else v)
                    for res, v, old in zip(("gpu", "cpu", "memory"), values, current)
                    if v != old
                }
                if diff:
                    changes[attr] = diff
            if not changes:
                self.set_status("quota unchanged")
                return
            self.post(
                Command(
                    Action.SET_QUOTA,
                    queue=name,
                    quota=changes.get("quota"),
                    borrowing_limit=changes.get("borrowing"),
                    lending_limit=changes.get("lending"),
                )
            )

        self.push_screen(QuotaDialog(queue, preview), apply)

    def action_details(self) -> None:
        if self.view == View.QUEUES and self.focused is self.query_one("#queue-table", RowTable):
            self.query_one("#queue-jobs", RowTable).focus()
            self._refresh_bar()
            return
        if self.view == View.EVENTS:
            self.show_event()
            return
        name = self.selected_job()
        if name is None:
            return
        self.push_screen(TextScreen(f"Job {name}", self.job_details(name)))

    def show_event(self) -> None:
        """Enter in the Events view: the selected event whole (at 80 columns its result is cut)."""
        table = self.query_one("#event-table", RowTable)
        key = table.current_key
        row = next((r for r in table.rows if r.key == key), None)
        if row is None:
            self.set_status("select an event first", "warning")
            return
        when, actor, action, target, result = row.cells
        body = Text()
        for label, value in (("time", when), ("actor", actor), ("action", action), ("target", target)):
            body.append(f"{label:<8}", Style(bold=True))
            body.append(f"{value}\n")
        body.append("result\n", Style(bold=True))
        body.append(result + "\n")
        self.push_screen(TextScreen(f"Event: {action} {target}".rstrip(), body))

    def action_pod_yaml(self) -> None:
        """``y``: the selected job's pods as YAML, from the API server (on a replay: the job)."""
        name = self._job_or_say()
        if name is None:
            return
        if Capability.PODS not in self.controller.capabilities:
            state = self.controller.state
            self.push_screen(TextScreen(f"YAML of job {name} (a replay: no pods)", yaml_text(replay_job_yaml(state, state.job(name)))))
            return
        self.set_status(f"reading the pods of {name} from the API server…")
        self.run_worker(self._show_pod_yaml(name), group="reads", exclusive=True)

    async def _show_pod_yaml(self, name: str) -> None:
        try:
            text = await self.controller.pod_yaml(name)
        except Exception as exc:  # noqa: BLE001 - an unanswered read is reported, never a crash
            self.set_status(f"✗ YAML of {name}: {exc}", "error")
            return
        self.set_status("")
        self.push_screen(TextScreen(f"YAML of the pods of {name}", yaml_text(text)))

    def action_pod_logs(self) -> None:
        """``l``: the last lines of the logs of the selected job's pods (none on a replay)."""
        name = self._job_or_say()
        if name is None:
            return
        if Capability.PODS not in self.controller.capabilities:
            self.set_status(NO_LOGS_ON_A_REPLAY, "warning")
            return
        self.set_status(f"reading the logs of {name} from the API server…")
        self.run_worker(self._show_pod_logs(name), group="reads", exclusive=True)

    async def _show_pod_logs(self, name: str) -> None:
        try:
            entries = await self.controller.pod_logs(name)
        except Exception as exc:  # noqa: BLE001 - an unanswered read is reported, never a crash
            self.set_status(f"✗ logs of {name}: {exc}", "error")
            return
        self.set_status("")
        pods = self.controller.pods_of_job(name)
        shown = len({title.split("/")[0] for title, _, _ in entries})
        self.push_screen(TextScreen(f"Logs of the pods of {name}", logs_text(entries, (shown, len(pods)))))

    def job_details(self, name: str) -> Text:
        """The detail page: why it waits (in words), its request, its runs and preemptions."""
        state = self.controller.state
        now = self.controller.now
        outside = self.model.outside_job(name)
        if outside is not None:  # kept out of the engine's queues: no engine job to tell of
            pods = self.controller.pods_of_job(name)
            return render_outside_job(outside, pods, state.audit, now)
        job = state.job(name)
        expl = self.model.explanations(now, fresh=True).get(job.id)
        t = Text()
        t.append(f"{job.name}", Style(bold=True))
        t.append(f"   queue {job.queue}   priority {job.priority}   state {job.state}\n")
        t.append(f"asks for     {asks_words(job)}\n")
        if job.estimate:
            t.append(f"estimate     {span(job.estimate)}")
            if job.checkpoint_every:
                t.append(f", checkpoints every {span(job.checkpoint_every)}")
            t.append("\n")
        t.append(f"submitted    {moment(job.submit)}, waited {span(max(0.0, now - job.submit) if job.current_run is None and job.state != JobState.FINISHED else 0.0) or '-'} so far\n")
        if expl is not None and expl.reason:
            t.append("\nWhy it waits\n", Style(bold=True, underline=True))
            t.append(f"  {expl.reason}: {expl.message}\n")
            if expl.queue_position:
                t.append(f"  position {expl.queue_position} in queue {job.queue}\n")
            if expl.estimated_start is not None:
                when = "now" if expl.estimated_start <= now else f"in {span(expl.estimated_start - now)} (at {moment(expl.estimated_start)})"
                t.append(f"  expected to start {when}\n")
            elif expl.reason:
                t.append("  no start time can be planned yet\n", Style(dim=True))
        pods = self.controller.pods_of_job(job.name)
        if pods:
            t.append("\nPods\n", Style(bold=True, underline=True))
            for pod, phase, node in pods[:24]:
                t.append(f"  {pod:<40} {phase:<12} {node or '-'}\n")
            if len(pods) > 24:
                t.append(f"  … {len(pods) - 24} more pods\n")
        t.append("\nRuns\n", Style(bold=True, underline=True))
        # a watching mirror may have made earlier jobs of this name (one per time its pods came
        # back): their runs are this job's history
        runs = [run for j in state.jobs if j.name == job.name for run in j.runs]
        if not runs:
            t.append("  none yet\n", Style(dim=True))
        for k, run in enumerate(runs, 1):
            end = "running" if run.end is None else f"{moment(run.end)} ({run.end_reason}{' by ' + run.by if run.by else ''})"
            t.append(f"  #{k}  {moment(run.start)} → {end}\n")
            for p in run.placements[:12]:
                share = f" ({fmt.gpus(p.share)} of a GPU)" if p.share else ""
                t.append(f"      {p.pod:<28} {state.nodes[p.node_id].name:<16} GPUs {','.join(map(str, p.gpus))}{share}\n")
            if len(run.placements) > 12:
                t.append(f"      … {len(run.placements) - 12} more pods\n")
        related = [e for e in state.audit if e.target == job.name or job.name in e.result]
        if related:
            t.append("\nEvents\n", Style(bold=True, underline=True))
            for e in related[-10:]:
                t.append(f"  {moment(e.time):>9}  {e.actor:<10} {e.action:<10} {e.result}\n")
        return t


def run_console(
    controller: ConsoleController,
    speed: float | None = 60.0,
    readonly: bool = False,
    theme: str = DEFAULT_THEME,
    keymap: Path | None = None,
) -> int:
    app = UsherApp(controller, speed=speed, readonly=readonly, theme=theme, keymap=keymap)
    app.run()
    return 0
