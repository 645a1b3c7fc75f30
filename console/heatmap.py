"""The topology heatmap: blocks, racks, nodes and GPUs laid out by the cluster's topology levels.

``render_heatmap`` draws one *scope* (the whole cluster, or a domain the operator zoomed into) as
rich Text, each GPU a cell coloured by the chosen metric on the theme's scale:

- when every GPU of the scope fits the area, each node is a block of GPU cells with its NVLink
  islands separated by a gap (``gpu-03 ██ ██ ██ ██  ██ ██ ██ ██  6/8``), nodes in as many
  columns as the width holds;
- when they do not (1,000 nodes in a 200x50 terminal), each node becomes one cell holding the
  mean of its GPUs, nodes grouped by the next topology level, the groups in columns; ``enter``
  zooms into a group;
- a single node shows each GPU with its figures and, where telemetry has them, a braille history.

Cells grow with the room (``CELL_SIZES``, from 1x1 up to 8 cells wide and 4 lines tall): the
largest size at which the whole scope fits is drawn, so 16 nodes fill a 200x60 terminal and 64
nodes still fill most of a 160x48 one instead of sitting in two lines at the top.

Cordoned nodes are hatched (``▒``), failed nodes crossed (``✗``), and a GPU whose telemetry is
stale is dotted (``·``) instead of being painted as idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from rich.style import Style
from rich.text import Text

from usher.engine import fmt
from usher.engine.state import MILLI, ClusterState, Node
from usher.engine.telemetry import Metric, TelemetryStore

from .themes import HeatmapPalette

FULL, CORDONED, FAILED, STALE = "█", "▒", "✗", "·"
BRAILLE_LEVELS = " ⣀⣤⣶⣿"


class HeatMetric(StrEnum):
    ALLOCATION = "allocation"
    UTILIZATION = "utilization"
    MEMORY = "memory"


@dataclass(slots=True)
class Scope:
    """Where the heatmap is zoomed: a topology level and a domain at it (level -1: the cluster)."""

    level: int = -1
    domain: int = -1
    selected: int = 0


@dataclass(slots=True)
class HeatmapState:
    metric: HeatMetric = HeatMetric.ALLOCATION
    trail: list[Scope] = field(default_factory=lambda: [Scope()])

    @property
    def scope(self) -> Scope:
        return self.trail[-1]


def gpu_value(state: ClusterState, node: Node, gpu: int, metric: HeatMetric, telemetry: TelemetryStore | None, now: float) -> float | None:
    """0..1 for the metric, None when unknown (no telemetry, or stale)."""
    if metric == HeatMetric.ALLOCATION:
        return (MILLI - node.gpu_free[gpu]) / MILLI
    if telemetry is None:
        return None
    return telemetry.value(node.name, gpu, Metric(str(metric)), now)


def node_value(state: ClusterState, node: Node, metric: HeatMetric, telemetry, now: float) -> float | None:
    values = [gpu_value(state, node, i, metric, telemetry, now) for i in range(node.gpu_count)]
    known = [v for v in values if v is not None]
    if not known:
        return None
    return sum(known) / len(known)


def children(state: ClusterState, scope: Scope) -> list[tuple[int, str, list[int]]]:
    """The groups one level below ``scope``: (domain id, name, node ids)."""
    level = scope.level + 1
    if level >= len(state.levels):
        return []
    return [
        (did, d.name, d.node_ids)
        for did, d in enumerate(state.domains[level])
        if scope.level < 0 or d.parent == scope.domain
    ]


def scope_nodes(state: ClusterState, scope: Scope) -> list[int]:
    if scope.level < 0:
        return [n.id for n in state.nodes]
    return list(state.domains[scope.level][scope.domain].node_ids)


def scope_title(state: ClusterState, hm: HeatmapState) -> str:
    parts = ["cluster"]
    for s in hm.trail[1:]:
        parts.append(f"{state.levels[s.level].rsplit('/', 1)[-1]} {state.domains[s.level][s.domain].name}")
    return " › ".join(parts)


def _cell(node: Node, value: float | None, palette: HeatmapPalette) -> tuple[str, Style]:
    if node.failed:
        return FAILED, Style(color=palette.failed)
    if value is None:
        return STALE, Style(color=palette.stale)
    colour = palette.at(value) if value > 0 else palette.empty
    return (CORDONED if node.cordoned else FULL), Style(color=colour)


def sparkline(values: list[float | None], width: int) -> str:
    """Braille history, newest on the right; gaps where a sample is missing."""
    values = values[-width:]
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(BRAILLE_LEVELS[min(len(BRAILLE_LEVELS) - 1, round(v * (len(BRAILLE_LEVELS) - 1)))])
    return "".join(out).rjust(width)


#: the cell sizes the heatmap tries, largest first: (cells wide, lines tall) for one GPU in the
#: GPU view, one node in the aggregate view. A cell wider than 2 keeps its last column blank and
#: a cell taller than 1 ends in a half-height row, so that neighbouring cells stay apart.
CELL_SIZES = ((8, 4), (6, 3), (4, 2), (3, 1), (2, 1), (1, 1))
#: blank cells between two columns of nodes
COLUMN_GAP = 3


def _cell_rows(ch: str, wide: int, tall: int) -> list[str]:
    """One cell drawn with ``ch``: ``tall`` strings of ``wide`` cells."""
    full = ch * (wide - 1) + " " if wide > 2 else ch * wide
    if tall == 1:
        return [full]
    bottom = ("▀" if ch == FULL else " ") * (wide - 1 if wide > 2 else wide)
    return [full] * (tall - 1) + [bottom.ljust(wide)]


def _gpu_order(node: Node) -> list[list[int]]:
    """The node's GPUs as its NVLink islands, then any GPU in none of them."""
    islands = [list(island) for island in node.islands] or [list(range(node.gpu_count))]
    seen = {g for island in islands for g in island}
    rest = [g for g in range(node.gpu_count) if g not in seen]
    return islands + ([rest] if rest else [])


