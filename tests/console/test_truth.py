"""The console's figures and words tell the truth (issue 13, items 1, 3 and 7).

Every view is rendered on the demo and its figures are checked against the engine state: the
Nodes view against the nodes' free GPUs and against the topology view, durations humanised one
way (``1h55m``, ``45s``, never milliseconds), counted words in the right number, a preempted job
listed once, and messages that say how their figures come about.
"""

from __future__ import annotations

import re

import pytest
from demo_state import demo_at
from test_actions import select, settle
from usher.console.app import UsherApp, View
from usher.console.table import RowTable
from usher.engine import fmt
from usher.engine.explain import explain_all
from usher.engine.policy import quota
from usher.engine.state import MILLI

#: a duration with a fraction of a second (``27.976s``, ``10m47.024s``), or bare seconds past a
#: minute (``6900s``): what the one formatter never writes
RAW_DURATION = re.compile(r"(?<![\w.])(\d+[dhm])*\d+\.\d+s\b|(?<![\w.])\d{3,}s\b")
#: a count of one with a plural noun, or a "(s)" plural
BAD_PLURAL = re.compile(r"(?<![\d.])1 (queues|jobs|nodes|pods|GPUs|runs|events)\b|\w\(s\)")


def node_used_milli(node) -> int:
    return node.gpu_count * MILLI - sum(node.gpu_free)


def heatmap_nodes(text: str) -> dict[str, str]:
    """``node -> used/total`` from the topology view's node lines."""
    out = {}
    for line in text.splitlines():  # one node a line, or several side by side
        for m in re.finditer(r"(?:^|\s)([A-Za-z][\w.-]*) [^\d/\n]*?\s{2,}([<>]?[\d.]+/\d+)", line):
            out[m.group(1)] = m.group(2)
    return out


#: 3h10m (full, empty, failed and cordoned nodes) and 4h20m (a node with notebooks' shares)
MOMENTS = (3 * 3600 + 600, 4 * 3600 + 1200)


@pytest.mark.parametrize("at", MOMENTS)
async def test_nodes_view_gpu_counts_match_the_engine_and_the_topology_view(console, at: float) -> None:
    app = console(at=at)
    state = app.controller.state
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#node-table", RowTable)
        shown = {r.key: r.cells[2] for r in table.rows}
        assert set(shown) == {n.name for n in state.nodes}
        for node in state.nodes:
            used, total = shown[node.name].split("/")
            assert total == str(node.gpu_count), node.name
            assert used == fmt.gpus(node_used_milli(node)), (node.name, shown[node.name])
            assert float(used) * MILLI == node_used_milli(node), (node.name, shown[node.name])
        full = next(n for n in state.nodes if n.schedulable and node_used_milli(n) == n.gpu_count * MILLI)
        assert shown[full.name] == f"{full.gpu_count}/{full.gpu_count}"
        await pilot.press("5")
        await pilot.pause()
        topology = heatmap_nodes(app.query_one("#heatmap").render().plain)
        assert topology == shown


async def test_the_drain_dialog_counts_gpus_as_the_nodes_view_does(console) -> None:
    app = console(at=MOMENTS[1])
    state = app.controller.state
    shared = next(n for n in state.nodes if node_used_milli(n) % MILLI)  # fractional use: shares
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.press("4")
        await select(app, pilot, "node-table", shared.name)
        row = next(r for r in app.query_one("#node-table", RowTable).rows if r.key == shared.name)
        await pilot.press("d")
        await pilot.pause()
        body = str(app.screen.query_one("#dialog-body").query_one("Static").render())
        assert f"{row.cells[2].split('/')[0]} GPUs in use" in body


def test_fractional_use_is_a_share_not_a_thousandth() -> None:
    assert fmt.gpus(8000) == "8" and fmt.gpus(3000) == "3" and fmt.gpus(0) == "0"
    assert fmt.gpus(250) == "0.25" and fmt.gpus(36750) == "36.75" and fmt.gpus(187.5) == "0.19"
    assert fmt.gpus(7999) == "7.999" and fmt.gpus(7999.6) == "<8" and fmt.gpus(0.2) == ">0"
    assert fmt.gpus(float("inf")) == "∞"


def test_durations_are_humanised_one_way() -> None:
    cases = {0: "0s", 0.4: "0s", 27.976: "28s", 45: "45s", 59.6: "1m", 647.024: "10m47s", 3599.6: "1h",
             6900: "1h55m", 7200: "2h", 50400: "14h", 86399.9: "1d", 273600: "3d4h", 172800: "2d"}
    for seconds, text in cases.items():
        assert fmt.duration(seconds) == text, seconds


def test_plurals() -> None:
    assert fmt.plural(1, "queue") == "1 queue" and fmt.plural(2, "queue") == "2 queues"
    assert fmt.plural(0, "job") == "0 jobs" and fmt.plural(1, "pod") == "1 pod"


