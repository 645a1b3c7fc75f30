"""Consolidation (issue 15): jobs moved out of a rack so that a gang waiting for one can start.

On ``fixtures/examples/consolidation.yaml``: four nodes in two racks; four long 4-GPU jobs end up
one per node (their short neighbours have ended), so each rack has 8 GPUs free and a 16-GPU gang
that needs one rack waits although 16 GPUs are free. usher moves the two long jobs of one rack
into the other and starts the gang.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from usher.engine.controller import Controller
from usher.engine.enums import AuditAction, MoveMode
from usher.engine.policy.consolidation import ROOM_KEPT_FOR
from usher.engine.policy.registry import get_policy
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario

SCATTERED = (Path(__file__).resolve().parents[2] / "fixtures" / "examples" / "consolidation.yaml").read_text()


def _replay(text: str, policy: str = "usher", **changes: object) -> Controller:
    chosen = replace(get_policy(policy), **changes) if changes else policy
    ctrl = Controller(parse_scenario(text, file="scattered.yaml"), chosen)
    while ctrl.step():
        pass
    return ctrl


def _runs(ctrl: Controller) -> dict[str, list]:
    return {job.name: job.runs for job in ctrl.state.jobs}


def _rack_of(ctrl: Controller, node_id: int) -> str:
    return ctrl.state.nodes[node_id].labels["usher/rack"]


def test_the_scattered_jobs_were_one_per_node_before() -> None:
    """The premise: without consolidation the gang waits for a long job to end (10 h)."""
    runs = _runs(_replay(SCATTERED, consolidation=False))
    assert runs["gang"][0].start == 36000.0
    assert all(len(runs[f"long-{i}"]) == 1 for i in range(4))


def test_a_gang_waiting_for_a_rack_starts_once_two_jobs_are_moved() -> None:
    ctrl = _replay(SCATTERED)
    runs = _runs(ctrl)
    gang = runs["gang"][0]
    assert gang.start == 700.0
    gang_racks = {_rack_of(ctrl, p.node_id) for p in gang.placements}
    assert len(gang_racks) == 1
    moved = [name for name in (f"long-{i}" for i in range(4)) if len(runs[name]) == 2]
    assert len(moved) == 2
    for name in moved:
        before, after = runs[name]
        assert before.end == after.start == 700.0  # re-placed at once, never waiting
        assert before.by == "gang"
        assert {_rack_of(ctrl, p.node_id) for p in after.placements} != gang_racks
    # each lost only the 100 s since its last checkpoint at 600 s, and finished 100 s later
    for name in moved:
        assert runs[name][-1].end == 36100.0
    # the audit trail says what moved where, and why
    moves = [e for e in ctrl.state.audit if e.action == AuditAction.MOVE]
    assert sorted(e.target for e in moves) == sorted(moved)
    assert all("so that gang could start in usher/rack=" in e.result and "lost 1m40s of work" in e.result for e in moves), moves
    assert any(e.action == AuditAction.MAKE_ROOM and e.target == "gang" for e in ctrl.state.audit)
    # the report counts the moves, among the preemptions
    summary = build_report(ctrl)["summary"]
    assert summary["moves"] == 2 and summary["preemptions"] == 2


def test_no_move_when_a_moved_job_could_not_start_again_at_once() -> None:
    """A third long job per rack's worth of room is taken: the movers would have nowhere to go."""
    text = SCATTERED.replace(
        "  - {name: gang,",
        "  - {name: blocker, queue: research, submit: 650, duration: 36000, pods: [{count: 1, gpu: 4}]}\n  - {name: gang,",
    )
    runs = _runs(_replay(text))
    assert all(len(runs[f"long-{i}"]) == 1 for i in range(4))
    assert runs["gang"][0].start > 700.0


def test_higher_priority_and_non_preemptible_jobs_are_never_moved() -> None:
    outrank = SCATTERED.replace("queue: research, duration:", "queue: research, priority: high, duration:")
    pinned = SCATTERED.replace("duration: 36000,", "preemptible: false, duration: 36000,")
    for change, text in (("outranking the gang", outrank), ("not preemptible", pinned)):
        runs = _runs(_replay(text))
        assert all(len(runs[f"long-{i}"]) == 1 for i in range(4)), change
        assert runs["gang"][0].start == 36000.0


