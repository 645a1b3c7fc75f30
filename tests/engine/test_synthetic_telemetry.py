"""The replay's synthetic telemetry: busy where allocated, per-job profiles, silent when failed."""

from __future__ import annotations

import textwrap

from usher.engine.controller import Controller
from usher.engine.scenario import parse_scenario
from usher.engine.synthetic_telemetry import SyntheticTelemetry, board_power, profile_of
from usher.engine.telemetry import Metric, TelemetryStore

SCENARIO = """
name: telemetry
nodes:
  - {name: a, gpus: 4, gpuModel: H100, gpuMemory: 80Gi, cpu: 64, memory: 512Gi}
  - {name: b, gpus: 4, gpuModel: A100, gpuMemory: 40Gi, cpu: 64, memory: 512Gi}
queues:
  - {name: q}
jobs:
  - {name: train, queue: q, duration: 2h, pods: [{count: 1, gpu: 2, cpu: 8}]}
  - {name: nb-1, queue: q, submit: 1m, duration: 2h, pods: [{count: 1, gpu: 0.5}]}
  - {name: nb-2, queue: q, submit: 1m, duration: 2h, pods: [{count: 1, gpu: 0.5}]}
events:
  - {at: 30m, action: fail, node: b}
"""


def watched(seed: int = 0, until: float | None = None) -> Controller:
    ctrl = Controller(parse_scenario(textwrap.dedent(SCENARIO), file="t.yaml"), seed=seed, until=until)
    ctrl.subscribe(lambda snap: None)  # a watcher: what makes the controller sample
    return ctrl


def placements(ctrl: Controller, job: str) -> list[tuple[str, int]]:
    st = ctrl.state
    run = st.job(job).current_run
    assert run is not None
    return [(st.nodes[p.node_id].name, g) for p in run.placements for g in p.gpus]


def step_to(ctrl: Controller, t: float) -> None:
    while (nxt := ctrl.next_time()) is not None and nxt <= t:
        ctrl.step()


def sample_at(ctrl: Controller, t: float) -> None:
    """Advance the simulated clock to ``t`` and publish, as the console's loop does between moments."""
    ctrl._advance(t)
    ctrl._publish()


def test_allocated_gpus_are_busy_and_the_rest_idle():
    ctrl = watched()
    step_to(ctrl, 60.0)
    sample_at(ctrl, 600.0)
    store = ctrl.telemetry
    busy = set(placements(ctrl, "train"))
    assert len(busy) == 2
    for node in ("a", "b"):
        for gpu in range(4):
            util = store.value(node, gpu, Metric.UTILIZATION, 600.0)
            memory = store.value(node, gpu, Metric.MEMORY, 600.0)
            shared = (node, gpu) in set(placements(ctrl, "nb-1")) | set(placements(ctrl, "nb-2"))
            if (node, gpu) in busy:
                assert util is not None and util > 0.3 and memory is not None and memory > 0.3
            elif not shared:
                assert util == 0.0 and memory == 0.0
    sample = store.latest(*next(iter(busy)))
    assert sample is not None and sample.healthy is True
    assert sample.temperature is not None and sample.temperature > 40.0
    assert sample.power is not None and sample.power > 0.1 * board_power("H100")


def test_two_half_shares_on_one_gpu_add_up():
    ctrl = watched()
    step_to(ctrl, 60.0)
    [(node1, gpu1)] = placements(ctrl, "nb-1")
    [(node2, gpu2)] = placements(ctrl, "nb-2")
    assert (node1, gpu1) == (node2, gpu2), "the second share goes onto the already shared GPU"
    sample_at(ctrl, 900.0)
    shared = ctrl.telemetry.value(node1, gpu1, Metric.UTILIZATION, 900.0)
    one = profile_of("nb-1", 0).utilization / 100 / 2
    other = profile_of("nb-2", 0).utilization / 100 / 2
    # each share contributes about half its profile (give or take its swing)
    assert abs(shared - (one + other)) < 0.16


def test_a_run_ramps_up_after_it_starts():
    ctrl = watched()
    step_to(ctrl, 0.0)
    sample_at(ctrl, 30.0)
    node, gpu = placements(ctrl, "train")[0]
    early = ctrl.telemetry.value(node, gpu, Metric.UTILIZATION, 30.0)
    sample_at(ctrl, 600.0)
    later = ctrl.telemetry.value(node, gpu, Metric.UTILIZATION, 600.0)
    assert early is not None and later is not None and early < later


