"""Every operator action through the keyboard, as an operator would do it, checked on the engine."""

from __future__ import annotations

from usher.console.app import UsherApp, View
from usher.console.table import RowTable
from usher.engine.enums import JobState
from usher.engine.state import MILLI


async def select(app: UsherApp, pilot, table_id: str, key: str) -> None:
    table = app.query_one(f"#{table_id}", RowTable)
    await pilot.pause()
    assert key in [r.key for r in table.rows], f"{key} not listed in {table_id}"
    table.select_key(key)
    await pilot.pause()


async def settle(pilot, app: UsherApp) -> None:
    """Let the worker carrying the command and the controller loop finish."""
    for _ in range(20):
        await pilot.pause(0.02)
        if not [w for w in app.workers if w.group == "commands" and not w.is_finished]:
            break
    await pilot.pause()


async def test_approve_then_hold_and_release_a_job(console) -> None:
    app = console()
    state = app.controller.state
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        assert app.view == View.JOBS
        await select(app, pilot, "job-table", "huge-sweep")
        assert state.job("huge-sweep").state == JobState.AWAITING_APPROVAL
        await pilot.press("a")
        await settle(pilot, app)
        assert state.job("huge-sweep").approved
        assert "approve huge-sweep" in str(app.query_one("#status").render())
        await select(app, pilot, "job-table", "pretrain-moe")
        await pilot.press("h")
        await settle(pilot, app)
        assert state.job("pretrain-moe").held
        await pilot.press("r")
        await settle(pilot, app)
        assert not state.job("pretrain-moe").held
        audit = [(e.action, e.target) for e in state.audit if e.actor == "operator"]
        assert audit == [("approve", "huge-sweep"), ("hold", "pretrain-moe"), ("release", "pretrain-moe")]


async def test_preempt_shows_the_cost_first_and_only_acts_on_yes(console) -> None:
    app = console()
    state = app.controller.state
    victim = next(j for j in state.jobs if j.current_run is not None and len(j.current_run.placements) > 1)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", victim.name)
        await pilot.press("p")
        await pilot.pause()
        body = str(app.screen.query_one("#dialog-body").query_one("Static").render())
        assert "Work lost" in body and victim.current_run.placements[0].pod in body
        await pilot.press("n")  # cancel: nothing happens
        await pilot.pause()
        assert victim.current_run is not None
        await pilot.press("p")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert victim.runs[0].end is not None or victim.runs[-2].end_reason is not None
        ended = [r for r in victim.runs if r.end is not None]
        assert ended and str(ended[-1].end_reason) == "OperatorPreempted"


async def test_cordon_uncordon_and_drain_a_node(console) -> None:
    app = console()
    state = app.controller.state
    busy = next(n for n in state.nodes if n.jobs and n.schedulable)
    gangs = {state.jobs[j].name for j in busy.jobs}
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("4")
        await select(app, pilot, "node-table", busy.name)
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert busy.cordoned and busy.jobs  # cordon keeps running jobs
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert not busy.cordoned
        await pilot.press("d")
        await pilot.pause()
        body = str(app.screen.query_one("#dialog-body").query_one("Static").render())
        assert all(g in body for g in gangs)  # the dialog names every gang it will requeue
        await pilot.press("y")
        await settle(pilot, app)
        assert busy.cordoned
        assert not any(state.jobs[j].current_run and any(p.node_id == busy.id for p in state.jobs[j].current_run.placements) for j in range(len(state.jobs)))


async def test_quota_form_validates_previews_and_applies(console) -> None:
    app = console()
    state = app.controller.state
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.press("2")
        await select(app, pilot, "queue-table", "research")
        await pilot.press("e")
        await pilot.pause()
        gpu = app.screen.query_one("#nominal-gpu")
        gpu.value = "lots"
        await pilot.pause()
        assert "quota gpu: 'lots'" in str(app.screen.query_one("#quota-error").render())
        assert app.screen.query_one("#apply").disabled
        gpu.value = "128"
        await pilot.pause()
        preview = str(app.screen.query_one("#quota-preview").render())
        assert "pretrain-moe" in preview  # waiting for research's quota: more quota admits it
        await pilot.click("#apply")
        await settle(pilot, app)
        assert state.queues["research"].nominal[0] == 128 * MILLI
        assert any(e.action == "setQuota" and e.target == "research" for e in state.audit)


async def test_readonly_removes_every_action_that_changes_anything(console) -> None:
    app = console(readonly=True)
    state = app.controller.state
    async with app.run_test(size=(140, 40)) as pilot:
        assert "READ-ONLY" in app.bar_text().plain
        await pilot.press("3")
        await select(app, pilot, "job-table", "huge-sweep")
        await pilot.press("a", "p")
        await pilot.press("4")
        await pilot.press("c", "d")
        await pilot.press("2")
        await pilot.press("e")
        await settle(pilot, app)
        assert not state.job("huge-sweep").approved
        assert not any(n.cordoned and not n.failed for n in state.nodes if n.name != "gpu-09")
        assert not any(e.actor == "operator" for e in state.audit)
        assert type(app.screen).__name__ == "Screen"  # no dialog opened
        footer_actions = {b.binding.action for b in app.active_bindings.values() if b.enabled}
        assert not footer_actions & {"approve", "preempt", "cordon", "drain", "edit_quota"}