async def view_texts(app: UsherApp, pilot) -> dict[str, str]:
    """What every view shows, as plain text (tables: every cell of every row)."""
    out = {}
    for key, view in (("1", View.OVERVIEW), ("2", View.QUEUES), ("3", View.JOBS), ("4", View.NODES), ("5", View.TOPOLOGY), ("6", View.EVENTS)):
        await pilot.press(key)
        await pilot.pause()
        if view == View.OVERVIEW:
            out[view] = str(app.query_one("#overview-text").render())
        elif view == View.TOPOLOGY:
            out[view] = app.query_one("#heatmap").render().plain
        else:
            lines = []
            for table in app.query(RowTable):
                if table.display and table.is_on_screen:
                    lines.append(" | ".join(table.columns))
                    lines += [" | ".join(r.cells) for r in table.rows]
            out[view] = "\n".join(lines)
        out[view] += "\n" + app.bar_text().plain
    return out


async def test_every_view_on_the_demo_writes_figures_one_way(console) -> None:
    for at in (2 * 3600 + 1, *MOMENTS, 5 * 3600 + 60):
        app = console(at=at)
        state = app.controller.state
        async with app.run_test(size=(160, 50)) as pilot:
            texts = await view_texts(app, pilot)
            for view, text in texts.items():
                assert not RAW_DURATION.search(text), (at, view, RAW_DURATION.search(text).group(0))
                assert not BAD_PLURAL.search(text), (at, view, BAD_PLURAL.search(text).group(0))
                assert "0./" not in text and "is available" not in text, (at, view)
            # the Jobs view: a row per job name, each figure the engine's
            jobs = app.query_one("#job-table", RowTable)
            names = [r.key for r in jobs.rows]
            assert len(names) == len(set(names))
            for row in jobs.rows:
                job = state.job(row.key)
                assert row.cells[1] == str(job.state)
                assert row.cells[4] == fmt.gpus(sum(g.gpu_milli * g.count for g in job.groups))
            # the Queues view: used and quota as the engine counts them
            await pilot.press("2")
            await pilot.pause()
            for row in app.query_one("#queue-table", RowTable).rows:
                if row.key in state.queues:
                    q = state.queues[row.key]
                    assert row.cells[1] == fmt.gpus(q.nominal[0]) and row.cells[2] == fmt.gpus(q.usage[0])