def test_a_failed_nodes_gpus_turn_stale_not_idle():
    ctrl = watched()
    step_to(ctrl, 60.0)
    sample_at(ctrl, 1200.0)
    assert not ctrl.telemetry.is_stale("b", 0, 1200.0)
    step_to(ctrl, 1800.0)  # node b fails
    assert ctrl.state.node("b").failed
    for t in (1900.0, 2000.0, 2100.0, 2200.0):
        sample_at(ctrl, t)
    assert ctrl.telemetry.is_stale("b", 0, 2200.0)
    assert ctrl.telemetry.value("b", 0, Metric.UTILIZATION, 2200.0) is None
    assert ctrl.telemetry.value("a", 3, Metric.UTILIZATION, 2200.0) is not None


def test_the_same_seed_draws_the_same_pictures_and_another_seed_others():
    def utilizations(seed: int) -> list[float | None]:
        ctrl = watched(seed)
        step_to(ctrl, 60.0)
        sample_at(ctrl, 700.0)
        return [ctrl.telemetry.value(n, g, Metric.UTILIZATION, 700.0) for n in "ab" for g in range(4)]

    assert utilizations(0) == utilizations(0)
    assert utilizations(0) != utilizations(1)


def test_rounds_are_at_most_one_per_interval_and_thin_out_at_high_speed():
    store = TelemetryStore()
    ctrl = watched()
    source = SyntheticTelemetry(store, interval=30.0)
    assert source.sample(ctrl.state, 0.0)
    assert not source.sample(ctrl.state, 10.0), "within the interval: no new round"
    assert source.sample(ctrl.state, 30.0)
    assert len(store.history("a", 0, Metric.POWER)) == 2
    # at 600 simulated seconds per wall second, two rounds per wall second at most
    assert not source.sample(ctrl.state, 100.0, speed=600.0)
    assert source.sample(ctrl.state, 330.0, speed=600.0)
    assert store.stale_after >= 300.0, "a GPU is not stale between two rounds"


def test_a_headless_replay_records_no_telemetry():
    ctrl = Controller(parse_scenario(textwrap.dedent(SCENARIO), file="t.yaml"))
    ctrl.run_to_end()
    assert ctrl.telemetry.gpus() == []


def test_board_power_reads_the_model_names_people_and_nvml_use():
    assert board_power("H100") == board_power("NVIDIA H100 80GB HBM3") == 700.0
    assert board_power("NVIDIA A100-SXM4-80GB") == 400.0
    assert board_power("") == board_power("Mystery GPU") == 400.0


def test_gpus_held_by_a_gang_waiting_for_its_other_pods_are_allocated_but_idle():
    text = """
    name: held
    nodes:
      - {name: a, gpus: 8, gpuModel: H100, gpuMemory: 80Gi}
      - {name: b, gpus: 8, gpuModel: H100, gpuMemory: 80Gi}
    queues: [{name: q}]
    jobs:
      - {name: blocker, queue: q, duration: 10h, pods: [{count: 1, gpu: 8}]}
      - {name: gang, queue: q, submit: 1m, duration: 2h, pods: [{count: 2, gpu: 8}]}
    """
    ctrl = Controller(parse_scenario(textwrap.dedent(text), file="t.yaml"), "kube-default")
    ctrl.subscribe(lambda snap: None)
    step_to(ctrl, 60.0)
    held = ctrl.state.job("gang")
    assert held.incomplete_gang, "kube-default binds the pod that fits and holds it"
    sample_at(ctrl, 900.0)
    [(node, _)] = {(n, 0) for n, _ in placements(ctrl, "gang")}
    for gpu in range(8):
        assert ctrl.telemetry.value(node, gpu, Metric.UTILIZATION, 900.0) == 0.0
        memory = ctrl.telemetry.value(node, gpu, Metric.MEMORY, 900.0)
        assert memory is not None and 0.0 < memory < 0.1
    blocker_node, blocker_gpu = placements(ctrl, "blocker")[0]
    assert ctrl.telemetry.value(blocker_node, blocker_gpu, Metric.UTILIZATION, 900.0) > 0.3
