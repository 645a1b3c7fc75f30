"""The placeholder console: it starts on a replay, shows it live, pauses, and quits on q."""

from __future__ import annotations

from usher.cli import demo_path
from usher.console.app import UsherApp
from usher.engine.controller import Controller
from usher.engine.scenario import load_scenario


async def test_demo_console_starts_pauses_and_quits() -> None:
    ctrl = Controller(load_scenario(demo_path()))
    app = UsherApp(ctrl, speed=None)
    async with app.run_test() as pilot:
        await pilot.pause(0.3)
        text = str(app.query_one("#summary").render())
        assert "time" in text and "GPUs allocated" in text
        await pilot.press("space")
        assert ctrl.paused
        await pilot.press("space")
        assert not ctrl.paused
        await pilot.press("q")
    assert app.return_code in (0, None)


async def test_readonly_badge_shows_in_the_header() -> None:
    ctrl = Controller(load_scenario(demo_path()))
    app = UsherApp(ctrl, speed=60, readonly=True)
    async with app.run_test() as pilot:
        await pilot.pause(0.1)
        assert "READ-ONLY" in app.sub_title
        await pilot.press("q")
