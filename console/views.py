"""What the console's views draw that is not a plain table: the overview page and the heatmap.

Both are pure functions of the view model (and the theme), rendered into rich Text, wrapped in
thin widgets that redraw only when what they would draw has changed.
"""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Static

from usher.engine import fmt
from usher.engine.channel import OutsideJob
from usher.engine.enums import JobState
from usher.engine.state import MILLI, AuditEntry

from .heatmap import HeatmapState, HeatMetric, children, render_heatmap, Scope
from .keys import BindingId
from .model import Overview, QueueRow, moment
from .themes import HeatmapPalette

EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(fraction: float, width: int) -> str:
    """An eighth-block bar (nvitop style) ``width`` cells wide."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, rest = divmod(eighths, 8)
    out = "█" * full + (EIGHTHS[rest] if rest else "")
    return out.ljust(width)


def level_style(fraction: float, palette: HeatmapPalette) -> Style:
    return Style(color=palette.at(fraction))


def render_overview(
    ov: Overview,
    queues: list[QueueRow],
    audit: list[AuditEntry],
    palette: HeatmapPalette,
    width: int,
    utilization: float | None,
    awaiting: list[str],
    telemetry_errors: dict[str, str],
    height: int = 0,
) -> Text:
    """The overview page, every line at most ``width`` cells (nothing wraps at 80 columns);
    given the ``height`` on screen, it lists as many recent events as fit (8 when not given)."""
    out = Text()
    frac = ov.gpus_allocated / ov.gpus_schedulable if ov.gpus_schedulable else 0.0
    allocated = f" {fmt.gpus(ov.gpus_allocated * MILLI)}/{ov.gpus_schedulable} ({frac:.0%})"
    unschedulable = f"  {fmt.plural(ov.gpus_total - ov.gpus_schedulable, 'GPU')} unschedulable" if ov.gpus_total != ov.gpus_schedulable else ""
    # the bars take what the label and the figures leave, the busy bar's figures included
    bw = max(10, min(60, width - 16 - max(len(allocated) + len(unschedulable), len(" 100% mean utilization"))))
    out.append("GPUs allocated  ", Style(bold=True))
    out.append(bar(frac, bw), level_style(frac, palette))
    out.append(allocated)
    if unschedulable:
        out.append(unschedulable, Style(dim=True))
    out.append("\n")
    out.append("GPUs busy       ", Style(bold=True))
    if utilization is None:
        out.append("N/A (no telemetry)".ljust(bw), Style(dim=True))
    else:
        out.append(bar(utilization, bw), level_style(utilization, palette))
        out.append(f" {utilization:.0%} mean utilization")
    out.append("\n")
    out.append(f"jobs            {ov.running} running, {ov.pending} pending, {ov.finished} finished\n")
    out.append(f"pods            {ov.pods_running} running, {ov.pods_pending} pending\n")
    nodes = f"nodes           {ov.nodes_cordoned} cordoned, {ov.nodes_failed} failed\n"
    out.append(nodes)
    for source, err in sorted(telemetry_errors.items()):
        out.append(_fit(f"telemetry       {source}: {err}", width) + "\n", Style(color=palette.failed))
    out.append("\nQueues\n", Style(bold=True, underline=True))
    borrows = max((len(f"  borrows {fmt.gpus(q.borrowed)}") for q in queues if q.borrowed), default=0)
    qw = max(6, min(40, width - 19 - 29 - borrows))
    for q in queues:
        if q.name.startswith("cohort "):
            out.append(f"{q.name}\n", Style(bold=True))
            continue
        share = q.usage / q.nominal if q.nominal not in (0, float("inf")) else 0.0
        out.append(f"  {q.name:<16.16} ")
        out.append(bar(min(share, 1.0), qw), level_style(min(share, 1.0), palette))
        used = f"{fmt.gpus(q.usage)}/{fmt.gpus(q.nominal)}"
        out.append(f" {used:>9} GPUs  {q.pending:>4} pending")
        if q.borrowed:
            out.append(f"  borrows {fmt.gpus(q.borrowed)}", Style(italic=True))
        out.append("\n")
    out.append("\nPending by reason\n", Style(bold=True, underline=True))
    if not ov.pods_by_reason:
        out.append("  nothing waits\n", Style(dim=True))
    jobs = dict(ov.by_reason)
    for reason, pods in ov.pods_by_reason:
        # jobs, then their pods (pods waiting beside a running job count as pods only)
        out.append(_fit(f"  {jobs.get(reason, 0):>5}  {reason:<28} {fmt.plural(pods, 'pod'):>10}", width) + "\n")
    if awaiting:
        out.append(_fit(f"  awaiting approval: {', '.join(awaiting[:8])}{' …' if len(awaiting) > 8 else ''}", width) + "\n", Style(italic=True))
    out.append("\nRecent events\n", Style(bold=True, underline=True))
    room = height - out.plain.count("\n") if height > 0 else 8
    tw = 24 if width >= 100 else 16
    for e in audit[-max(3, room):]:
        out.append(_fit(f"  {moment(e.time):>9}  {e.actor:<10.10} {e.action:<10.10} {e.target:<{tw}.{tw}} {e.result}", width) + "\n")
    return out


def render_outside_job(job: OutsideJob, pods: list[tuple[str, str, str | None]], audit: list[AuditEntry], now: float) -> Text:
    """The detail page of a job the controller answers for outside the engine's queues: why it
    waits, in usher's words with the fix (what its pods' ``PodScheduled`` condition says), its
    pods, and the Events about them."""
    t = Text()
    t.append(job.name, Style(bold=True))
    t.append(f"   queue {job.queue}   priority {job.priority}   state {job.state}\n")
    t.append(f"asks for     {fmt.plural(job.pods, 'pod')}, {fmt.gpus(job.gpu_milli)} GPUs in all\n")
    if job.state == JobState.FINISHED:
        t.append("\nIts pods ended before this console saw it run.\n", Style(dim=True))
    else:
        t.append(f"submitted    {moment(job.since)}, waited {fmt.duration(max(0.0, now - job.since))} so far\n")
        t.append("\nWhy it waits\n", Style(bold=True, underline=True))
        t.append(f"  {job.reason or '?'}: {job.message or 'not worked out yet'}\n")
        t.append("  not in a queue until this is resolved: no position, no planned start\n", Style(dim=True))
    if pods:
        t.append("\nPods\n", Style(bold=True, underline=True))
        for pod, phase, node in pods[:24]:
            t.append(f"  {pod:<40} {phase:<12} {node or '-'}\n")
        if len(pods) > 24:
            t.append(f"  … {len(pods) - 24} more pods\n")
    names = {pod for pod, _, _ in pods} | {job.name}
    related = [e for e in audit if e.target in names]
    if related:
        t.append("\nEvents\n", Style(bold=True, underline=True))
        for e in related[-10:]:
            t.append(f"  {moment(e.time):>9}  {e.actor:<10} {e.action:<10} {e.result}\n")
    return t


def _fit(line: str, width: int) -> str:
    """``line`` cut to ``width`` cells, an ellipsis marking the cut."""
    return line if cell_len(line) <= width else set_cell_size(line, max(1, width - 1)) + "…"


class TextPane(Static):
    """A Static that skips redraws when its text is unchanged."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._last: str | None = None

    def show(self, text: Text) -> None:
        key = text.markup if text.spans else text.plain
        if key != self._last:
            self._last = key
            self.update(text)