def test_baselines_never_move_jobs() -> None:
    for policy in ("kueue", "volcano", "slurm"):
        runs = _runs(_replay(SCATTERED, policy))
        assert all(len(runs[f"long-{i}"]) == 1 for i in range(4)), policy


# -- on a cluster: the movers' pods are evicted and come back later (MoveMode.ON_RETURN) -----


def _moved_on_a_cluster(text: str = SCATTERED) -> Controller:
    """The scattered replay up to the gang's start at 700 s, with moves made as on a cluster:
    nothing creates the movers' pods again until a test submits them."""
    ctrl = Controller(parse_scenario(text, file="scattered.yaml"), "usher", until=700.0)
    ctrl.engine.moves = MoveMode.ON_RETURN
    ctrl.run_to_end()
    return ctrl


def _kept(ctrl: Controller) -> dict[str, set[str]]:
    st = ctrl.state
    return {st.jobs[i].name: {_rack_of(ctrl, p.node_id) for p in room.placements} for i, room in st.kept_rooms.items()}


def test_on_a_cluster_the_gang_starts_and_the_room_found_for_each_mover_is_kept() -> None:
    ctrl = _moved_on_a_cluster()
    st = ctrl.state
    gang = st.jobs[st.job_by_name["gang"]]
    assert gang.current_run is not None and gang.current_run.start == 700.0
    gang_racks = {_rack_of(ctrl, p.node_id) for p in gang.current_run.placements}
    kept = _kept(ctrl)
    assert len(kept) == 2 and all(racks and not racks & gang_racks for racks in kept.values()), kept
    for name in kept:
        job = st.jobs[st.job_by_name[name]]
        # stopped and out of its queue until its pods come back; its queue is still charged
        assert job.current_run is None and not job.submitted
    assert st.queues["research"].usage[0] == 32 * 1000  # the gang, the two long jobs left and the two kept
    assert st.total_whole_free == 0
    moves = [e for e in st.audit if e.action == AuditAction.MOVE]
    assert sorted(e.target for e in moves) == sorted(kept)
    assert all("moving from" in e.result and "is kept for 10m until its pods come back" in e.result for e in moves), moves


def test_a_moved_job_whose_pods_come_back_starts_in_its_kept_room_before_anything_else() -> None:
    ctrl = _moved_on_a_cluster()
    st, engine = ctrl.state, ctrl.engine
    kept = {i: [(p.node_id, tuple(p.gpus)) for p in room.placements] for i, room in st.kept_rooms.items()}
    # a job arriving meanwhile that would fit only in the kept room waits
    newcomer = st.jobs[st.job_by_name["short-0"]]
    newcomer.runs.clear()
    engine.submit(newcomer, 710.0)
    engine.cycle(710.0)
    assert newcomer.current_run is None
    # the movers' pods come back: each starts where its room was kept
    for i in kept:
        engine.submit(st.jobs[i], 730.0)
    engine.cycle(730.0)
    for i, where in kept.items():
        run = st.jobs[i].current_run
        assert run is not None and run.start == 730.0
        assert [(p.node_id, tuple(p.gpus)) for p in run.placements] == where
    assert not st.kept_rooms and newcomer.current_run is None
    back = [e for e in st.audit if e.action == AuditAction.KEEP_ROOM]
    assert len(back) == 2 and all(e.result.startswith("started again on ") and "moved for gang" in e.result for e in back), back
    assert st.queues["research"].usage[0] == 32 * 1000


def test_a_kept_room_is_given_back_when_the_pods_do_not_come_back_in_time() -> None:
    ctrl = _moved_on_a_cluster()
    st, engine = ctrl.state, ctrl.engine
    names = set(_kept(ctrl))
    engine.cycle(700.0 + ROOM_KEPT_FOR - 1)
    assert set(_kept(ctrl)) == names
    engine.cycle(700.0 + ROOM_KEPT_FOR)
    assert not st.kept_rooms
    assert st.total_whole_free == 8 and st.queues["research"].usage[0] == 24 * 1000
    given = [e for e in st.audit if e.action == AuditAction.KEEP_ROOM]
    assert sorted(e.target for e in given) == sorted(names)
    assert all("did not come back within 10m" in e.result for e in given), given