def _node_figures(node: Node) -> str:
    used = fmt.gpus(node.gpu_count * MILLI - sum(node.gpu_free))
    status = " failed" if node.failed else (" cordoned" if node.cordoned else "")
    return f"  {used}/{node.gpu_count}{status}"


def _cells_width(node: Node, wide: int) -> int:
    order = _gpu_order(node)
    return sum(len(island) for island in order) * wide + len(order) - 1


def _node_block(state, node: Node, hm: HeatmapState, palette, telemetry, now: float, name_width: int, size: tuple[int, int]) -> list[Text]:
    """A node as ``size[1]`` lines: its name, a cell per GPU (islands apart), its figures."""
    wide, tall = size
    order = _gpu_order(node)
    cells = {g: _cell(node, gpu_value(state, node, g, hm.metric, telemetry, now), palette) for island in order for g in island}
    rows = {g: _cell_rows(ch, wide, tall) for g, (ch, _) in cells.items()}
    lines = []
    for r in range(tall):
        line = Text(node.name.ljust(name_width)[:name_width] + " " if r == 0 else " " * (name_width + 1))
        for k, island in enumerate(order):
            if k:
                line.append(" ")
            for g in island:
                line.append(rows[g][r], cells[g][1])
        if r == 0:
            line.append(_node_figures(node), Style(dim=True))
        lines.append(line)
    return lines


