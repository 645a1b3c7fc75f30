"""Writes the FGD comparison's results: a markdown table, an SVG plot, a section of results.md.

The plot is the paper's Figure 7 kind: GPU allocation ratio against arrived GPU demand (both in
% of the cluster's GPUs), one line per policy, the mean over seeds. It is plain SVG written
here (no plotting library). The section of ``docs/results.md`` sits between the markers
``<!-- fgd:begin -->`` and ``<!-- fgd:end -->`` so other sections of the file are left alone.
"""

from __future__ import annotations

from pathlib import Path

from .runner import BASELINE, LEADER, Lead, PolicySummary, paired_lead

BEGIN, END = "<!-- fgd:begin -->", "<!-- fgd:end -->"
PAPER_ALLOC130 = {"random": 87.47, "dotprod": 90.85, "gpuclustering": 91.88, "gpupacking": 92.00,
                  "bestfit": 93.08, "fgd": 95.39}
"""The paper's means over seeds 42-51 on openb_pod_list_default at 130% arrived."""
COLOURS = {"random": "#9e9e9e", "dotprod": "#8d6e63", "gpuclustering": "#7e57c2", "gpupacking": "#26a69a",
           "bestfit": "#1e88e5", "fgd": "#fb8c00", "usher": "#d81b60"}


def table(summary: dict[str, PolicySummary], paper: bool) -> str:
    """Markdown: one row per policy, mean ± standard deviation over seeds."""
    head = "| policy | alloc @100% | alloc @130% | frag @90% |" + (" paper alloc @130% |" if paper else "")
    rule = "|---|---:|---:|---:|" + ("---:|" if paper else "")
    rows = [head, rule]
    for name, s in summary.items():
        row = (f"| {name} | {s.alloc100:.2f} ± {s.alloc100_sd:.2f} | {s.alloc130:.2f} ± {s.alloc130_sd:.2f} "
               f"| {s.frag90:.2f} ± {s.frag90_sd:.2f} |")
        if paper:
            row += f" {PAPER_ALLOC130[name]:.2f} |" if name in PAPER_ALLOC130 else " |"
        rows.append(row)
    return "\n".join(rows)


def lead_cell(lead: Lead) -> str:
    """``+0.12 ± 0.05``: the paired lead's mean and standard deviation over seeds."""
    return f"{lead.mean:+.2f} ± {lead.sd:.2f}"


def lead_line(summary: dict[str, PolicySummary]) -> str:
    """One line: usher's paired lead over fgd per metric and whether it beats the seed spread."""
    lead = paired_lead(summary)
    if lead is None:
        return ""
    parts = [f"{metric} {lead_cell(x)}{' (beyond the spread)' if x.clear else ''}" for metric, x in lead.items()]
    return (f"{LEADER} - {BASELINE}, paired over {next(iter(lead.values())).seeds} seeds (mean ± sd of the "
            f"per-seed difference, positive = {LEADER} better): " + "; ".join(parts))


def svg_plot(summary: dict[str, PolicySummary], title: str, x_from: int = 70) -> str:
    """Allocation ratio (y) against arrived demand (x), from ``x_from``% to 130%."""
    width, height, left, right, top, bottom = 640, 400, 60, 130, 40, 50
    values = [v for s in summary.values() for v in s.alloc_curve[x_from:] if v is not None]
    y_low = max(0, int(min(values)) // 5 * 5) if values else 0
    y_high = 100

    def px(x: float) -> float:
        return left + (x - x_from) / (130 - x_from) * (width - left - right)

    def py(y: float) -> float:
        return top + (y_high - y) / (y_high - y_low) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2 - right / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for x in range(x_from, 131, 10):
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{height - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" text-anchor="middle">{x}</text>')
    for y in range(y_low, y_high + 1, 5):
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{width - right}" y2="{py(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               'fill="none" stroke="#333"/>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">'
               'arrived GPU demand (% of cluster GPUs)</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + height - bottom) / 2})">GPU allocation ratio (%)</text>')
    for i, (name, s) in enumerate(summary.items()):
        colour = COLOURS.get(name, "#000")
        points = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in enumerate(s.alloc_curve)
                          if x >= x_from and v is not None)
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        ly = top + 14 + 18 * i
        out.append(f'<line x1="{width - right + 10}" y1="{ly - 4}" x2="{width - right + 30}" y2="{ly - 4}" '
                   f'stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{width - right + 36}" y="{ly}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_section(results_md: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``section`` between the markers (the fgd ones unless given) of ``results_md``,
    appended with them if they are absent."""
    block = f"{begin}\n{section.rstrip()}\n{end}"
    text = results_md.read_text() if results_md.exists() else "# Results\n"
    if begin in text and end in text and text.index(begin) < text.index(end):
        start, stop = text.index(begin), text.index(end) + len(end)
        text = text[:start] + block + text[stop:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    results_md.write_text(text)