def test_jobs_nothing_would_create_again_are_never_moved_on_a_cluster() -> None:
    ctrl = Controller(parse_scenario(SCATTERED, file="scattered.yaml"), "usher", until=700.0)
    ctrl.engine.moves = MoveMode.ON_RETURN
    for job in ctrl.state.jobs:
        job.movable = False  # bare pods: an eviction deletes them for good
    ctrl.run_to_end()
    gang = ctrl.state.jobs[ctrl.state.job_by_name["gang"]]
    assert gang.current_run is None and not ctrl.state.kept_rooms
    assert all(len(ctrl.state.jobs[ctrl.state.job_by_name[f"long-{i}"]].runs) == 1 for i in range(4))


def test_a_gang_with_a_launcher_beside_its_workers_is_made_room_for_too() -> None:
    """A gang of two groups (a CPU-only launcher beside the rack-bound workers) is asked about by
    trial placements rather than by counting room: the same two moves start it at 700 s."""
    text = SCATTERED.replace(
        "pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]",
        "pods: [{name: w, count: 2, gpu: 8, topology: {required: usher/rack}}, {name: launcher, count: 1, cpu: 2}]",
    )
    assert text != SCATTERED
    runs = _runs(_replay(text))
    assert runs["gang"][0].start == 700.0
    assert sorted(name for name in (f"long-{i}" for i in range(4)) if len(runs[name]) == 2) == sorted(
        name for name in (f"long-{i}" for i in range(4)) if len(_runs(_replay(SCATTERED))[name]) == 2
    )


def _stranded() -> str:
    """The movers (5 GPUs each) have nowhere else to go (3 GPUs free per node), and from 800 s on
    only jobs that wait arrive (8 GPUs on one node)."""
    text = (
        SCATTERED.replace("count: 1, gpu: 4}]}\n  - {name: short", "count: 1, gpu: 5}]}\n  - {name: short")
        .replace("duration: 100, pods: [{count: 1, gpu: 4}]", "duration: 100, pods: [{count: 1, gpu: 3}]")
        .replace("pods: [{count: 2, gpu: 8, topology", "pods: [{count: 2, gpu: 6, topology")
    )
    return text + "".join(
        f"  - {{name: wide-{t}, queue: research, submit: {t}, duration: 100, pods: [{{count: 1, gpu: 8}}]}}\n"
        for t in range(800, 2000, 100)
    )


def test_a_failed_search_is_not_repeated_while_the_cluster_and_its_candidates_stay_the_same(monkeypatch) -> None:
    """Issue 34: a search that found no moves is tried again only when something it looked at
    changed. The moments after the gang's first try only add jobs that wait: no new search until
    the long jobs end, and then the same decisions as without consolidation."""
    from usher.engine.policy import consolidation

    text = _stranded()
    searched: list[float] = []
    real = consolidation._try_domain

    def counting(state, job, counts, movers, now, *rest):  # type: ignore[no-untyped-def]
        searched.append(now)
        return real(state, job, counts, movers, now, *rest)

    monkeypatch.setattr(consolidation, "_try_domain", counting)
    ctrl = _replay(text)
    runs = _runs(ctrl)
    assert all(len(runs[f"long-{i}"]) == 1 for i in range(4))  # nothing could be moved
    assert searched and min(searched) == 700.0
    # twelve moments of new waiting jobs in between, and no search again until a long job ends
    assert [t for t in searched if 700.0 < t < 36000.0] == []
    plain = _runs(_replay(text, consolidation=False))
    assert {name: [(r.start, r.end) for r in rs] for name, rs in runs.items()} == {
        name: [(r.start, r.end) for r in rs] for name, rs in plain.items()
    }


def test_movers_with_nowhere_to_go_by_count_are_not_placed_on_trial(monkeypatch) -> None:
    """Issue 34: when no node outside the gang's rack has a mover's GPUs free, and the rack keeps
    too few beside the gang, the search says so from the counts: no mover is placed on trial, and
    the decisions are those without consolidation."""
    from usher.engine.policy import consolidation

    tried: list[str] = []

    class Counting(consolidation.Placer):
        def place_gang(self, job, counts):  # type: ignore[no-untyped-def]
            if job.name.startswith("long-"):
                tried.append(job.name)
            return super().place_gang(job, counts)

    monkeypatch.setattr(consolidation, "Placer", Counting)
    runs = _runs(_replay(_stranded()))
    assert tried == []
    plain = _runs(_replay(_stranded(), consolidation=False))
    assert {name: [(r.start, r.end) for r in rs] for name, rs in runs.items()} == {
        name: [(r.start, r.end) for r in rs] for name, rs in plain.items()
    }
