"""The k9s habits operators bring, on the demo: a palette that is ours, ``:q``, Tab completion in
``:`` mode, errors that do not outstay their welcome, ``y``, ``l``, ``ctrl+d``, breadcrumbs and
``esc`` always back. (``y`` and ``l`` against a cluster: tests/kube/test_console_habits_on_cluster.py)"""

from __future__ import annotations

from test_actions import select, settle
from textual.command import CommandList, CommandPalette
from usher.console.app import UsherApp, View
from usher.console.palette import entries
from usher.console.prompt import CommandPrompt
from usher.console.table import RowTable
from usher.engine.enums import Action

TEXTUAL_SYSTEM_COMMANDS = ("Keys", "Maximize", "Screenshot", "Quit the application", "Change theme", "nord", "dracula")


def status(app: UsherApp) -> str:
    return str(app.query_one("#status").render())


async def palette_options(app: UsherApp, pilot, query: str) -> list[str]:
    """Open ctrl+p, type ``query``, and read what the palette lists."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    assert isinstance(app.screen, CommandPalette)
    await pilot.press(*query)
    command_list = app.screen.query_one(CommandList)
    for _ in range(40):  # the palette gathers hits in a worker
        await pilot.pause(0.05)
        if command_list.option_count and not app.screen.query_one(CommandList).has_class("--populating"):
            break
    # each option shows its title, then its help on a second line
    return [str(command_list.get_option_at_index(i).prompt).split("\n")[0] for i in range(command_list.option_count)]


# -- the palette ----------------------------------------------------------------------------


async def test_the_palette_lists_our_views_actions_and_themes_and_nothing_of_textuals(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2")  # the Queues view
        listed = {e.title: e for e in entries(app)}
        assert {"Go to overview", "Go to queues", "Go to jobs", "Go to nodes", "Go to topology", "Go to events"} <= listed.keys()
        # every action by name, from any view; one that cannot apply here says why
        assert listed["Drain selected node"].unavailable == "select a node in the Nodes view"
        assert listed["Approve selected job"].unavailable is None
        assert listed["Edit quota of selected queue"].unavailable is None
        assert listed["Pause or resume the replay"].unavailable is None
        themes = sorted(t for t in listed if t.startswith("Theme: "))
        assert themes == ["Theme: colorblind", "Theme: dark (in use)", "Theme: light"]
        assert not [t for t in listed if any(s.lower() in t.lower() for s in TEXTUAL_SYSTEM_COMMANDS)]
        assert list(app.get_system_commands(app.screen)) == []
        # through the palette itself: drain is found in the Queues view, disabled with the reason
        options = await palette_options(app, pilot, "drain")
        assert any(o.startswith("Drain selected node — select a node in the Nodes view") for o in options), options
        await pilot.press("enter")  # choosing it says why, and does nothing
        await pilot.pause()
        assert app.view == View.QUEUES and type(app.screen).__name__ == "Screen"
        assert any("select a node in the Nodes view" in n.message for n in app._notifications)
        # nothing of Textual's: no keys panel, no screenshot, no Textual themes
        for query in ("keys", "screenshot", "maximize", "nord"):
            await pilot.press("escape")
            options = await palette_options(app, pilot, query)
            assert not [o for o in options if "Keys" in o or "Screenshot" in o or "Maximize" in o or "nord" in o], (query, options)


async def test_the_palettes_themes_are_ours_and_switch_ours(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        options = await palette_options(app, pilot, "theme")
        assert sorted(options) == ["Theme: colorblind", "Theme: dark (in use)", "Theme: light"]
        await pilot.press("escape")
        await palette_options(app, pilot, "colorblind")
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme_name == "colorblind" and app.theme == "usher-colorblind"


async def test_the_palette_gives_the_rbac_and_read_only_reasons(console) -> None:
    app = console(readonly=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("4")
        listed = {e.title: e for e in entries(app)}
        assert listed["Drain selected node"].unavailable == "read-only console"
        assert listed["Show details of selected job"].unavailable == (
            "select a job in the Jobs or Queues view, or an event in the Events view"
        )
    app = console()
    app.forbidden = {Action.DRAIN: "your RBAC does not allow create on pods/eviction"}
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("4")
        listed = {e.title: e for e in entries(app)}
        assert listed["Drain selected node"].unavailable == "your RBAC does not allow create on pods/eviction"
        assert listed["Cordon selected node"].unavailable is None


async def test_the_palette_runs_an_action_that_applies(console) -> None:
    app = console()
    state = app.controller.state
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("4")
        node = next(n for n in state.nodes if n.schedulable)
        await select(app, pilot, "node-table", node.name)
        options = await palette_options(app, pilot, "cordon sel")
        assert options[0] == "Cordon selected node"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert node.cordoned


# -- : mode ---------------------------------------------------------------------------------


async def test_colon_q_and_colon_quit_quit(console) -> None:
    for line in ("q", "quit"):
        app = console()
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("colon", *line, "enter")
            await pilot.pause()
            assert app.return_code == 0 and not app.is_running, line
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("colon", *"queues", "enter")  # the queues are still a word away
        assert app.view == View.QUEUES and app.is_running


async def test_tab_completes_the_command_cycles_and_keeps_the_prompt(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        prompt = app.query_one("#prompt", CommandPrompt)
        await pilot.press("colon", "t", "o", "tab")
        assert prompt.value == ":topology" and app.focused is prompt
        await pilot.press("enter")
        assert app.view == View.TOPOLOGY
        await pilot.press("colon", "t", "tab")  # two commands begin with t: Tab cycles through them
        assert prompt.value == ":topology" and app.focused is prompt
        await pilot.press("tab")
        assert prompt.value == ":theme " and app.focused is prompt
        await pilot.press("tab")
        assert prompt.value == ":topology"
        await pilot.press("shift+tab")
        assert prompt.value == ":theme "
        await pilot.press("c", "tab")  # then the theme's name
        assert prompt.value == ":theme colorblind" and app.focused is prompt
        await pilot.press("enter")
        assert app.theme_name == "colorblind"
        await pilot.press("colon", "z", "z", "tab")  # nothing to complete: the prompt stays as it is
        assert prompt.value == ":zz" and app.focused is prompt and prompt.display
        await pilot.press("escape")


async def test_unknown_commands_say_so_and_errors_clear_on_a_view_change_or_a_success(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("colon", *"bogus", "enter")
        assert "unknown command :bogus" in status(app) and "Tab completes" in status(app)
        await pilot.press("3")  # another view: the error goes
        assert status(app) == ""
        await pilot.press("colon", *"theme", "enter")
        assert ":theme needs a name: colorblind, dark, light" in status(app)
        await pilot.press("4")
        assert status(app) == ""
        await pilot.press("colon", *"nonsense", "enter")
        assert "unknown command" in status(app)
        await pilot.press("question_mark")  # an action that works (help) takes it away too
        await pilot.pause()
        assert status(app) == ""
        await pilot.press("escape")
        # an error stays while nothing else happens: through a redraw, a cursor move
        await pilot.press("colon", *"bogus", "enter")
        app.redraw(force=True)
        await pilot.press("down")
        assert "unknown command" in status(app)


# -- y, l, ctrl+d -----------------------------------------------------------------------------


async def test_y_on_a_replay_shows_the_engines_job_as_yaml_and_l_says_there_are_no_pods(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", "pretrain-moe")
        await pilot.press("y")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "A replay runs no pods: this is the engine's job" in text
        assert "name: pretrain-moe" in text and "queue: research" in text
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"
        await pilot.press("l")
        await pilot.pause()
        assert "a replay runs no pods, so there are no logs" in status(app)
        await pilot.press("4")  # not a job: y and l are not for nodes
        assert app.check_action("pod_yaml", ()) is False
        assert app.unavailable_reason("pod_logs") == "select a job in the Jobs or Queues view"


async def test_ctrl_d_preempts_the_selected_job_as_p_does(console) -> None:
    app = console()
    state = app.controller.state
    victim = next(j for j in state.jobs if j.current_run is not None)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", victim.name)
        await pilot.press("ctrl+d")
        await pilot.pause()
        assert app.screen.query_one("#dialog-title").render().plain == f"Preempt {victim.name}?"
        await pilot.press("y")
        await settle(pilot, app)
        assert victim.current_run is None or len(victim.runs) > 1
        assert any(e.action == "preempt" and e.target == victim.name for e in state.audit)
        await pilot.press("4")  # on a node ctrl+d does nothing (nodes are drained, with d)
        await pilot.press("ctrl+d")
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"


# -- breadcrumbs and esc ----------------------------------------------------------------------


async def test_breadcrumbs_say_where_you_are(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        assert "   overview" in app.bar_text().plain
        await pilot.press("3")
        await select(app, pilot, "job-table", "pretrain-moe")
        assert "jobs › pretrain-moe" in app.bar_text().plain
        await pilot.press("down")
        await pilot.pause()
        assert f"jobs › {app.selected_job()}" in str(app.query_one("#bar").render())
        await pilot.press("2")
        await select(app, pilot, "queue-table", "research")
        assert "queues › research" in app.bar_text().plain
        await pilot.press("enter")  # into the queue's jobs
        await pilot.pause()
        job = app.query_one("#queue-jobs", RowTable).current_key
        assert f"queues › research › {job}" in app.bar_text().plain
        await pilot.press("5", "enter")
        await pilot.pause()
        assert "topology › block " in app.bar_text().plain


async def test_esc_always_goes_back(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        prompt = app.query_one("#prompt", CommandPrompt)
        await pilot.press("colon", "j")
        await pilot.press("escape")  # leaves : mode
        assert not prompt.display and app.prompt_mode is None and app.view == View.OVERVIEW
        await pilot.press("2")
        await select(app, pilot, "queue-table", "research")
        await pilot.press("enter")  # into the queue's jobs
        await pilot.pause()
        assert app.focused is app.query_one("#queue-jobs")
        await pilot.press("enter")  # a job's details
        await pilot.pause()
        assert type(app.screen).__name__ == "TextScreen"
        await pilot.press("escape")  # returns from details
        assert type(app.screen).__name__ == "Screen" and app.focused is app.query_one("#queue-jobs")
        await pilot.press("escape")  # from the queue's jobs to the queues
        assert app.view == View.QUEUES and app.focused is app.query_one("#queue-table")
        await pilot.press("e")  # the quota form
        await pilot.pause()
        assert type(app.screen).__name__ == "QuotaDialog"
        await pilot.press("escape")  # closes the dialog
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press("escape")  # closes the palette
        await pilot.pause()
        assert type(app.screen).__name__ == "Screen"
        await pilot.press("escape")  # the previous view
        assert app.view == View.OVERVIEW
        app.history.clear()
        await pilot.press("4")
        app.history.clear()
        await pilot.press("escape")  # with nowhere to go back to: the overview
        assert app.view == View.OVERVIEW