def _single_node(state, node: Node, hm: HeatmapState, palette, telemetry, now: float, width: int) -> list[Text]:
    lines = [Text(f"{node.name}  {node.gpu_model} x{node.gpu_count}  islands {node.islands or 'none'}", Style(bold=True))]
    island_of = {g: k for k, isl in enumerate(node.islands) for g in isl}

    for g in range(node.gpu_count):
        alloc = (MILLI - node.gpu_free[g]) / MILLI
        line = Text(f"GPU {g:<2} nvl{island_of.get(g, '-')!s:<2} ")
        ch, style = _cell(node, gpu_value(state, node, g, hm.metric, telemetry, now), palette)
        line.append(ch * 2, style)
        line.append(f" alloc {alloc:4.0%}")
        sample = telemetry.latest(node.name, g) if telemetry is not None else None
        stale = telemetry is None or telemetry.is_stale(node.name, g, now)
        if sample is None or stale:
            line.append("  util   N/A  mem   N/A" + ("  (stale)" if sample is not None else ""), Style(dim=True))
        else:
            util = "N/A" if sample.utilization is None else f"{sample.utilization:3.0f}%"
            mem = telemetry.value(node.name, g, Metric.MEMORY, now)
            line.append(f"  util {util:>5}  mem {'N/A' if mem is None else f'{mem:4.0%}':>5}")
            if sample.temperature is not None:
                line.append(f"  {sample.temperature:.0f}°C")
        if telemetry is not None:
            hist = telemetry.history(node.name, g, Metric.UTILIZATION)
            if hist:
                line.append("  ")
                line.append(sparkline(hist, max(0, min(30, width - len(line.plain) - 2))), Style(color=palette.at(0.6)))
        lines.append(line)
    who = sorted(state.jobs[j].name for j in node.jobs)
    lines.append(Text(f"jobs here: {', '.join(who) if who else 'none'}", Style(dim=True)))
    kept = sorted(state.jobs[r.job_id].name for r in state.kept_rooms.values() if any(p.node_id == node.id for p in r.placements))
    if kept:  # allocated above, yet no job of theirs runs here: say whose the GPUs are
        lines.append(Text(f"room kept for moved jobs (until their pods come back): {', '.join(kept)}", Style(dim=True)))
    return lines


def render_heatmap(
    state: ClusterState, hm: HeatmapState, palette: HeatmapPalette, width: int, height: int, telemetry=None, now: float = 0.0
) -> Text:
    """The current scope as lines of coloured cells, fitted into ``width`` x ``height``.

    The GPU view is tried with the largest cells first (``CELL_SIZES``), its nodes in as many
    columns as the width holds; the first size at which every node fits is drawn, so a large
    terminal gets large cells and a small one still sees every GPU when it can. When no size
    fits, each node becomes one cell (``_aggregate``), again as large as the room allows.
    """
    scope = hm.scope
    lines: list[Text] = [Text(f"{scope_title(state, hm)}   metric: {hm.metric}", Style(bold=True))]
    body = height - 3
    node_ids = scope_nodes(state, scope)
    groups = children(state, scope)
    if scope.level == len(state.levels) - 1 and len(node_ids) == 1:
        lines += _single_node(state, state.nodes[node_ids[0]], hm, palette, telemetry, now, width)
    else:
        detail = _detail(state, hm, palette, telemetry, now, node_ids, groups, width, body)
        lines += detail if detail is not None else _aggregate(state, hm, palette, telemetry, now, groups, width, body)
    lines.append(_legend(hm, palette, width))
    out = Text("\n").join(lines[: max(2, height)])
    out.no_wrap = True
    return out


