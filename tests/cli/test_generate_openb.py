"""`usher generate --from openb`: the openb pods on the openb nodes at a chosen offered load.

A small trace folder in the shared layout stands in for the Alibaba files, so the figures here
are exact; what is measured is read back from the scenario file, never from the generator.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from usher.engine.scenario import Scenario, load_scenario

from usher.generate_openb import TICK, OpenbParams, generate_openb, read_openb

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
#: GPUs of the nodes ``trace_folder`` writes: 30 x 8 + 20 x 2
GPUS = 280
#: the QoS classes of ``trace_folder``'s pods, pod i the i-th modulo 5
QOS_ROTATION = ("LS", "BE", "LS", "Burstable", "Guaranteed")


def trace_folder(root: Path, pods: list[str] | None = None) -> Path:
    """``root/alibaba-gpu-v2023`` with 50 nodes and pods like openb's: shares, whole GPUs, CPU only."""
    folder = root / "alibaba-gpu-v2023"
    folder.mkdir(parents=True)
    nodes = [f"node-{i:02d},96000,393216,8,G2" for i in range(30)]
    nodes += [f"node-{i:02d},104000,524288,2,T4" for i in range(30, 50)]
    (folder / "openb_node_list_gpu_node.csv").write_text("\n".join([NODE_HEADER, *nodes]) + "\n")
    if pods is None:
        rng = random.Random(7)
        pods = []
        for i in range(400):
            gpu, milli = rng.choice([(1, 460), (1, 1000), (1, 810), (0, 0), (2, 1000), (8, 1000)])
            run = int(rng.lognormvariate(6.5, 2.0)) + 1  # median ~11 min, a tail of days
            spec = "G2" if i % 10 == 0 and gpu else ""
            qos = QOS_ROTATION[i % len(QOS_ROTATION)]
            pods.append(f"pod-{i:04d},{rng.choice([4000, 12000])},{rng.choice([12288, 49152])},{gpu},{milli},{spec},"
                        f"{qos},Running,{i * 100},{i * 100 + 5 + run},{i * 100 + 5}")
        pods.append("pod-never,4000,12288,1,1000,,LS,Pending,100,,")  # never scheduled: no run time
    (folder / "openb_pod_list_default.csv").write_text("\n".join([POD_HEADER, *pods]) + "\n")
    return root


