"""The console's layout at the smallest terminal the README promises (80x24) and at large ones.

At 80x24 nothing that matters is cut off: Overview lines fit without wrapping, the Jobs table
keeps the name, state, reason, position and ETA (less important columns fold away), dialogs
keep their buttons on screen, and the footer shows the keys of the view without being cut. At
160x48 and up the topology heatmap grows to use the room.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import Button, Footer

from usher.cli import demo_path
from usher.console.app import UsherApp
from usher.console.table import RowTable
from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario

from demo_state import AT, demo_at


def demo_with_nodes(count: int, t: float = AT) -> Controller:
    """The demo on a cluster of ``count`` nodes (the demo has 16), replayed up to ``t``."""
    text = demo_path().read_text().replace("count: 16\n", f"count: {count}\n", 1)
    ctrl = Controller(parse_scenario(text, file=f"demo-{count}.yaml"))
    while (nt := ctrl.next_time()) is not None and nt <= t:
        ctrl.step()
    return ctrl


def table_line(table: RowTable, y: int) -> str:
    return "".join(segment.text for segment in table.render_line(y))


def on_screen(app: UsherApp, widget) -> bool:
    """Whether the whole of ``widget`` is drawn on the screen (not clipped, not scrolled away)."""
    screen = app.screen
    try:
        geometry = screen.find_widget(widget)
    except Exception:  # noqa: BLE001 - not in the compositor's map: not visible
        return False
    region = geometry.region
    return region.area > 0 and screen.region.contains_region(region) and geometry.clip.contains_region(region)


async def test_no_overview_line_wraps_at_80_columns() -> None:
    app = UsherApp(demo_at(), live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one("#overview-text")
        lines = pane.content.plain.split("\n")
        width = pane.content_size.width
        too_long = [line for line in lines if cell_len(line) > width]
        assert not too_long, f"lines wider than {width}: {too_long}"
        assert pane.outer_size.height == len(lines)  # one screen line per line of text
        assert "Recent events" in lines and lines[-2].strip(), "no room left for recent events"


async def test_jobs_table_at_80_columns_keeps_reason_position_and_eta() -> None:
    app = UsherApp(demo_at(2 * 3600 + 1800), live=False)  # pretrain-moe waits with a planned start
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#job-table", RowTable)
        header = table_line(table, 0).split()
        for column in ("job", "state", "reason", "pos", "ETA"):
            assert column in header, f"{column} not shown at 80 columns: {header}"
        assert table.max_scroll_x == 0, "the table is wider than the screen"
        waiting = app.model.explanations(app.controller.now, fresh=True)
        pending = next(r for r in table.rows if r.key == "pretrain-moe")
        line = table_line(table, 1 + table.rows.index(pending))
        job = app.controller.state.job("pretrain-moe")
        assert waiting[job.id].reason in line
        assert pending.cells[-1] and pending.cells[-1] in line  # its ETA
        # what folded away is still in the detail page
        details = app.job_details("pretrain-moe").plain
        assert "queue research" in details and "priority 1000" in details


async def test_jobs_table_shows_every_column_when_wide() -> None:
    app = UsherApp(demo_at(), live=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        header = table_line(app.query_one("#job-table", RowTable), 0).split()
        assert header == ["job", "state", "queue", "prio", "GPUs", "pods", "wait", "reason", "pos", "ETA"]


async def test_quota_form_buttons_are_reachable_at_80x24() -> None:
    app = UsherApp(demo_at(), live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        app.query_one("#queue-table", RowTable).select_key("research")
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        dialog = app.screen
        assert type(dialog).__name__ == "QuotaDialog"
        for button in dialog.query(Button):
            assert on_screen(app, button), f"{button.id} is off screen at 80x24"
        # the form itself scrolls: its last field can be brought into view
        last = dialog.query_one("#lending_limit-memory")
        last.focus()
        await pilot.pause()
        assert on_screen(app, last)


async def test_confirm_dialog_buttons_are_reachable_at_80x24() -> None:
    ctrl = demo_at()
    app = UsherApp(ctrl, live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        app.query_one("#job-table", RowTable).select_key("llm-pretrain")
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        assert type(app.screen).__name__ == "ConfirmDialog"
        for button in app.screen.query(Button):
            assert on_screen(app, button), f"{button.id} is off screen at 80x24"


async def test_footer_shows_the_view_keys_uncut_at_80_columns() -> None:
    app = UsherApp(demo_at(), live=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for view, needed in (
            ("3", {"details", "approve", "hold", "release", "preempt", "help"}),
            ("4", {"cordon", "uncordon", "drain", "help"}),
            ("2", {"edit_quota", "details", "help"}),
        ):
            await pilot.press(view)
            await pilot.pause()
            footer = app.query_one(Footer)
            keys = [k for k in footer.query("FooterKey") if k.display]
            shown = {k.action for k in keys}
            assert needed <= shown, f"view {view}: {needed - shown} not in the footer"
            for key in keys:
                assert on_screen(app, key), f"view {view}: footer key {key.action} is cut"


async def test_topology_of_64_nodes_fills_the_screen_at_160x48() -> None:
    app = UsherApp(demo_with_nodes(64), live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("5")
        await pilot.pause()
        heatmap = app.query_one("#heatmap")
        lines = [line for line in heatmap.render().plain.split("\n") if line.strip()]
        assert len(lines) >= 0.75 * heatmap.size.height, f"{len(lines)} lines used of {heatmap.size.height}"
        assert max(cell_len(line) for line in lines) <= heatmap.size.width
        # every node is on screen
        text = heatmap.render().plain
        assert all(f"gpu-{i:02d}" in text for i in range(1, 65))


async def test_topology_cells_grow_with_the_terminal() -> None:
    """16 nodes: small cells at 80x24, bigger ones at 200x60, the screen used either way."""
    used = {}
    for size in ((80, 24), (200, 60)):
        app = UsherApp(demo_at(), live=False)
        async with app.run_test(size=size) as pilot:
            await pilot.press("5")
            await pilot.pause()
            heatmap = app.query_one("#heatmap")
            lines = heatmap.render().plain.split("\n")
            assert max(cell_len(line) for line in lines) <= heatmap.size.width
            assert len(lines) <= heatmap.size.height
            used[size] = sum(line.count("█") + line.count("✗") + line.count("▒") for line in lines)
    assert used[(200, 60)] >= 4 * used[(80, 24)]


def cluster(nodes: int, rack: int = 8, block: int = 64) -> Controller:
    """An idle cluster of ``nodes`` 8-GPU nodes in racks and blocks (no jobs)."""
    text = f"""
