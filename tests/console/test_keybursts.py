"""Input that cannot quit or crash the console (issue 29, finding 2): keys sent in one burst, as a
paste or a laggy SSH link delivers them, do what the same keys typed slowly do; pastes are typed
into the prompt, never taken as single-key actions; keys right behind the one that opens a
dialog land in it; resizes between keys change nothing else. And at 80x24 (finding 8) Enter on
an event shows it whole, and the quota form's preview is on screen.

Every burst goes through Textual's own terminal parser (``bursts.parse``) and is posted whole
before the app handles its first key. (Against a cluster: tests/kube/test_console_bursts_on_cluster.py)
"""

from __future__ import annotations

import random
import warnings

from bursts import DOWN, ESC, BurstApp, check, paste, parse, random_burst, resize, send, settle
from demo_state import demo_at
from test_layout import on_screen
from textual.widgets import Input, Static

from usher.console.app import View
from usher.console.dialogs import ConfirmDialog, QuotaDialog, TextScreen
from usher.console.table import RowTable
from usher.engine.enums import EndReason, JobState
from usher.engine.state import MILLI


def burst_app(size=(80, 24)) -> BurstApp:
    ctrl = demo_at()
    ctrl.paused = True
    return BurstApp(ctrl, speed=60.0)


async def typed(pilot, app: BurstApp, *chunks: str) -> None:
    """``chunks`` as one burst, then wait until every key has been handled."""
    send(app, parse(*chunks))
    await settle(pilot, app)


def status(app) -> str:
    return str(app.query_one("#status").render())


async def test_a_command_typed_in_one_burst_runs_and_does_not_quit() -> None:
    """The issue's case: ``:queues`` Enter in one burst exited to the shell."""
    ctrl = demo_at()
    ctrl.paused = True
    from usher.console.app import UsherApp

    app = UsherApp(ctrl)
    async with app.run_test(size=(80, 24)) as pilot:
        await typed(pilot, app, ":queues\r")
        assert app.is_running and app.return_code is None
        assert app.view == View.QUEUES
        assert app.focused is app.query_one("#queue-table")


async def test_every_command_typed_as_one_burst() -> None:
    app = burst_app()
    state = app.controller.state
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app.run_test(size=(80, 24)) as pilot:
            for command, view in (
                (":queues\r", View.QUEUES), (":jobs\r", View.JOBS), (":nodes\r", View.NODES),
                (":topology\r", View.TOPOLOGY), (":events\r", View.EVENTS), (":overview\r", View.OVERVIEW),
                (":to\t\r", View.TOPOLOGY),  # Tab completes in the burst too
            ):
                await typed(pilot, app, command)
                assert app.view == view, command
                assert check(app), (command, check(app).problems)
            await typed(pilot, app, ":theme light\r")
            assert app.theme_name == "light" and app.theme == "usher-light"
            await typed(pilot, app, ":speed 120\r")
            assert app.controller.speed == 120
            await typed(pilot, app, ":jobs\r/run\r")
            listed = app.query_one("#job-table", RowTable).rows
            assert app.filters[View.JOBS] == "run" and listed
            assert all("run" in " ".join(r.cells).lower() for r in listed)
            await typed(pilot, app, ESC)  # esc clears the filter
            assert app.filters[View.JOBS] == ""

            # each action key with its dialog, the answer in the same burst
            await typed(pilot, app, "3/huge-sweep\r", "a")
            assert state.job("huge-sweep").approved
            await typed(pilot, app, ESC, "/pretrain-moe\r", "h")  # esc: the filter cleared first
            assert state.job("pretrain-moe").held
            await typed(pilot, app, "r")
            assert not state.job("pretrain-moe").held
            await typed(pilot, app, ESC, "/llm-pretrain\r", "py")
            # preempt confirmed with y in the burst (it may start again at once where there is room)
            assert [run.end_reason for run in state.job("llm-pretrain").runs][-2:].count(EndReason.OPERATOR_PREEMPTED) == 1
            await typed(pilot, app, "\r")
            assert isinstance(app.screen, TextScreen) and "Job llm-pretrain" in str(app.screen.query_one("#dialog-title").render())
            await typed(pilot, app, ESC, "y")
            assert isinstance(app.screen, TextScreen) and "YAML" in str(app.screen.query_one("#dialog-title").render())
            await typed(pilot, app, ESC, "l")
            assert "logs" in status(app)
            await typed(pilot, app, ESC, "4/gpu-03\r", "c", "y")
            assert state.node("gpu-03").cordoned
            await typed(pilot, app, "u", "y")
            assert not state.node("gpu-03").cordoned
            await typed(pilot, app, "d", "y")
            assert state.node("gpu-03").cordoned and "drain" in status(app)
            # the quota form: keys behind ``e`` land in its first field, Enter applies
            await typed(pilot, app, ESC, "2", DOWN, DOWN, DOWN, "e128\r")
            assert app.selected_queue() == "research"
            assert state.queues["research"].nominal[0] == 128 * MILLI
            await typed(pilot, app, "?")
            assert isinstance(app.screen, TextScreen) and "Help" in str(app.screen.query_one("#dialog-title").render())
            await typed(pilot, app, ESC)
            assert check(app), check(app).problems
            # and all of it again as one single burst
            await typed(pilot, app, ":events\r:jobs\r/run\r", ESC, ":theme dark\r:nodes\r")
            assert app.view == View.NODES and app.theme_name == "dark"
            assert check(app, caught), check(app, caught).problems
            assert app.quit_keys == 0 and app.quit_commands == []


