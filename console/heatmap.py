"""The topology heatmap: blocks, racks, nodes and GPUs laid out by the cluster's topology levels.

``render_heatmap`` draws one *scope* (the whole cluster, or a domain the operator zoomed into) as
rich Text, each GPU a cell coloured by the chosen metric on the theme's scale:

- when every GPU of the scope fits the area, each node is a line of GPU cells with its NVLink
  islands separated by a gap (``gpu-03 ████ ████  6/8``);
- when they do not (1,000 nodes in a 200x50 terminal), each node becomes one cell holding the
  mean of its GPUs, nodes grouped by the next topology level; ``enter`` zooms into a group;
- a single node shows each GPU with its figures and, where telemetry has them, a braille history.

Cordoned nodes are hatched (``▒``), failed nodes crossed (``✗``), and a GPU whose telemetry is
stale is dotted (``·``) instead of being painted as idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from rich.style import Style
from rich.text import Text

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


def _node_line(state, node: Node, hm: HeatmapState, palette, telemetry, now: float, name_width: int) -> Text:
    line = Text(node.name.ljust(name_width)[:name_width] + " ")
    islands = node.islands or [list(range(node.gpu_count))]
    seen: set[int] = set()
    for k, island in enumerate(islands):
        if k:
            line.append(" ")
        for g in island:
            seen.add(g)
            ch, style = _cell(node, gpu_value(state, node, g, hm.metric, telemetry, now), palette)
            line.append(ch, style)
    rest = [g for g in range(node.gpu_count) if g not in seen]
    if rest:
        line.append(" ")
        for g in rest:
            ch, style = _cell(node, gpu_value(state, node, g, hm.metric, telemetry, now), palette)
            line.append(ch, style)
    used = (node.gpu_count * MILLI - sum(node.gpu_free)) / MILLI
    status = " failed" if node.failed else (" cordoned" if node.cordoned else "")
    line.append(f"  {used:g}/{node.gpu_count}{status}", Style(dim=True))
    return line


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
    return lines


def render_heatmap(
    state: ClusterState, hm: HeatmapState, palette: HeatmapPalette, width: int, height: int, telemetry=None, now: float = 0.0
) -> Text:
    """The current scope as lines of coloured cells, fitted into ``width`` x ``height``."""
    scope = hm.scope
    lines: list[Text] = [Text(f"{scope_title(state, hm)}   metric: {hm.metric}", Style(bold=True))]
    body = height - 3
    node_ids = scope_nodes(state, scope)
    groups = children(state, scope)
    if scope.level == len(state.levels) - 1 and len(node_ids) == 1:
        lines += _single_node(state, state.nodes[node_ids[0]], hm, palette, telemetry, now, width)
    else:
        name_width = min(16, max((len(state.nodes[n].name) for n in node_ids), default=4))
        widest = max((name_width + 2 + n.gpu_count + len(n.islands) + 12 for n in (state.nodes[i] for i in node_ids)), default=0)
        # GPU detail when every node gets a line of its own, group headers included
        header_lines = len(groups) if groups and len(groups) < len(node_ids) else 0
        if len(node_ids) + header_lines <= body and widest <= width:
            lines += _detail(state, hm, palette, telemetry, now, node_ids, groups, name_width)
        else:
            lines += _aggregate(state, hm, palette, telemetry, now, groups, width, body)
    lines.append(_legend(hm, palette))
    out = Text("\n").join(lines[: max(2, height)])
    out.no_wrap = True
    return out


def _detail(state, hm, palette, telemetry, now, node_ids, groups, name_width) -> list[Text]:
    lines: list[Text] = []
    selected = hm.scope.selected
    leaf_groups = groups and len(groups) < len(node_ids)
    if leaf_groups:
        for k, (_, name, nids) in enumerate(groups):
            marker = "▶ " if k == selected else "  "
            lines.append(Text(f"{marker}{name}", Style(bold=True, reverse=k == selected)))
            lines += [_node_line(state, state.nodes[n], hm, palette, telemetry, now, name_width) for n in nids]
    else:
        index = {did: k for k, (did, _, _) in enumerate(groups)}
        host_level = hm.scope.level + 1
        for n in node_ids:
            node = state.nodes[n]
            k = index.get(node.domains[host_level], -1) if groups else -1
            line = _node_line(state, node, hm, palette, telemetry, now, name_width)
            if k == selected and groups:
                line.stylize(Style(reverse=True), 0, name_width)
            lines.append(line)
    return lines


def _aggregate(state, hm, palette, telemetry, now, groups, width, body) -> list[Text]:
    lines: list[Text] = []
    if not groups:
        return [Text("(nothing at this level)")]
    label_width = min(18, max(len(name) for _, name, _ in groups))
    per_line = max(8, width - label_width - 14)
    selected = hm.scope.selected
    for k, (_, name, nids) in enumerate(groups):
        used = sum(state.nodes[n].gpu_count * MILLI - sum(state.nodes[n].gpu_free) for n in nids) / MILLI
        total = sum(state.nodes[n].gpu_count for n in nids)
        head = Text(("▶ " if k == selected else "  ") + name.ljust(label_width)[:label_width] + " ", Style(reverse=k == selected))
        chunks = [nids[i : i + per_line] for i in range(0, len(nids), per_line)] or [[]]
        for c, chunk in enumerate(chunks):
            line = head.copy() if c == 0 else Text(" " * (label_width + 3))
            for n in chunk:
                node = state.nodes[n]
                ch, style = _cell(node, node_value(state, node, hm.metric, telemetry, now), palette)
                line.append(ch, style)
            if c == 0:
                line.append(f" {used:g}/{total}", Style(dim=True))
            lines.append(line)
    if len(lines) > body:
        # still too tall: one line per group, the nodes averaged into a bar
        lines = []
        for k, (_, name, nids) in enumerate(groups[: body]):
            nodes = [state.nodes[n] for n in nids]
            values = [v for v in (node_value(state, n, hm.metric, telemetry, now) for n in nodes) if v is not None]
            mean = sum(values) / len(values) if values else None
            bar = int(round((mean or 0) * per_line))
            line = Text(("▶ " if k == selected else "  ") + name.ljust(label_width)[:label_width] + " ", Style(reverse=k == selected))
            line.append(FULL * bar, Style(color=palette.at(mean or 0)))
            line.append(f" {0 if mean is None else mean:.0%} of {len(nodes)} nodes", Style(dim=True))
            lines.append(line)
    return lines


def _legend(hm: HeatmapState, palette: HeatmapPalette) -> Text:
    t = Text("0% ")
    for i in range(10):
        t.append(FULL, Style(color=palette.at(i / 9)))
    t.append(" 100%   ")
    t.append(CORDONED, Style(color=palette.at(0.5)))
    t.append(" cordoned  ")
    t.append(FAILED, Style(color=palette.failed))
    t.append(" failed  ")
    t.append(STALE, Style(color=palette.stale))
    t.append(" no data   enter zoom · esc out · m metric")
    return t
