"""The operator console: one Textual app over a controller's state and its command queue.

The console is a client of the controller, the same for a replay and a cluster, through the
contract both declare (``usher.engine.contract.ConsoleController``: the members each has, and
``Capability`` flags for what only one can do, such as a replay's speed or a cluster's pods): the
controller runs in the app's event loop, the app reads its state through a cached view model
(``model.ConsoleModel``) and sends operator commands with ``controller.post``, awaiting each
result. It redraws twice a second, and only the view on screen, and only when the state, the
clock or the telemetry changed, or what it drew was older than the state (``drawing``).

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

The app itself is the shell: the bindings, the widgets, starting the controller and the timers.
Its behaviour is composed from one class per concern, each in its own module: ``catalog``
(views, actions and when each is available), ``header`` (the header bar and the status line),
``drawing`` (the refresh loop, the tables and panes), ``navigation`` (views, the prompt, the
filter, pastes, sort, themes, help), ``operations`` (the operator's actions and their dialogs)
and ``pages`` (a job's or an event's page, pods' YAML and logs). They are mixins of
:class:`UsherApp` rather than objects it holds because Textual finds actions (``action_*``) and
message handlers (``on_*``) on the app, and the tests and the palette read the app's state.

On a cluster the header says ``live`` while every informer is in touch with the API server;
when contact is lost it says ``reconnecting (12s)``, then, past ``connection.STALE_AFTER``,
``stale since 14:02:07``, and the views are dimmed: what they show is as of that moment. The
informers reconnect (resuming, or listing again) by themselves, and the header goes back to
``live`` once they have.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Input, Label, Static

from usher.engine import fmt
from usher.engine.contract import ConsoleController, require
from usher.engine.enums import Action, Capability

from .catalog import Availability, View
from .config_errors import ConfigErrors
from .drawing import EVENT_FOLD, JOB_FOLD, NODE_FOLD, QUEUE_FOLD, Drawing
from .footer import UsherFooter
from .header import Header
from .keygate import GATED, KeyGate
from .keys import BindingId, default_keymap_path, load_keymap
from .model import JOB_COLUMNS, NODE_COLUMNS, QUEUE_COLUMNS, ConsoleModel, JobRow
from .navigation import Navigation
from .operations import Operations
from .pages import Pages
from .palette import UsherCommands
from .prompt import CommandPrompt
from .table import Row, RowTable
from .themes import DEFAULT_THEME, UsherTheme, load_themes, user_theme_dir
from .views import HeatmapPane, TextPane

__all__ = ["UsherApp", "View", "run_console"]

#: seconds between redraw checks; a redraw happens only when something changed
REFRESH = 0.5
#: seconds before a cluster controller that failed is started again (doubling up to 30 s)
CONTROLLER_RESTART = 1.0


class UsherApp(Availability, Header, Drawing, Navigation, Operations, Pages, App[int]):
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
            outside=lambda: self.snapshot().outside, clock=clock,
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
        #: wall seconds (the model's throttle on working out why jobs wait reads it; tests move it)
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

    def get_system_commands(self, screen):
        """None: the palette offers the console's own views, actions and themes only."""
        return iter(())

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """Run an action; one of the app's that worked and said nothing takes an earlier error
        off the status line (a view change does too, in ``switch_to``)."""
        before = self.status_text
        handled = await super().run_action(action, default_namespace, namespaces)
        if handled and default_namespace in (None, self) and self.status_text is before:
            self.clear_error()
        return handled


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