async def test_a_preempted_job_is_one_row_and_its_lost_work_is_a_duration(console) -> None:
    app = console()
    state = app.controller.state
    preempted = [e.target for e in state.audit if e.action == "preempt"]
    assert preempted, "the demo preempts by 3h10m"
    async with app.run_test(size=(160, 44)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        rows = app.query_one("#job-table", RowTable).rows
        for name in preempted:
            mine = [r for r in rows if r.key == name]
            assert len(mine) == 1 and mine[0].cells[1] == "Running", (name, [r.cells[:2] for r in mine])
        await pilot.press("6")
        await pilot.pause()
        events = [" ".join(r.cells) for r in app.query_one("#event-table", RowTable).rows]
        lost = [e for e in events if "preempted for" in e]
        assert any("lost 1h55m of work" in e for e in lost), lost
        assert any("requeued 1 job:" in e for e in events), events


async def test_one_row_per_job_even_when_the_state_holds_an_earlier_job_of_that_name(console) -> None:
    """A watching mirror finishes a gang's job when its pods go and makes a new one when they
    come back (a preemption seen from outside): the console lists the job once, as it is now,
    and its details show every run."""
    from dataclasses import replace

    from usher.engine.enums import JobState

    app = console()
    state = app.controller.state
    job = next(j for j in state.jobs if j.current_run is not None and len(j.current_run.placements) > 1)
    earlier = replace(job, id=len(state.jobs), runs=[replace(job.runs[0], end=job.runs[0].start + 600.0)])
    earlier.state = JobState.FINISHED
    state.jobs.append(earlier)  # an older job of the same name; job_by_name keeps the current one
    async with app.run_test(size=(160, 44)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        rows = [r for r in app.query_one("#job-table", RowTable).rows if r.key == job.name]
        assert [r.cells[1] for r in rows] == ["Running"]


async def test_job_details_say_pods_and_gpus_never_an_internal_group_name(console) -> None:
    app = console()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", "llm-pretrain")
        await pilot.press("enter")
        await pilot.pause()
        text = str(app.screen.query_one("#page-text").render())
        assert "asks for     4 pods x 8 GPUs (worker)" in text, text
        assert not RAW_DURATION.search(text) and not BAD_PLURAL.search(text)


def test_a_quota_wait_says_how_its_figure_comes_about() -> None:
    ctrl = demo_at()
    state = ctrl.state
    job = state.job("pretrain-moe")
    text = explain_all(state, ctrl.now)[job.id].message
    q = state.queues["research"]
    verdict = quota.check(state, q, job.request)
    left = fmt.gpu_amount(verdict.available)
    assert "is available" not in text
    assert f"so {left} are left for it now" in text or f"so {left} is left for it now" in text, text
    # the figures it is derived from are all in the sentence
    pool = quota.pool_capacity(state, q.cohort, 0)
    used = quota.pool_usage(state, q.cohort, 0)
    assert f"{fmt.gpus(pool)} GPUs" in text and fmt.gpus(used) in text and fmt.gpus(pool - used) in text, text
    assert fmt.gpus(q.usage[0]) in text and fmt.gpus(q.nominal[0]) in text


def test_a_quota_wait_at_the_queue_ceiling_names_nominal_and_borrowing() -> None:
    from usher.engine.controller import Controller
    from usher.engine.scenario import parse_scenario

    scenario = parse_scenario(
        """
name: ceiling
nodeGroups:
  - {prefix: n, count: 8, template: {gpus: 8, cpu: 64, memory: 512Gi}}
queues:
  - {name: a, cohort: c, quota: {gpu: 64}, borrowingLimit: {gpu: 0}}
  - {name: b, cohort: c, quota: {gpu: 32}}
jobs:
  - {name: first, queue: a, submit: 0, duration: 1000, pods: [{count: 4, gpu: 8}]}
  - {name: second, queue: a, submit: 0, duration: 1000, pods: [{count: 5, gpu: 8}]}
""",
        file="ceiling.yaml",
    )
    ctrl = Controller(scenario)
    ctrl.step()
    state = ctrl.state
    second = state.job("second")
    text = explain_all(state, ctrl.now)[second.id].message
    assert "uses 32 of its 64 GPUs of nominal quota and may borrow 0" in text, text
    assert "so 32 GPUs are left for it now" in text, text


async def test_releasing_a_job_that_is_not_held_says_so_and_records_no_release(console) -> None:
    app = console()
    state = app.controller.state
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("3")
        await select(app, pilot, "job-table", "llm-pretrain")
        assert not state.job("llm-pretrain").held
        await pilot.press("r")
        await settle(pilot, app)
        status = str(app.query_one("#status").render())
        assert "not held; nothing to release" in status and "✓" not in status, status
        assert not [e for e in state.audit if e.action == "release" and e.result == "released"]
    # the engine, whoever asks
    from usher.engine.enums import Action

    text, _ = app.controller.engine.command(Action.RELEASE, app.controller.now, job="llm-pretrain")
    assert text == "not held; nothing to release"


async def test_the_quota_form_says_what_it_expected(console) -> None:
    app = console()
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.press("2")
        await select(app, pilot, "queue-table", "research")
        await pilot.press("e")
        await pilot.pause()
        gpu = app.screen.query_one("#nominal-gpu")
        for bad in ("abc", "nan", "-3"):
            gpu.value = bad
            await pilot.pause()
            error = str(app.screen.query_one("#quota-error").render())
            assert "could not convert" not in error and f"quota gpu: {bad!r}" in error, error
            assert "GPUs" in error and app.screen.query_one("#apply").disabled, error


async def test_sorting_marks_the_sorted_column(console) -> None:
    app = console()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("3")
        table = app.query_one("#job-table", RowTable)
        assert not any("▲" in c or "▼" in c for c in table.header())
        await pilot.press("o")  # by job name, a to z
        await pilot.pause()
        assert table.header()[0] == "job ▲"
        await pilot.press("O")
        await pilot.pause()
        assert table.header()[0] == "job ▼"
        assert [r.key for r in table.rows] == sorted((r.key for r in table.rows), reverse=True)
        await pilot.press("o", "o", "o")  # state, queue, prio: highest first
        await pilot.pause()
        assert table.header()[3] == "prio ▼" and table.header()[0] == "job"
        assert " prio ▼ " in table.render_line(0).text  # drawn whole, never cut to "prio…"
        prios = [int(r.cells[3]) for r in table.rows]
        assert prios == sorted(prios, reverse=True)


def test_the_overviews_reasons_add_up_to_the_pending_jobs_even_before_they_are_worked_out() -> None:
    from usher.console.model import NOT_YET_EXPLAINED, ConsoleModel

    ctrl = demo_at(50 * 60)
    model = ConsoleModel(lambda: ctrl.state, min_interval=3600.0, clock=lambda: 0.0)
    first = model.overview(ctrl.now)
    assert sum(n for _, n in first.by_reason) == first.pending
    while (t := ctrl.next_time()) is not None and t <= 3600:  # more jobs arrive; reasons are not redone yet
        ctrl.step()
    later = model.overview(ctrl.now)
    # the job that awaited approval at 50m has started (not counted any more); one that came
    # since is counted as just arrived until its reason is worked out
    assert dict(first.by_reason)["AwaitingApproval"] == 1 and "AwaitingApproval" not in dict(later.by_reason)
    assert dict(later.by_reason)[NOT_YET_EXPLAINED] == 1
    assert sum(n for _, n in later.by_reason) == later.pending