name: wall
topology:
  levels: [usher/block, usher/rack, kubernetes.io/hostname]
nodeGroups:
  - prefix: n
    count: {nodes}
    layout: {{usher/rack: {rack}, usher/block: {block}}}
    template: {{gpus: 8, gpuModel: H100, nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]}}
queues:
  - {{name: q, quota: {{gpu: 8}}}}
"""
    return Controller(parse_scenario(text, file="wall.yaml"))


def test_the_heatmap_always_fits_its_area_and_shows_every_node_when_it_can() -> None:
    from usher.console.heatmap import HeatmapState, Scope, children, render_heatmap
    from usher.console.themes import DEFAULT_THEME, load_themes

    palette = load_themes([])[0][DEFAULT_THEME].heatmap
    for nodes in (1, 7, 16, 64, 200, 1000):
        state = cluster(nodes).state
        for width, height in ((60, 18), (80, 21), (120, 37), (160, 45), (200, 57)):
            hm = HeatmapState()
            scopes = [hm.trail[:]]
            first = children(state, hm.scope)[0][0]
            scopes.append([Scope(), Scope(0, first, 0)])  # zoomed into the first block
            for trail in scopes:
                hm.trail = trail
                lines = render_heatmap(state, hm, palette, width, height).plain.split("\n")
                assert len(lines) <= height, (nodes, width, height, len(lines))
                wide = max(cell_len(line) for line in lines)
                assert wide <= width, (nodes, width, height, wide)
        # 1,000 nodes at 200x57: every node a cell, in groups side by side
        hm = HeatmapState()
        text = render_heatmap(state, hm, palette, 200, 57).plain
        if nodes == 1000:
            assert "of 64 nodes" not in text  # not the one-bar-per-group fallback
            assert all(f"n-block{b}" in text for b in range(1, 17))


def test_a_node_shows_whose_room_is_kept_on_it_after_a_move_on_a_cluster() -> None:
    """On a cluster a moved job's new room is held before its pods come back: its node's GPUs
    show as allocated, and the node's view says for which job, since none runs there yet."""
    from pathlib import Path

    from usher.console.heatmap import HeatmapState, Scope, render_heatmap
    from usher.console.themes import DEFAULT_THEME, load_themes
    from usher.engine.enums import MoveMode

    text = (Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "consolidation.yaml").read_text()
    ctrl = Controller(parse_scenario(text, file="scattered.yaml"), until=700.0)
    ctrl.engine.moves = MoveMode.ON_RETURN
    ctrl.run_to_end()
    state = ctrl.state
    [room, _] = state.kept_rooms.values()
    node = state.nodes[room.placements[0].node_id]
    rack = state.levels.index("usher/rack")
    hm = HeatmapState(trail=[Scope(), Scope(rack, node.domains[rack]), Scope(rack + 1, node.domains[rack + 1])])
    palette = load_themes([])[0][DEFAULT_THEME].heatmap
    shown = render_heatmap(state, hm, palette, 160, 40).plain
    assert f"room kept for moved jobs (until their pods come back): {state.jobs[room.job_id].name}" in shown
    assert "alloc 100%" in shown
