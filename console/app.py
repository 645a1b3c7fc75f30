"""The console's first screen: a live summary of a replay, until the full console lands.

It is already a client of the controller the way the full console will be: the controller runs
in the app's event loop (``Controller.run``), the app subscribes to its snapshots and redraws at
most a few times a second. Keys: ``q`` quits, ``space`` pauses and resumes.
"""

from __future__ import annotations

from datetime import datetime, timezone

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Static

from usher.engine.controller import Controller, Snapshot
from usher.engine.scenario.quantity import format_duration

#: times after this are wall-clock seconds since the epoch (a cluster), not scenario seconds
EPOCH_TIMES = 1e9


def moment(t: float) -> str:
    """A scenario time as a duration from its start; a cluster's time as UTC wall time."""
    if t >= EPOCH_TIMES:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")
    return format_duration(t)


class UsherApp(App[int]):
    TITLE = "usher"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("space", "toggle_pause", "Pause/resume", id="pause"),
    ]

    def __init__(self, controller: Controller, speed: float | None = 60.0, readonly: bool = False) -> None:
        super().__init__()
        self.controller = controller
        self.speed = speed
        self.readonly = readonly
        self._latest: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="summary")
        yield Footer()

    def on_mount(self) -> None:
        badge = "  [READ-ONLY]" if self.readonly else ""
        self.sub_title = f"{self.controller.state.name}{badge}"
        self.controller.subscribe(self._on_snapshot)
        self._latest = self.controller.snapshot()
        self.set_interval(0.25, self._redraw)
        self._redraw()
        self.run_worker(self.controller.run(self.speed), exclusive=True, name="controller")

    def _on_snapshot(self, snap: Snapshot) -> None:
        self._latest = snap

    def _redraw(self) -> None:
        snap = self._latest
        if snap is None:
            return
        state = "paused" if self.controller.paused else ("finished" if self.controller.done else "running")
        lines = [
            f"time            {moment(snap.now)}   ({state})",
            f"GPUs allocated  {snap.gpus_allocated:g} / {snap.gpus_schedulable}",
            f"jobs            {snap.running} running, {snap.pending} pending, {snap.finished} finished",
            "",
            "recent events:",
        ]
        for e in snap.audit_tail[-8:]:
            lines.append(f"  {moment(e.time):>8}  {e.actor:<9} {e.action:<9} {e.target:<20} {e.result}")
        lines.append("")
        lines.append("The full operator console (queues, jobs, nodes, topology) is not built yet.")
        self.query_one("#summary", Static).update("\n".join(lines))

    def action_toggle_pause(self) -> None:
        self.controller.paused = not self.controller.paused
        self._redraw()


def run_console(controller: Controller, speed: float | None = 60.0, readonly: bool = False, theme: str = "dark") -> int:
    app = UsherApp(controller, speed=speed, readonly=readonly)
    app.run()
    return 0