async def test_a_quit_command_in_a_burst_quits_and_nothing_after_it_runs() -> None:
    app = burst_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await typed(pilot, app, ":q\r", "4")
        assert app.quit_commands == ["q"]


async def test_keys_behind_the_one_that_opens_a_dialog_land_in_it() -> None:
    """``e`` then digits, all in one burst: the digits are the new quota, not views (``1``-``6``)."""
    app = burst_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await typed(pilot, app, "2", DOWN, DOWN, DOWN, "e", "5", "0")
        assert isinstance(app.screen, QuotaDialog)
        assert app.screen.query_one("#nominal-gpu", Input).value == "50"
        assert app.view == View.QUEUES
        await typed(pilot, app, ESC, "4", "c", "2")  # a confirm dialog: 2 is not its key
        assert isinstance(app.screen, ConfirmDialog) and app.view == View.NODES
        assert check(app), check(app).problems


async def test_a_dialog_opened_as_the_console_quits_does_not_crash_it() -> None:
    """The issue's ``NoMatches: #nominal-gpu on QuotaDialog()``: a form still mounting while the
    app closes."""
    from usher.console.app import UsherApp

    ctrl = demo_at()
    ctrl.paused = True
    app = UsherApp(ctrl)
    async with app.run_test(size=(80, 24)) as pilot:
        await typed(pilot, app, "2", DOWN, DOWN, DOWN)
        assert app.selected_queue() == "research"
        app.action_edit_quota()  # the form is pushed; it mounts once the app's loop runs again
        app.exit(0)  # and a quit comes first
        await pilot.pause()
    assert app._exception is None and app.return_code == 0


