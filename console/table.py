"""A virtual table for the console's long lists (10,000 jobs): only the visible lines are drawn.

Textual's DataTable keeps a styled copy of every cell, so refreshing a 10,000-row job list costs
a cell update per changed value. Here the rows are plain tuples of strings; ``set_rows`` swaps
the list in (nothing happens when it is unchanged), keeps the cursor on the same row key, and
only the lines on screen are rendered, so a refresh costs the same at 100 rows or 100,000.

Columns fold to the width (80 columns over SSH): a table knows which of its columns matter most
(``keep``, most important first). When the terminal is too narrow for all of them, the least
important are left out, and the first ``essential`` ones stay even if that means cutting the
``shrink`` columns (a long job name) short with an ellipsis. Whatever is left out of the jobs
table is on the job's detail page.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

#: widest a column grows, so one long value cannot push the rest off screen
MAX_COLUMN = 48
#: narrowest a ``shrink`` column is cut to, to make room for an essential one
MIN_SHRUNK = 8


def fit_columns(
    widths: list[int], keep: tuple[int, ...], essential: int, shrink: frozenset[int], available: int
) -> tuple[list[int], list[int]]:
    """Which columns to show in ``available`` cells (each takes its width plus 2), and their widths.

    Columns are taken in ``keep`` order (indices, most important first) while they fit; the
    first ``essential`` are taken anyway, cutting the ``shrink`` columns (widest first, down to
    ``MIN_SHRUNK``) to make room. The shown indices come back in the table's own order.
    """
    widths = list(widths)
    shown: list[int] = []
    total = 0
    for k, i in enumerate(keep):
        need = widths[i] + 2
        if total + need > available:
            if k >= essential:
                break
            excess = total + need - available
            for j in sorted((j for j in [*shown, i] if j in shrink), key=lambda j: -widths[j]):
                cut = min(excess, max(0, widths[j] - MIN_SHRUNK))
                widths[j] -= cut
                excess -= cut
                if excess <= 0:
                    break
        shown.append(i)
        total = sum(widths[j] + 2 for j in shown)
    return sorted(shown), widths


@dataclass(slots=True, frozen=True)
class Row:
    key: str
    cells: tuple[str, ...]
    tone: str = ""
    """A semantic colour for the row: "", "dim", "warning", "error", "success"."""


class RowTable(ScrollView, can_focus=True):
    """Rows of text cells with a header, a cursor, and scrolling; see the module docstring."""

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "Top", show=False),
        Binding("end,G", "jump(-1)", "Bottom", show=False),
    ]

    DEFAULT_CSS = """
    RowTable { height: 1fr; }
    """

    cursor = reactive(0, always_update=True, repaint=True)

    class Highlighted(Message):
        def __init__(self, table: RowTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

    def __init__(
        self,
        columns: tuple[str, ...],
        *,
        id: str | None = None,
        keep: tuple[str, ...] | None = None,
        essential: int | None = None,
        shrink: tuple[str, ...] = (),
    ) -> None:
        """``keep``: column names, most important first (default: the table's order); the first
        ``essential`` (default: all) stay at any width; ``shrink`` columns may be cut for them."""
        super().__init__(id=id)
        self.columns = columns
        self.rows: list[Row] = []
        self.widths: list[int] = [len(c) for c in columns]
        self._index: dict[str, int] = {}
        #: the column the rows are sorted by and whether largest first; None: unsorted
        self.sorted_by: tuple[int, bool] | None = None
        self._measured = True
        order = [columns.index(c) for c in keep or columns if c in columns]
        self.keep = tuple(order) + tuple(i for i in range(len(columns)) if i not in order)
        self.essential = len(columns) if essential is None else essential
        self.shrink = frozenset(columns.index(c) for c in shrink if c in columns)
        #: the columns on screen (indices) and the width each is drawn at
        self.shown: list[int] = list(range(len(columns)))
        self.shown_widths: list[int] = list(self.widths)

    # -- data ----------------------------------------------------------------------------

    def set_rows(self, rows: list[Row]) -> bool:
        """Show ``rows``; the cursor stays on the same key. False when nothing changed."""
        if rows == self.rows and self._measured:
            return False
        self._measured = True
        current = self.current_key
        grown = len(rows) != len(self.rows)
        self.rows = rows
        self._index = {r.key: i for i, r in enumerate(rows)}
        widths = [len(c) for c in self.header()]
        for r in rows:
            for i, cell in enumerate(r.cells):
                if len(cell) > widths[i]:
                    widths[i] = min(MAX_COLUMN, len(cell))
        self.widths = widths
        self._fold()
        if current is not None and current in self._index:
            self.cursor = self._index[current]
        else:
            self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self.refresh(layout=grown)  # a table of height auto (the queues) follows its rows
        return True

    def _fold(self) -> None:
        """Choose the columns that fit the width; sets the virtual size to match."""
        available = self.size.width
        if available <= 0:
            self.shown, self.shown_widths = list(range(len(self.columns))), list(self.widths)
        else:
            self.shown, self.shown_widths = fit_columns(self.widths, self.keep, self.essential, self.shrink, available)
        width = sum(self.shown_widths[i] + 2 for i in self.shown)
        self.virtual_size = Size(width, len(self.rows) + 1)

    @property
    def hidden_columns(self) -> list[str]:
        """The columns folded away at this width."""
        return [c for i, c in enumerate(self.columns) if i not in self.shown]

    def on_resize(self) -> None:
        self._fold()
        self.refresh()

    def header(self) -> tuple[str, ...]:
        """The column titles, the sorted one marked ▲ (smallest first) or ▼ (largest first)."""
        if self.sorted_by is None:
            return self.columns
        col, descending = self.sorted_by
        return tuple(f"{c} {'▼' if descending else '▲'}" if i == col else c for i, c in enumerate(self.columns))

    def set_sort(self, column: int | None, descending: bool = False) -> None:
        """Mark ``column`` as the one the rows are sorted by (None: in their own order)."""
        mark = None if column is None else (column, descending)
        if mark != self.sorted_by:
            self.sorted_by = mark
            self._measured = False  # the next ``set_rows`` measures the header again

    @property
    def current_key(self) -> str | None:
        if 0 <= self.cursor < len(self.rows):
            return self.rows[self.cursor].key
        return None

    def select_key(self, key: str) -> None:
        if key in self._index:
            self.cursor = self._index[key]
            self._scroll_to_cursor()

    # -- keys ----------------------------------------------------------------------------

    def action_cursor(self, delta: int) -> None:
        self._move(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move(self.cursor + direction * max(1, self.size.height - 2))

    def action_jump(self, where: int) -> None:
        self._move(0 if where == 0 else len(self.rows) - 1)

    def _move(self, to: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(len(self.rows) - 1, to))
        self._scroll_to_cursor()
        self.post_message(self.Highlighted(self, self.current_key))

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = self.scroll_offset.y
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)

    # -- drawing -------------------------------------------------------------------------

    def _line(self, cells: tuple[str, ...], style: Style) -> list[Segment]:
        parts = []
        for i in self.shown:
            text, width = (cells[i] if i < len(cells) else ""), self.shown_widths[i]
            text = text if len(text) <= width else text[: width - 1] + "…"
            parts.append(" " + text.ljust(width) + " ")
        return [Segment("".join(parts), style)]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        if y == 0:
            header = Style(bold=True, color=self.app.current_theme.primary) if self.app else Style(bold=True)
            segments = self._line(self.header(), base + header)
        else:
            index = scroll_y + y - 1
            if index >= len(self.rows):
                return Strip.blank(width, base)
            row = self.rows[index]
            style = base + self._tone(row.tone)
            if index == self.cursor:
                style += Style(reverse=True) if not self.has_focus else Style(reverse=True, bold=True)
            segments = self._line(row.cells, style)
        strip = Strip(segments).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, base if y == 0 or scroll_y + y - 1 != self.cursor else style)

    def _tone(self, tone: str) -> Style:
        if not tone:
            return Style()
        if tone == "dim":
            return Style(dim=True)
        theme = self.app.current_theme
        colour = {"warning": theme.warning, "error": theme.error, "success": theme.success}.get(tone)
        return Style(color=colour) if colour else Style()

    def watch_cursor(self, old: int, new: int) -> None:
        if old != new:
            self.post_message(self.Highlighted(self, self.current_key))
