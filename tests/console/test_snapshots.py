"""SVG snapshots of every view on the demo at a fixed simulated time, in the dark and light themes.

The replay is stopped (the app does not run the controller loop), so each picture is the same on
every run; a change to a screen shows up as a diff of its SVG. Update deliberately with
``pytest tests/console/test_snapshots.py --snapshot-update`` and look at the report it writes.
"""

from __future__ import annotations

import pytest

from usher.console.app import UsherApp

from demo_state import demo_at

VIEWS = {"overview": "1", "queues": "2", "jobs": "3", "nodes": "4", "topology": "5", "events": "6"}


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("view", list(VIEWS))
def test_view_snapshot(snap_compare, view: str, theme: str) -> None:
    app = UsherApp(demo_at(), live=False, theme=theme)
    assert snap_compare(app, press=[VIEWS[view]], terminal_size=(120, 36))


def test_readonly_jobs_view_at_80x24(snap_compare) -> None:
    """The smallest terminal operators use over SSH: it degrades (fewer columns), never breaks."""
    app = UsherApp(demo_at(), live=False, readonly=True)
    assert snap_compare(app, press=["3"], terminal_size=(80, 24))


def test_preempt_dialog_snapshot(snap_compare) -> None:
    ctrl = demo_at()
    ctrl.paused = True
    app = UsherApp(ctrl, live=False)

    async def open_dialog(pilot) -> None:
        await pilot.press("3")
        app.query_one("#job-table").select_key("llm-pretrain")
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()

    assert snap_compare(app, run_before=open_dialog, terminal_size=(120, 36))


#: the terminal sizes the layout is checked at: the smallest the README promises, a laptop, a
#: large monitor
SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x60": (200, 60)}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("view", ["overview", "queues", "jobs", "nodes", "topology"])
def test_layout_snapshot(snap_compare, view: str, size: str) -> None:
    """Each main view at each size: columns fold at 80x24, the heatmap grows at 200x60."""
    app = UsherApp(demo_at(), live=False)

    async def show(pilot) -> None:
        await pilot.press(VIEWS[view])
        if view == "queues":  # a queue selected, so its jobs are listed below
            app.query_one("#queue-table").select_key("research")
        await pilot.pause()

    assert snap_compare(app, run_before=show, terminal_size=SIZES[size])


def test_quota_form_snapshot_at_80x24(snap_compare) -> None:
    """The quota form scrolls in the room left, Apply and Cancel docked below it."""
    app = UsherApp(demo_at(), live=False)

    async def open_form(pilot) -> None:
        await pilot.press("2")
        app.query_one("#queue-table").select_key("research")
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(app, run_before=open_form, terminal_size=(80, 24))
