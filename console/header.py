"""The console's header bar and status line.

The header says where the operator is and how fresh what they see is: the cluster's name, the
controller's clock, the run state (a replay's pace, or on a cluster ``live``,
``reconnecting (12s)``, ``stale since 14:02:07``), the breadcrumbs of the view and its selection
(``queues › research › llm-pretrain``), the filter, and a ``READ-ONLY`` badge. The status line
under the views holds the last action's answer; an error there stays until the view changes or
the next action succeeds (:meth:`Header.clear_error`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual.css.query import NoMatches
from textual.widgets import Static

from usher.engine.channel import Connection, ConnectionState
from usher.engine.contract import ConsoleController

from .catalog import View
from .heatmap import scope_title
from .model import RunState, link_text, moment
from .table import RowTable
from .views import HeatmapPane

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class Header(_Base):
    """The header bar's text and the status line, drawn from the controller and the view."""

    controller: ConsoleController
    is_replay: bool
    live: bool
    readonly: bool
    view: View
    filters: dict[View, str]
    status_text: Text
    status_tone: str
    _bar: Text | None

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
