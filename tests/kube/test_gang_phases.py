"""A gang's life is one phase, moved only as ``gang.TRANSITIONS`` allows (issue 30).

Every pair of phases is tried: each move the table allows is made, each other one is refused
loudly (``IllegalMove``, an error in the log, a count in ``Mirror.refused_moves``) and leaves the
gang where it was. On a sandbox cluster, a gang's bind goes through the binder's steps in order.
"""

from __future__ import annotations

import logging
from itertools import product

import pytest
from sandboxes import UsherOnSandbox, node, pod, usher_sandbox  # noqa: F401 (usher_sandbox is the sb fixture)

from usher.engine.backends.kube.gang import TRANSITIONS, Gang, GangPhase, IllegalMove
from usher.engine.backends.kube.mirror import Mirror
from usher.sandbox.apiserver import FaultKind

PAIRS = list(product(GangPhase, GangPhase))


def _gang_in(mirror: Mirror, phase: GangPhase) -> Gang:
    gang = mirror.gangs["ml/train"] = Gang("ml/train", 1)
    gang.phase, gang.why = phase, "set up by the test"
    return gang


def test_every_phase_has_its_row_and_names_only_phases():
    assert set(TRANSITIONS) == set(GangPhase)
    assert all(set(targets) <= set(GangPhase) for targets in TRANSITIONS.values())


@pytest.mark.parametrize(("start", "to"), [p for p in PAIRS if p[1] in TRANSITIONS[p[0]]], ids=lambda p: str(p))
def test_each_allowed_move_is_made(start: GangPhase, to: GangPhase):
    mirror = Mirror("c")
    gang = _gang_in(mirror, start)
    mirror.move(gang, to, "why")
    assert gang.phase == to and gang.why == "why"
    assert not mirror.refused_moves


@pytest.mark.parametrize(("start", "to"), [p for p in PAIRS if p[1] not in TRANSITIONS[p[0]]], ids=lambda p: str(p))
def test_each_other_move_is_refused_loudly(start: GangPhase, to: GangPhase, caplog: pytest.LogCaptureFixture):
    mirror = Mirror("c")
    gang = _gang_in(mirror, start)
    with caplog.at_level(logging.ERROR, logger="usher.controller"), pytest.raises(IllegalMove, match=f"from {start} to {to}"):
        mirror.move(gang, to, "why")
    assert gang.phase == start and gang.why == "set up by the test"  # not moved, not half-moved
    assert mirror.refused_moves == {(start, to): 1}
    assert any(f"{start} -> {to}" in r.getMessage() for r in caplog.records)


def test_every_phase_is_reachable_from_idle_and_leads_back_to_it():
    def reachable(start: GangPhase, edges: dict[GangPhase, set[GangPhase]]) -> set[GangPhase]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    forward = {p: set(t) for p, t in TRANSITIONS.items()}
    backward: dict[GangPhase, set[GangPhase]] = {p: set() for p in GangPhase}
    for p, targets in TRANSITIONS.items():
        for t in targets:
            backward[t].add(p)
    assert reachable(GangPhase.IDLE, forward) == set(GangPhase)  # no phase nothing leads to
    assert reachable(GangPhase.IDLE, backward) == set(GangPhase)  # no phase a gang stays in for good


def test_the_questions_asked_of_a_gang_follow_its_phase():
    """``binding``, ``teardown``, ``called_off`` and ``completable`` are read from the phase,
    never stored beside it (so they cannot disagree with it)."""
    gang = Gang("ml/train", 1)
    answers = {}
    for phase in GangPhase:
        gang.phase, gang.why = phase, "w"
        answers[phase] = (gang.binding, gang.binds_sent, gang.called_off, gang.teardown, gang.completable)
    assert answers == {
        GangPhase.IDLE: (False, False, None, None, False),
        GangPhase.RESERVED: (True, False, None, None, False),
        GangPhase.CALLED_OFF: (True, False, "w", None, False),
        GangPhase.BINDS_SENT: (True, True, None, None, False),
        GangPhase.UNRESERVING: (True, True, None, "w", False),
        GangPhase.TEARDOWN: (False, False, None, "w", False),
        GangPhase.COMPLETING: (False, False, None, "w", True),
    }


# -- on a cluster: the bind path goes through its named steps ---------------------------------

PODS = "/api/v1/namespaces/default/pods"
QUEUES = "queues:\n  - {name: research, quota: {gpu: 64}, namespaces: [default]}\n"


def _member(name: str) -> dict:
    body = pod(name, 4, scheduler="usher")
    body["metadata"]["labels"] = {"usher/gang": "g", "usher/gang-size": "2"}
    return body


def _record_moves(sb: UsherOnSandbox) -> list[str]:
    """The phases gang default/g is moved to, in order, as the controller moves it."""
    moves: list[str] = []
    mirror = sb.usher.mirror
    real = mirror.move

    def move(gang: Gang, to: GangPhase, why: str | None = None) -> None:
        real(gang, to, why)
        if gang.key == "default/g":
            moves.append(str(to))

    mirror.move = move  # type: ignore[method-assign]
    return moves


async def _running(sb: UsherOnSandbox) -> bool:
    return len([p for p in await sb.pods("usher/gang=g") if p.get("status", {}).get("phase") == "Running"]) == 2


async def test_a_gang_is_reserved_then_its_binds_sent_then_it_runs(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    moves = _record_moves(sb)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))
    await sb.until(lambda: _running(sb), "the gang runs whole")
    await sb.usher.wait_idle()
    assert moves == ["reserved", "binds-sent", "idle"]
    assert not sb.usher.mirror.refused_moves


async def test_a_gang_whose_bind_fails_is_unreserved_then_torn_down(sb: UsherOnSandbox) -> None:
    await sb.create("/api/v1/nodes", node("gpu-0"))
    await sb.start_usher(sb.tmp, QUEUES)
    moves = _record_moves(sb)
    sb.server.inject(FaultKind.ERROR, method="POST", path="*/pods/g-1/binding", status=403, times=1)
    for i in range(2):
        await sb.create(PODS, _member(f"g-{i}"))

    async def rolled_back() -> bool:
        return await sb.get(f"{PODS}/g-0") is None and "idle" in moves[3:]

    await sb.until(rolled_back, "the pod that bound is evicted and the teardown over")
    # reserved, sent, one bind refused: the pod that bound is evicted while the task ends, then
    # the teardown goes on until it is gone
    assert moves[:5] == ["reserved", "binds-sent", "unreserving", "teardown", "idle"], moves
    assert not sb.usher.mirror.refused_moves