class HeatmapPane(Widget, can_focus=True):
    """The topology heatmap; arrows move between groups, enter zooms in, esc zooms out."""

    BINDINGS = [
        Binding("up,k,left,h", "move(-1)", "Prev", show=False),
        Binding("down,j,right,l", "move(1)", "Next", show=False),
        Binding("enter", "zoom_in", "Zoom in", id=str(BindingId.ZOOM_IN)),
        Binding("backspace", "zoom_out", "Zoom out", id=str(BindingId.ZOOM_OUT)),
        Binding("m", "metric", "Metric", id=str(BindingId.METRIC)),
    ]

    DEFAULT_CSS = "HeatmapPane { height: 1fr; text-wrap: nowrap; text-overflow: clip; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hm = HeatmapState()
        self._text = Text()
        self._inputs: tuple | None = None
        self._drawn_at: tuple | None = None

    def render(self) -> Text:
        # drawn for the size the pane has now, so a resize (or the first layout) redraws it
        size = (self.size.width, self.size.height)
        if self._inputs is not None and size != self._drawn_at and all(size):
            state, palette, telemetry, now = self._inputs
            self._text = render_heatmap(state, self.hm, palette, size[0], size[1], telemetry, now)
            self._drawn_at = size
        return self._text

    def _groups(self):
        return children(self.app.model.state, self.hm.scope)

    def action_move(self, delta: int) -> None:
        n = len(self._groups())
        if n:
            self.hm.scope.selected = (self.hm.scope.selected + delta) % n
            self.app.redraw(force=True)

    def action_zoom_in(self) -> None:
        groups = self._groups()
        if not groups:
            return
        did = groups[min(self.hm.scope.selected, len(groups) - 1)][0]
        self.hm.trail.append(Scope(self.hm.scope.level + 1, did, 0))
        self.app.redraw(force=True)

    def action_zoom_out(self) -> bool:
        if len(self.hm.trail) > 1:
            self.hm.trail.pop()
            self.app.redraw(force=True)
            return True
        return False

    def action_metric(self) -> None:
        metrics = list(HeatMetric)
        self.hm.metric = metrics[(metrics.index(self.hm.metric) + 1) % len(metrics)]
        self.app.redraw(force=True)

    def draw(self, state, palette, telemetry, now: float) -> None:
        self._inputs = (state, palette, telemetry, now)
        self._drawn_at = None
        self.refresh()
