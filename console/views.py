"""What the console's views draw that is not a plain table: the overview page and the heatmap.

Both are pure functions of the view model (and the theme), rendered into rich Text, wrapped in
thin widgets that redraw only when what they would draw has changed.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Static

from usher.engine.state import AuditEntry

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
) -> Text:
    out = Text()
    bw = max(10, min(50, width - 40))
    frac = ov.gpus_allocated / ov.gpus_schedulable if ov.gpus_schedulable else 0.0
    out.append("GPUs allocated  ", Style(bold=True))
    out.append(bar(frac, bw), level_style(frac, palette))
    out.append(f" {ov.gpus_allocated:g}/{ov.gpus_schedulable} ({frac:.0%})")
    if ov.gpus_total != ov.gpus_schedulable:
        out.append(f"  {ov.gpus_total - ov.gpus_schedulable} GPUs unschedulable", Style(dim=True))
    out.append("\n")
    out.append("GPUs busy       ", Style(bold=True))
    if utilization is None:
        out.append("N/A (no telemetry)".ljust(bw), Style(dim=True))
    else:
        out.append(bar(utilization, bw), level_style(utilization, palette))
        out.append(f" {utilization:.0%} mean utilization")
    out.append("\n")
    out.append(f"jobs            {ov.running} running, {ov.pending} pending, {ov.finished} finished\n")
    nodes = f"nodes           {ov.nodes_cordoned} cordoned, {ov.nodes_failed} failed\n"
    out.append(nodes)
    for source, err in sorted(telemetry_errors.items()):
        out.append(f"telemetry       {source}: {err}\n", Style(color=palette.failed))
    out.append("\nQueues\n", Style(bold=True, underline=True))
    qw = max(6, min(30, width - 68))
    for q in queues:
        if q.name.startswith("cohort "):
            out.append(f"{q.name}\n", Style(bold=True))
            continue
        share = q.usage / q.nominal if q.nominal not in (0, float("inf")) else 0.0
        out.append(f"  {q.name:<16.16} ")
        out.append(bar(min(share, 1.0), qw), level_style(min(share, 1.0), palette))
        used = f"{q.usage / 1000:g}/{'∞' if q.nominal == float('inf') else f'{q.nominal / 1000:g}'}"
        out.append(f" {used:>9} GPUs  {q.pending:>4} pending")
        if q.borrowed:
            out.append(f"  borrows {q.borrowed / 1000:g}", Style(italic=True))
        out.append("\n")
    out.append("\nPending by reason\n", Style(bold=True, underline=True))
    if not ov.by_reason:
        out.append("  nothing waits\n", Style(dim=True))
    for reason, n in ov.by_reason:
        out.append(f"  {n:>5}  {reason}\n")
    if awaiting:
        out.append(f"  awaiting approval: {', '.join(awaiting[:8])}{' …' if len(awaiting) > 8 else ''}\n", Style(italic=True))
    out.append("\nRecent events\n", Style(bold=True, underline=True))
    for e in audit[-8:]:
        out.append(f"  {moment(e.time):>9}  {e.actor:<10.10} {e.action:<10} {e.target:<24.24} {e.result}\n")
    return out


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

    DEFAULT_CSS = "HeatmapPane { height: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hm = HeatmapState()
        self._text = Text()

    def show(self, text: Text) -> None:
        if text.markup != self._text.markup:
            self._text = text
            self.refresh()

    def render(self) -> Text:
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
        self.show(render_heatmap(state, self.hm, palette, self.size.width or 80, self.size.height or 24, telemetry, now))
