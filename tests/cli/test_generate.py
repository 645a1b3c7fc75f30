"""`usher generate`: synthetic LLM-cluster scenarios that load, replay and follow their parameters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from usher.engine.scenario import load_scenario
from usher.generate import GenerateParams, generate

RUNTIMES = [0, 30, 600, 1186, 3600, 7200, 20000, 90000, 400000]


def usher(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "usher", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=full
    )


def traces(root: Path, rows: list[str] | None = None) -> Path:
    """A traces folder holding a small run-time file in the shared layout."""
    folder = root / "philly-derived"
    folder.mkdir(parents=True)
    body = rows if rows is not None else [str(r) for r in RUNTIMES]
    (folder / "philly_runtime_from_alibaba_v2020_analysis.csv").write_text("runtime\n" + "\n".join(body) + "\n")
    return root


def test_generated_file_passes_check_and_replays(tmp_path: Path) -> None:
    traces(tmp_path / "t")
    made = usher("generate", "--nodes", "16", "--racks", "4", "--queues", "2", "--load", "0.7", "--days", "1",
                 "--traces", "t", "-o", "llm.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    checked = usher("check", "llm.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "16 nodes, 128 GPUs, 2 queues" in checked.stdout
    replayed = usher("replay", "llm.yaml", "--no-ui", "--report", "r.json", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr


def test_traces_folder_comes_from_the_environment_then_the_shared_default(tmp_path: Path) -> None:
    traces(tmp_path / "elsewhere")
    out = usher("generate", "--nodes", "8", "--racks", "2", "--days", "0.5", cwd=tmp_path,
                env={"USHER_TRACES": str(tmp_path / "elsewhere")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# usher generate --nodes 8")
    work = tmp_path / "work"
    work.mkdir()
    traces(tmp_path / "shared" / "traces")
    out = usher("generate", "--nodes", "8", "--racks", "2", "--days", "0.5", cwd=work, env={"USHER_TRACES": ""})
    assert out.returncode == 0, out.stderr


def test_missing_runtime_file_is_one_line_naming_the_path(tmp_path: Path) -> None:
    out = usher("generate", "--traces", "nowhere", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "nowhere/philly-derived/philly_runtime_from_alibaba_v2020_analysis.csv" in out.stderr
    assert "--traces" in out.stderr


def test_malformed_runtime_row_names_file_line_and_column(tmp_path: Path) -> None:
    traces(tmp_path / "t", ["60", "120", "soon"])
    out = usher("generate", "--traces", "t", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "philly_runtime_from_alibaba_v2020_analysis.csv:4: column runtime" in out.stderr
    assert "'soon'" in out.stderr


def test_bad_parameters_are_bad_input(tmp_path: Path) -> None:
    traces(tmp_path / "t")
    out = usher("generate", "--traces", "t", "--nodes", "4", "--racks", "9", "--load", "-1", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--racks" in out.stderr and "--load" in out.stderr


def _scenario(tmp_path: Path, params: GenerateParams):
    path = tmp_path / f"s{params.seed}-{params.load}.yaml"
    path.write_text(generate(params, [float(r) for r in RUNTIMES]))
    return load_scenario(path)


def test_same_parameters_give_the_same_file_and_the_seed_changes_it() -> None:
    runtimes = [float(r) for r in RUNTIMES]
    one = generate(GenerateParams(seed=3, days=1), runtimes)
    assert one == generate(GenerateParams(seed=3, days=1), runtimes)
    assert one != generate(GenerateParams(seed=4, days=1), runtimes)


@pytest.mark.parametrize("load", [0.5, 1.2])
def test_offered_work_matches_the_load(tmp_path: Path, load: float) -> None:
    params = GenerateParams(nodes=32, racks=4, load=load, days=2, seed=1)
    scenario = _scenario(tmp_path, params)
    jobs = scenario.all_jobs()
    capacity = 32 * 8 * 2 * 86400
    work = [j.pods[0].count * j.pods[0].gpu * j.duration for j in jobs]
    # Jobs are drawn until the work reaches the target: at least it, and less than one job more.
    assert load * capacity <= sum(work) < load * capacity + max(work)
    assert all(0 <= j.submit < 2 * 86400 for j in jobs)
    assert all(60 <= j.duration <= 86400 for j in jobs)


def test_gangs_have_topology_needs_up_to_256_gpus(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, GenerateParams(nodes=64, racks=8, seed=0, days=7))
    racks = {n.labels["usher/rack"] for n in scenario.all_nodes()}
    blocks = {n.labels["usher/block"] for n in scenario.all_nodes()}
    assert len(racks) == 8 and len(blocks) == 2
    sizes = set()
    for job in scenario.all_jobs():
        pod = job.pods[0]
        gpus = int(pod.count * pod.gpu)
        sizes.add(gpus)
        if pod.count == 1:
            assert pod.topology is None
        elif pod.count <= 8:  # fits one rack of 8 nodes
            assert pod.topology.required == "usher/rack"
        else:
            assert pod.topology.preferred == "usher/block"
    assert max(sizes) == 256 and {1, 8, 16, 64, 128} <= sizes


def test_small_cluster_gets_no_gang_bigger_than_half_of_it(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, GenerateParams(nodes=8, racks=2, seed=2, days=3))
    assert max(j.pods[0].count * j.pods[0].gpu for j in scenario.all_jobs()) <= 32