def usher(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "USHER_TRACES": ""}
    return subprocess.run([sys.executable, "-m", "usher", *args], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def scenario(tmp_path: Path, params: OpenbParams) -> Scenario:
    folder = tmp_path / "t"
    if not folder.exists():
        trace_folder(folder)
    path = tmp_path / f"openb-{params.load}-{params.seed}-{params.days}-{params.max_runtime}.yaml"
    path.write_text(generate_openb(params, read_openb(folder)))
    return load_scenario(path)


def gpu_seconds(scenario: Scenario, lo: float, hi: float, *, arrivals_only: bool) -> float:
    """GPU-seconds the jobs ask for between ``lo`` and ``hi``: whole run times of the pods
    submitted after ``lo`` (arrivals), or every run's part inside the window (occupancy)."""
    total = 0.0
    for job in scenario.all_jobs():
        gpus = sum(p.count * p.gpu for p in job.pods)
        assert job.duration is not None
        if arrivals_only:
            total += gpus * job.duration if lo < job.submit <= hi else 0.0
        else:
            total += gpus * max(0.0, min(job.submit + job.duration, hi) - max(job.submit, lo))
    return total


@pytest.mark.parametrize("load", [0.7, 1.1])
def test_offered_gpu_load_is_the_target(tmp_path: Path, load: float) -> None:
    params = OpenbParams(load=load, seed=1, days=1.0, max_runtime=7200.0)
    made = scenario(tmp_path, params)
    window = 86400.0
    assert sum(n.gpus for n in made.all_nodes()) == GPUS
    # pods arriving in the window ask for load x the GPUs over it ...
    assert gpu_seconds(made, 0.0, window, arrivals_only=True) / (GPUS * window) == pytest.approx(load, rel=0.04)
    # ... and with the pods running at the start, the GPUs asked for at any time average the same
    assert gpu_seconds(made, 0.0, window, arrivals_only=False) / (GPUS * window) == pytest.approx(load, rel=0.04)
    running = [j for j in made.all_jobs() if j.submit == 0]
    assert len(running) > 20, "the replay starts with the pods that would be running then"


def test_run_times_are_capped_and_the_trace_kept(tmp_path: Path) -> None:
    made = scenario(tmp_path, OpenbParams(load=0.9, seed=2, days=0.5, max_runtime=3600.0))
    jobs = made.all_jobs()
    durations = [j.duration for j in jobs]
    assert max(durations) == 3600.0, "pods longer than the cap run for the cap"
    assert min(durations) >= TICK
    assert all(d % TICK == 0 and j.submit % TICK == 0 for j, d in zip(jobs, durations))
    assert all(0 <= j.submit < 0.5 * 86400 for j in jobs)
    # every pod is one of the trace's, its request kept: shares, whole GPUs, CPU only, models
    shapes = {(j.pods[0].gpu, j.pods[0].cpu, j.pods[0].memory // 2**20, tuple(j.pods[0].gpu_model)) for j in jobs}
    assert {g for g, *_ in shapes} == {0.46, 0.81, 1, 0, 2, 8}
    assert {c for _, c, _, _ in shapes} == {4000, 12000} and {m for *_, m, _ in shapes} == {12288, 49152}
    assert ("G2",) in {models for *_, models in shapes}
    assert not any(j.name.startswith("pod-never") for j in jobs), "the trace never ran it: no run time to draw"
    models = {n.name: n.gpu_model for n in made.all_nodes()}
    assert models["node-00"] == "G2" and models["node-49"] == "T4"


def test_priority_and_preemptibility_follow_the_pods_qos_class(tmp_path: Path) -> None:
    made = scenario(tmp_path, OpenbParams(load=0.9, seed=5, days=0.2))
    expected = {"LS": (100, False), "Guaranteed": (100, False), "Burstable": (50, False), "BE": (0, True)}
    seen = set()
    for job in made.all_jobs():
        number = int(job.name.split("-")[1])  # pod-0042-000017: the trace's pod-0042
        qos = QOS_ROTATION[number % len(QOS_ROTATION)]
        assert (job.priority, job.preemptible) == expected[qos], job.name
        seen.add(qos)
    assert seen == set(expected)


def test_an_unknown_qos_class_names_file_line_and_column(tmp_path: Path) -> None:
    trace_folder(tmp_path / "t", ["p1,4000,12288,1,460,,LS,Running,0,100,0", "p2,4000,12288,1,1000,,Gold,Running,0,100,0"])
    out = usher("generate", "--from", "openb", "--traces", "t", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "openb_pod_list_default.csv:3: qos: 'Gold' is not a QoS class" in out.stderr
    assert "LS, Guaranteed, Burstable, BE" in out.stderr


def test_same_parameters_give_the_same_file_and_the_seed_changes_it(tmp_path: Path) -> None:
    trace = read_openb(trace_folder(tmp_path))
    one = generate_openb(OpenbParams(load=0.9, seed=3, days=0.2), trace)
    assert one == generate_openb(OpenbParams(load=0.9, seed=3, days=0.2), trace)
    assert one != generate_openb(OpenbParams(load=0.9, seed=4, days=0.2), trace)


def test_command_writes_a_scenario_that_checks_and_replays(tmp_path: Path) -> None:
    trace_folder(tmp_path / "t")
    made = usher("generate", "--from", "openb", "--load", "0.9", "--seed", "1", "--days", "0.05",
                 "--max-runtime", "1h", "--traces", "t", "-o", "openb.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stderr.startswith("openb.yaml: 50 nodes, 1 queue, ")
    checked = usher("check", "openb.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "50 nodes, 280 GPUs, 1 queue" in checked.stdout
    replayed = usher("replay", "openb.yaml", "--no-ui", "--report", "r.json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (["--load", "0"], ["--load"]),
        (["--days", "-1", "--max-runtime", "5s"], ["--days", "--max-runtime"]),
        (["--nodes", "8", "--queues", "2"], ["--nodes", "--queues"]),
    ],
)
def test_bad_flags_are_bad_input_naming_the_flag(tmp_path: Path, args: list[str], flags: list[str]) -> None:
    trace_folder(tmp_path / "t")
    out = usher("generate", "--from", "openb", "--traces", "t", *args, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1
    assert all(flag in out.stderr for flag in flags)


def test_unknown_source_names_the_choices(tmp_path: Path) -> None:
    out = usher("generate", "--from", "philly", cwd=tmp_path)
    assert out.returncode == 2 and "--from" in out.stderr and "'llm', 'openb'" in out.stderr


def test_missing_trace_folder_names_the_file_and_the_flag(tmp_path: Path) -> None:
    out = usher("generate", "--from", "openb", "--traces", "nowhere", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1
    assert "nowhere/alibaba-gpu-v2023/openb_node_list_gpu_node.csv" in out.stderr and "--traces" in out.stderr


def test_malformed_pod_row_names_file_line_and_column(tmp_path: Path) -> None:
    trace_folder(tmp_path / "t", ["p1,4000,12288,1,460,,LS,Running,0,100,0", "p2,4000,12288,lots,1000,,LS,Running,0,100,0"])
    out = usher("generate", "--from", "openb", "--traces", "t", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "openb_pod_list_default.csv:3: num_gpu: expected a whole number (got 'lots')" in out.stderr
