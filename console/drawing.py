"""The refresh loop and the views' tables and panes: what is drawn, and when.

The app redraws every ``REFRESH`` seconds (``app.py`` sets the timer), and only the view on
screen, and only when something it shows changed: the state's version, the clock to the second,
the telemetry, the filter, the sort, the theme or the room (:meth:`Drawing.redraw` keeps a key
per view). Why jobs wait is worked out at most every ``ConsoleModel.min_interval`` wall seconds,
so a view drawn from reasons older than the state keeps no key: it is drawn again on every tick
until they are current (else a replay that stops, paused or finished, would leave jobs "just
arrived" on screen for good, nothing in the key changing any more). Each view has one ``_draw_<view>`` method that fills its widgets from the cached view
model (``model.ConsoleModel``); rows of unchanged jobs are reused. How each table folds as the
terminal narrows, how the Jobs view sorts and which rows are tinted live here too, beside the
code that draws them; what is selected in a table is read here (``selected_job`` and the like).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.css.query import NoMatches
from rich.text import Text
from textual.widgets import Label, Static

from usher.engine import fmt
from usher.engine.contract import ConsoleController
from usher.engine.enums import JobState

from .catalog import View
from .model import ConsoleModel, JobRow, RunState, moment, state_version
from .table import Row, RowTable
from .views import HeatmapPane, TextPane, render_overview

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


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
#: jobs-view columns whose sort key puts the largest first (the others sort a to z)
DESCENDING = frozenset({3, 4, 5, 6})


class Drawing(_Base):
    """Redraw the header and the view on screen when what they show changed."""

    controller: ConsoleController
    model: ConsoleModel
    view: View
    filters: dict[View, str]
    job_sort: tuple[int, bool] | None
    theme_name: str
    _drawn: dict[View, tuple]
    _bar: Text | None
    _job_rows: dict[str, tuple[JobRow, Row]]

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
        stale_reads = self.model.stale_reads
        getattr(self, f"_draw_{self.view}")(now)
        if self.model.stale_reads == stale_reads:
            self._drawn[self.view] = key
        else:
            # drawn from reasons older than the state (renewing them waits for the model's
            # interval): not kept as drawn, so the ticks draw it again until they are current,
            # even when the replay stands still and nothing in the key changes any more
            self._drawn.pop(self.view, None)

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
