"""One filter list for placing and explaining: what ``diagnose`` says fits is where the placer
places, node by node, and the cycle's memos can be dropped between cycles without changing a
decision.

The states are built by hand with a seeded generator: nodes of two GPU models, some cordoned or
failed, with extended resources, pod limits and host ports, partly used; pods of whole GPUs,
shares and none, with GPU models, node constraints and extras.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from usher.engine import core, memo
from usher.engine.controller import Controller
from usher.engine.policy.filters.registry import FILTERS, diagnose, never_fits
from usher.engine.policy.placement import Placer
from usher.engine.policy.registry import Scoring
from usher.engine.report import build_report
from usher.engine.scenario import parse_scenario
from usher.engine.state import MILLI, ClusterState, Node, PodGroup

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import workloads  # bench/ is not a package

PORT = "hostport:TCP/29500"


def random_state(rng: random.Random) -> ClusterState:
    state = ClusterState("filters", [], {})
    for i in range(40):
        gpus = rng.choice([0, 4, 8])
        node = Node(i, f"n{i}", {}, rng.choice(["A100", "H100"]), 0, gpus, [list(range(gpus))], rng.choice([16, 64]) * 1000,
                    rng.choice([64, 512]) << 30)
        node.extra = {"pods": rng.choice([2, 110])}
        if rng.random() < 0.4:
            node.extra["rdma/ib"] = rng.choice([1, 4])
        state.add_node(node)
    state.finish_building()
    for node in state.nodes:
        if node.gpu_count and rng.random() < 0.6:
            take = rng.sample(range(node.gpu_count), rng.randint(1, node.gpu_count))
            state.allocate(node, take[:-1], 0, 0, 0)
            state.allocate(node, take[-1:], rng.choice([250, 500]), 0, 0)
        extra = [("pods", rng.randint(0, 2))] + ([(PORT, 1)] if rng.random() < 0.3 else [])
        state.allocate(node, [], 0, rng.randint(0, 14) * 1000, rng.randint(0, 60) << 30, tuple(sorted(extra)))
        if rng.random() < 0.1:
            state.set_schedulable(node, cordoned=True)
        elif rng.random() < 0.05:
            state.set_schedulable(node, failed=True)
    return state


def random_pod(rng: random.Random, n_nodes: int) -> PodGroup:
    extra = [("pods", 1)]
    if rng.random() < 0.3:
        extra.append(("rdma/ib", rng.choice([1, 2])))
    if rng.random() < 0.3:
        extra.append((PORT, 1))
    return PodGroup(
        "p", 1, rng.choice([0, 250, 600, 1000, 2000, 4000, 8000]), rng.choice([0, 4, 32]) * 1000, rng.choice([0, 32]) << 30,
        rng.choice([None, frozenset({"H100"})]),
        eligible=rng.choice([None, frozenset(rng.sample(range(n_nodes), n_nodes // 3))]),
        extra=tuple(sorted(extra)),
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_placer_places_exactly_where_diagnose_says_a_pod_fits(seed: int) -> None:
    rng = random.Random(seed)
    state = random_state(rng)
    for _ in range(40):
        pod = random_pod(rng, len(state.nodes))
        fits = {node.id for node in state.nodes if diagnose(_one(state, node), pod) == {"fits": 1}}
        # node by node, through the hot path's checks
        placeable = {node.id for node in state.nodes if Placer(state, scoring=Scoring.FIRST_FIT).choose_node(pod, [node.id])}
        assert placeable == fits, pod
        # and over the whole cluster, through the capacity index
        for scoring in Scoring:
            chosen = Placer(state, scoring=scoring).choose_node(pod)
            assert (chosen.id in fits) if chosen is not None else not fits, (scoring, pod)


@pytest.mark.parametrize("seed", range(3))
def test_each_filter_explains_exactly_when_its_checks_fail(seed: int) -> None:
    rng = random.Random(seed)
    state = random_state(rng)
    for _ in range(60):
        pod = random_pod(rng, len(state.nodes))
        for node in state.nodes:
            for f in FILTERS:
                assert (f.why(node, pod) is None) == (f.ever(node, pod) and f.now(node, pod)), (f.name, node.name, pod)
            assert never_fits(node, pod) == any(not f.ever(node, pod) for f in FILTERS)


def test_a_taken_host_port_is_named_in_the_diagnosis() -> None:
    state = ClusterState("ports", [], {})
    for i in range(2):
        state.add_node(Node(i, f"n{i}", {}, "H100", 0, 8, [list(range(8))], 64_000, 512 << 30))
    state.finish_building()
    state.allocate(state.nodes[0], [], 0, 0, 0, ((PORT, 1),))
    pod = PodGroup("p", 1, MILLI, 0, 0, None, extra=((PORT, 1),))
    assert diagnose(state, pod) == {"TCP/29500 taken": 1, "fits": 1}
    assert Placer(state).choose_node(pod) is state.nodes[1]


def _one(state: ClusterState, node: Node) -> ClusterState:
    """A view of ``state`` with only ``node``, for ``diagnose`` (which walks ``state.nodes``)."""
    view = ClusterState.__new__(ClusterState)
    view.nodes = [node]
    return view


def _replay(text: str, policy: str, monkeypatch: pytest.MonkeyPatch, drop: bool) -> tuple[list[str], str]:
    with monkeypatch.context() as patch:
        if drop:
            run = core.run_cycle

            def forgetful(state, *args):  # type: ignore[no-untyped-def]
                memo.forget(state)
                return run(state, *args)

            patch.setattr(core, "run_cycle", forgetful)
        ctrl = Controller(parse_scenario(text, file="memo.yaml"), policy)
        lines: list[str] = []
        apply = ctrl.backend.apply

        def record(decisions, now):  # type: ignore[no-untyped-def]
            for d in decisions:
                where = [(p.pod, p.node_id, tuple(p.gpus), p.share) for p in d.placements]
                lines.append(f"{now} {d.kind} {d.job.name} {where} {d.reason} {d.by}")
            return apply(decisions, now)

        ctrl.backend.apply = record  # type: ignore[method-assign]
        while ctrl.step():
            state = ctrl.state
            lines.append(f"{ctrl.now} {sorted((j.name, str(j.pending_reason)) for j in state.jobs if j.submitted)} {state.reservation}")
        return lines, repr(build_report(ctrl))


@pytest.mark.parametrize("policy", ["usher", "kueue"])
def test_dropping_the_cycles_memos_between_cycles_changes_no_decision(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rack-required gangs, three priorities, queues that borrow and reclaim by preemption
    text = workloads.b2_busy(nodes=24, jobs=300, days=0.3, seed=3, load=2.0)
    kept = _replay(text, policy, monkeypatch, drop=False)
    dropped = _replay(text, policy, monkeypatch, drop=True)
    assert any(" evict " in line.lower() or "preempt" in line.lower() for line in kept[0])
    assert dropped == kept


def test_a_shared_pod_taking_a_fresh_gpu_still_needs_its_host_port_free() -> None:
    # no partly used GPU anywhere: the share takes the first slice of a whole GPU, on the node
    # whose port is free, not on the tighter node where another pod holds it
    state = ClusterState("ports", [], {})
    for i, gpus in enumerate((2, 8)):
        state.add_node(Node(i, f"n{i}", {}, "H100", 0, gpus, [list(range(gpus))], 64_000, 512 << 30))
    state.finish_building()
    state.allocate(state.nodes[0], [], 0, 0, 0, ((PORT, 1),))
    pod = PodGroup("p", 1, 500, 0, 0, None, extra=((PORT, 1),))
    assert Placer(state).choose_node(pod) is state.nodes[1]