async def test_pastes_are_typed_into_the_prompt_never_taken_as_actions() -> None:
    app = burst_app()
    state = app.controller.state
    async with app.run_test(size=(80, 24)) as pilot:
        await typed(pilot, app, paste(":jobs\n"))
        assert app.view == View.JOBS
        # a word pasted over the nodes view is no string of single-key actions
        cordoned = {n.name for n in state.nodes if n.cordoned}
        await typed(pilot, app, "4", paste("drain"))
        assert {n.name for n in state.nodes if n.cordoned} == cordoned
        assert isinstance(app.screen, type(app.screen_stack[0])) and app.view == View.NODES
        assert "pasted text ignored: 'drain'" in status(app)
        # lines: a command, then a filter for the view it opened
        await typed(pilot, app, paste(":queues\n/research\n"))
        assert app.view == View.QUEUES and app.filters[View.QUEUES] == "research"
        # into the open prompt: what the newline completes runs
        await typed(pilot, app, ":", paste("nodes\n"))
        assert app.view == View.NODES and app.prompt_mode is None
        # no newline: left in the prompt to finish
        await typed(pilot, app, paste(":top"))
        assert app.prompt_mode == "command" and app.query_one("#prompt", Input).value == ":top"
        await typed(pilot, app, "ology\r")
        assert app.view == View.TOPOLOGY
        # a paste into the quota form's field is the field's
        await typed(pilot, app, "2", DOWN, DOWN, DOWN, "e", paste("96"))
        assert app.screen.query_one("#nominal-gpu", Input).value == "96"
        assert check(app), check(app).problems


async def test_resizes_between_keys_change_nothing_else() -> None:
    app = burst_app()
    async with app.run_test(size=(80, 24)) as pilot:
        evs = []
        for chunk, size in ((":jobs\r", (60, 20)), ("4", (200, 60)), (":events\r", (80, 24)), ("2", (120, 40)), ("5", (80, 24))):
            parsed = parse(chunk)
            evs += parsed[:1] + [resize(app, *size)] + parsed[1:]
        send(app, evs)
        await settle(pilot, app)
        await pilot.pause(0.1)
        assert app.view == View.TOPOLOGY and app.size == (80, 24)
        assert check(app), check(app).problems


async def test_random_key_bursts_leave_the_console_alive_and_consistent() -> None:
    """A short run of bench/keyburst.py: seeded random bursts of keys, commands, pastes and
    resizes; after each, the app is running, its header names the view on screen, no dialog is
    stacked on another, the focus is where the keys go, nothing was quit by a key never pressed
    alone, and no warning was raised."""
    rng = random.Random(29)
    app = burst_app()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app.run_test(size=(80, 24)) as pilot:
            for n in range(12):
                send(app, random_burst(rng, app, 20))
                await settle(pilot, app)
                result = check(app, caught)
                assert result, (n, result.problems)
            assert app.keys.passed > 200


# -- finding 8: at 80x24 ----------------------------------------------------------------------


async def test_enter_on_an_event_shows_it_whole_at_80_columns() -> None:
    app = burst_app()
    state = app.controller.state
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6")
        await pilot.pause()
        table = app.query_one("#event-table", RowTable)
        longest = max(range(len(state.audit)), key=lambda i: len(state.audit[i].result))
        entry = state.audit[longest]
        table.select_key(str(longest))
        await pilot.pause()
        drawn = "".join("".join(s.text for s in table.render_line(y)) for y in range(table.size.height))
        assert entry.result not in drawn, "the result fits at 80 columns: pick a longer one"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TextScreen)
        page = app.screen.query_one("#page-text", Static)
        shown = str(page.render())
        assert entry.result in shown.replace("\n", " ") or entry.result in shown
        assert entry.target in shown and str(entry.action) in shown
        assert on_screen(app, page)
        await pilot.press("escape")
        await pilot.pause()
        assert app.view == View.EVENTS and not isinstance(app.screen, TextScreen)


async def test_the_quota_forms_preview_is_on_screen_at_80x24() -> None:
    app = burst_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        app.query_one("#queue-table", RowTable).select_key("research")
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        field = app.screen.query_one("#nominal-gpu", Input)
        field.value = "128"
        await pilot.pause()
        preview = app.screen.query_one("#quota-preview", Static)
        assert "Would become admissible (1): pretrain-moe" in str(preview.render())
        assert on_screen(app, preview)
        assert on_screen(app, app.screen.query_one("#apply")) and on_screen(app, field)