async def test_replay_pause_faster_slower(console) -> None:
    app = console()
    ctrl = app.controller
    async with app.run_test() as pilot:
        await pilot.press("space")
        assert not ctrl.paused
        await pilot.press("plus")
        assert ctrl.speed == 120
        await pilot.press("minus", "minus")
        assert ctrl.speed == 30
        await pilot.press("space")
        assert ctrl.paused


async def test_command_mode_filter_invert_and_back(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("colon", *"nodes", "enter")
        assert app.view == View.NODES
        await pilot.press("colon", *"jobs", "enter")
        table = app.query_one("#job-table", RowTable)
        everything = len(table.rows)
        await pilot.press("slash", *"notebook", "enter")
        await pilot.pause()
        assert table.rows and all("notebook" in r.key for r in table.rows)
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert table.rows and not any("notebook" in r.key for r in table.rows)
        await pilot.press("escape")  # clears the filter
        await pilot.pause()
        assert len(table.rows) == everything
        await pilot.press("escape")  # back to the previous view
        assert app.view == View.NODES
        await pilot.press("colon", *"bogus", "enter")
        assert "unknown command" in str(app.query_one("#status").render())


async def test_job_details_explain_why_it_waits(console) -> None:
    app = console()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", "pretrain-moe")
        await pilot.press("enter")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "Why it waits" in text and "WaitingForQuota: Asks for 64 GPUs but queue research uses" in text
        assert "position 1 in queue research" in text
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"


async def test_help_lists_the_keys_of_the_current_view(console) -> None:
    app = console()
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("4")
        await pilot.press("question_mark")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "Drain" in text and "nodes.drain" in text and "Approve" not in text


async def test_keymap_file_remaps_a_binding_and_a_bad_one_is_reported(console, tmp_path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("nodes.cordon: x\n")
    app = console(keymap=keys)
    state = app.controller.state
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("4")
        node = next(n for n in state.nodes if n.schedulable)
        await select(app, pilot, "node-table", node.name)
        await pilot.press("x")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, app)
        assert node.cordoned
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes.cordon: x\nnodes.explode: z\n")
    app = console(keymap=bad)
    async with app.run_test() as pilot:
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any("bad.yaml:2" in m and "nodes.explode" in m for m in messages)


async def test_themes_switch_live_and_a_broken_theme_falls_back(console, tmp_path, monkeypatch) -> None:
    themes = tmp_path / "config" / "usher" / "themes"
    themes.mkdir(parents=True)
    (themes / "neon.yaml").write_text("name: neon\ncolors: {primary: '#ff00ff'}\nheatmap: {scale: ['#000'], empty: '#111', cordoned: '#222', failed: '#333', stale: '#444'}\n")
    app = console(theme="neon")
    async with app.run_test() as pilot:
        await pilot.pause()
        messages = " ".join(n.message for n in app._notifications)
        assert "neon.yaml: heatmap.scale" in messages and "unknown theme 'neon'" in messages
        assert app.theme_name == "dark"
        await pilot.press("colon", *"theme colorblind", "enter")
        assert app.theme == "usher-colorblind"
        await pilot.press("T")
        assert app.theme_name == "dark"


async def test_topology_zooms_in_and_out_and_switches_metric(console) -> None:
    app = console()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        pane = app.query_one("#heatmap")
        await pilot.pause()
        assert "cluster   metric: allocation" in pane.render().plain
        await pilot.press("enter")
        await pilot.pause()
        assert "cluster › block" in pane.render().plain
        await pilot.press("m")
        await pilot.pause()
        assert "metric: utilization" in pane.render().plain
        await pilot.press("escape")
        await pilot.pause()
        assert pane.render().plain.startswith("cluster ")


async def test_a_node_zoomed_in_shows_live_figures_history_and_stale_as_stale(console) -> None:
    from usher.engine.telemetry import GpuSample

    app = console()
    ctrl = app.controller
    now = ctrl.now
    ctrl.telemetry.add(GpuSample("gpu-01", 0, now - 60 + k * 20, utilization=20.0 * k, memory_used=40 << 30, memory_total=80 << 30) for k in range(4))
    ctrl.telemetry.add([GpuSample("gpu-01", 1, now - 3600, utilization=90.0)])  # an hour old: stale
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", "enter", "enter", "enter")  # block, rack, node gpu-01
        await pilot.pause()
        lines = app.query_one("#heatmap").render().plain.splitlines()
        assert "hostname gpu-01" in lines[0]
        gpu0 = next(line for line in lines if line.startswith("GPU 0 "))
        gpu1 = next(line for line in lines if line.startswith("GPU 1 "))
        assert "util   60%" in gpu0 and "mem   50%" in gpu0
        assert gpu0.endswith(" ⣀⣤⣤")  # the history: 0%, 20%, 40%, 60%
        assert "util   N/A" in gpu1 and "(stale)" in gpu1  # never shown as idle