def _detail(state, hm, palette, telemetry, now, node_ids, groups, width, body) -> list[Text] | None:
    """Every GPU a cell, each node a block of lines, in columns; None when nothing fits."""
    if not node_ids:
        return None
    nodes = [state.nodes[n] for n in node_ids]
    name_width = min(16, max(len(n.name) for n in nodes))
    figures = max(len(_node_figures(n)) for n in nodes)
    selected = hm.scope.selected
    # group headers when the next level groups several nodes; else the selection is a node
    leaf_groups = bool(groups) and len(groups) < len(node_ids)
    group_of: dict[int, int] = {}
    if leaf_groups:
        entries: list[tuple[str, int]] = []
        for k, (_, _, nids) in enumerate(groups):
            entries.append(("head", k))
            entries += [("node", n) for n in nids]
            group_of.update((n, k) for n in nids)
    else:
        entries = [("node", n) for n in node_ids]
    for size in CELL_SIZES:
        wide, tall = size
        block = name_width + 1 + max(_cells_width(n, wide) for n in nodes) + figures
        if block > width:
            continue
        most = max(1, (width + COLUMN_GAP) // (block + COLUMN_GAP))
        columns = _columns(entries, [1 if kind == "head" else tall for kind, _ in entries], group_of, body, most)
        if columns is not None:
            break
    else:
        return None
    drawn: list[list[Text]] = []
    index = {did: k for k, (did, _, _) in enumerate(groups)}
    host_level = hm.scope.level + 1
    for column in columns:
        out: list[Text] = []
        for kind, item in column:
            if kind == "node":
                node = state.nodes[item]
                block_lines = _node_block(state, node, hm, palette, telemetry, now, name_width, size)
                if not leaf_groups and groups and index.get(node.domains[host_level], -1) == selected:
                    block_lines[0].stylize(Style(reverse=True), 0, name_width)
                out += block_lines
            else:
                name = groups[item][1] + (" (continued)" if kind == "more" else "")
                marker = "▶ " if item == selected else "  "
                out.append(Text(f"{marker}{name}", Style(bold=True, reverse=item == selected)))
        drawn.append(out)
    return _side_by_side(drawn)


def _columns(entries, heights: list[int], group_of: dict[int, int], height: int, most: int) -> list[list[tuple[str, int]]] | None:
    """``entries`` (``heights[i]`` lines each) in at most ``most`` columns of at most ``height``
    lines, balanced; a column that starts inside a group repeats its header (a "more" entry).
    None when they do not fit."""

    def pack(cap: int) -> list[list[tuple[str, int]]] | None:
        columns: list[list[tuple[str, int]]] = [[]]
        used = 0
        for (kind, item), h in zip(entries, heights):
            if used + h > cap and columns[-1]:
                columns.append([])
                used = 0
                if kind == "node" and item in group_of:
                    columns[-1].append(("more", group_of[item]))
                    used = 1
            if used + h > cap:
                return None
            columns[-1].append((kind, item))
            used += h
        return columns

    fewest = pack(height)
    if fewest is None or len(fewest) > most:
        return None
    for cap in range(max(1, -(-sum(heights) // len(fewest))), height + 1):
        balanced = pack(cap)
        if balanced is not None and len(balanced) <= len(fewest):
            return balanced
    return fewest


def _side_by_side(drawn: list[list[Text]]) -> list[Text]:
    """Columns of lines as one list of lines, each column padded to the widest line in it."""
    if len(drawn) == 1:
        return drawn[0]
    widths = [max((line.cell_len for line in out), default=0) for out in drawn]
    lines = []
    for r in range(max(len(out) for out in drawn)):
        line = Text()
        for c, out in enumerate(drawn):
            piece = out[r].copy() if r < len(out) else Text()
            if c < len(drawn) - 1:
                piece.truncate(widths[c], pad=True)
                piece.append(" " * COLUMN_GAP)
            line.append_text(piece)
        lines.append(line)
    return lines


def _aggregate(state, hm, palette, telemetry, now, groups, width, body) -> list[Text]:
    """Each node one cell (the mean of its GPUs), nodes by group: the largest cells at which
    every group fits, groups in as few columns as that takes; else one bar per group."""
    if not groups:
        return [Text("(nothing at this level)")]
    label_width = min(18, max(len(name) for _, name, _ in groups))
    selected = hm.scope.selected
    figures = {}
    for k, (_, name, nids) in enumerate(groups):
        used = fmt.gpus(sum(state.nodes[n].gpu_count * MILLI - sum(state.nodes[n].gpu_free) for n in nids))
        figures[k] = f" {used}/{sum(state.nodes[n].gpu_count for n in nids)}"
    fixed = label_width + 3 + max(len(f) for f in figures.values())
    largest = max(len(nids) for _, _, nids in groups)
    entries = [("group", k) for k in range(len(groups))]
    for wide, tall in CELL_SIZES:
        for count in range(1, len(groups) + 1):
            column = (width - (count - 1) * COLUMN_GAP) // count
            per_line = min(largest, (column - fixed) // wide)
            if per_line < min(8, largest):
                break
            heights = [max(1, -(-len(nids) // per_line)) * tall for _, _, nids in groups]
            columns = _columns(entries, heights, {}, body, count)
            if columns is not None:
                return _side_by_side([
                    [line for _, k in col for line in _group_block(state, hm, palette, telemetry, now, groups[k], k == selected,
                                                                   label_width, figures[k], per_line, (wide, tall))]
                    for col in columns
                ])
    # too many groups even so: one line per group, the nodes averaged into a bar, as many
    # groups as there are lines, scrolled so that the selected one is among them
    suffix = max(len(f" 100% of {fmt.plural(len(nids), 'node')}") for _, _, nids in groups)
    per_line = max(8, width - label_width - 3 - suffix)
    lines = []
    first = max(0, min(selected - body + 1, len(groups) - body))
    for k, (_, name, nids) in enumerate(groups[first : first + body], first):
        nodes = [state.nodes[n] for n in nids]
        values = [v for v in (node_value(state, n, hm.metric, telemetry, now) for n in nodes) if v is not None]
        mean = sum(values) / len(values) if values else None
        bar = int(round((mean or 0) * per_line))
        line = Text(("▶ " if k == selected else "  ") + name.ljust(label_width)[:label_width] + " ", Style(reverse=k == selected))
        line.append(FULL * bar, Style(color=palette.at(mean or 0)))
        line.append(f" {0 if mean is None else mean:.0%} of {fmt.plural(len(nodes), 'node')}", Style(dim=True))
        lines.append(line)
    return lines


def _group_block(state, hm, palette, telemetry, now, group, selected: bool, label_width: int, figures: str, per_line: int, size) -> list[Text]:
    """A group of the aggregate view: its name, its nodes' cells ``per_line`` a line, its figures."""
    wide, tall = size
    _, name, nids = group
    head = Text(("▶ " if selected else "  ") + name.ljust(label_width)[:label_width] + " ", Style(reverse=selected))
    lines = []
    rows = max(1, -(-len(nids) // per_line))
    per_line = max(1, -(-len(nids) // rows))  # the same number of nodes on each line
    for c, start in enumerate(range(0, max(1, len(nids)), per_line)):
        cells = [_cell(state.nodes[n], node_value(state, state.nodes[n], hm.metric, telemetry, now), palette) for n in nids[start : start + per_line]]
        for r in range(tall):
            line = head.copy() if c == 0 and r == 0 else Text(" " * (label_width + 3))
            for ch, style in cells:
                line.append(_cell_rows(ch, wide, tall)[r], style)
            if c == 0 and r == 0:
                line.append(" " * ((per_line - len(cells)) * wide) + figures, Style(dim=True))
            lines.append(line)
    return lines


def _legend(hm: HeatmapState, palette: HeatmapPalette, width: int = 200) -> Text:
    """The colour scale and the marks, as much of it as ``width`` holds (the keys go first)."""
    t = Text("0% ")
    for i in range(10):
        t.append(FULL, Style(color=palette.at(i / 9)))
    t.append(" 100%")
    for mark, style, label in (
        (CORDONED, Style(color=palette.at(0.5)), "cordoned"),
        (FAILED, Style(color=palette.failed), "failed"),
        (STALE, Style(color=palette.stale), "no data"),
    ):
        if t.cell_len + 4 + len(label) > width:
            return t
        t.append("   " if mark == CORDONED else "  ")
        t.append(mark, style)
        t.append(f" {label}")
    hint = "   enter zoom · esc out · m metric"
    if t.cell_len + len(hint) <= width:
        t.append(hint)
    return t
