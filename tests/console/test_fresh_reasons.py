"""The overview's "Pending by reason" always comes round to the engine's own reasons.

The console works out why jobs wait at most once per ``ConsoleModel.min_interval`` wall seconds
while a replay races along; jobs that arrived since are counted as "just arrived". When the
replay then stands still (paused, or finished), nothing the redraw key tracks changes any more,
yet the reasons on screen are still the throttled ones: they must be worked out and drawn once
the interval has passed, not left on screen for good.

The real replay controller is driven step by step (its loop is paused) and the console's wall
clock is a value the test moves, so each redraw tick sees exactly the time the test says.
"""

from __future__ import annotations

import re
from collections import Counter

from demo_state import demo_at
from usher.console.app import UsherApp
from usher.console.model import NOT_YET_EXPLAINED
from usher.engine.explain import explain_all

#: before the last jobs of the demo's first hour arrive (2700 s to 3600 s)
BEFORE = 2600.0
#: the end of the demo's first hour (``usher demo --until 1h``)
UNTIL = 3600.0


class WallClock:
    """The console's wall clock, moved by the test only."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pending_by_reason(app: UsherApp) -> dict[str, int]:
    """The overview's "Pending by reason" section as reason -> jobs."""
    text = str(app.query_one("#overview-text").render())
    section = text.split("Pending by reason\n", 1)[1].split("\n\n", 1)[0]
    return {m[2]: int(m[1]) for m in re.finditer(r"^ +(\d+)  (\S.*?) {2,}\d+ pods?$", section, re.M)}


def engine_reasons(app: UsherApp) -> dict[str, int]:
    """Why the engine's waiting jobs wait now, worked out afresh: reason -> jobs."""
    ctrl = app.controller
    state = ctrl.state
    expl = explain_all(state, ctrl.now, ctrl.policy.borrowing)
    waiting = [entry[-1] for q in state.queues.values() for entry in q.pending]
    return dict(Counter(str(expl[i].reason) for i in waiting))


async def test_the_overview_shows_the_engines_reasons_once_the_replay_stands_still() -> None:
    clock = WallClock()
    ctrl = demo_at(BEFORE)
    ctrl.paused = True  # the test steps the replay; the loop only takes commands
    app = UsherApp(ctrl, speed=600.0, clock=clock)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert pending_by_reason(app) == engine_reasons(app)

        # the replay races on: jobs arrive within one throttle interval, and a tick draws them
        clock.now += app.model.min_interval / 4
        while (t := ctrl.next_time()) is not None and t <= UNTIL:
            ctrl.step()
        app.redraw()
        await pilot.pause()
        assert NOT_YET_EXPLAINED in pending_by_reason(app)  # their reasons are not worked out yet

        # then it stands still: once the interval has passed, the next ticks draw the reasons
        clock.now += app.model.min_interval
        for _ in range(3):
            app.redraw()
            await pilot.pause()
        expected = engine_reasons(app)
        assert NOT_YET_EXPLAINED not in expected
        assert pending_by_reason(app) == expected
