"""``usher bench fgd``: arrivals, the policies' choices, the engine's placement, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from usher.cli import main
from usher.engine.policy.fragmentation import FragmentationModel, PodDemand
from usher.fgd.arrivals import arrival_order
from usher.fgd.cluster import ClusterArrays
from usher.fgd.engine_policy import EnginePlacement
from usher.fgd.metrics import Timeline, curve
from usher.fgd.policies import CHOOSERS, PolicyName
from usher.fgd.runner import run_seed
from usher.fgd.workload import load_workload

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-gpu-v2023"
needs_openb = pytest.mark.skipif(not OPENB.is_dir(), reason=f"trace files not found at {OPENB}")

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


def _files(tmp_path: Path, nodes: str, pods: str) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODE_HEADER + nodes)
    (tmp_path / "pods.csv").write_text(POD_HEADER + pods)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def _two_nodes(tmp_path: Path) -> tuple[Path, Path]:
    return _files(
        tmp_path,
        "a,32000,65536,2,T4\nb,32000,65536,2,T4\n",
        "p1,4000,1024,1,1000\np2,4000,1024,1,500\np3,4000,1024,1,500\np4,2000,1024,0,0\np5,4000,1024,2,1000\n",
    )


def test_arrivals_are_shuffled_by_seed_and_tuned_to_the_target(tmp_path: Path) -> None:
    nodes, pods = load_workload(*_two_nodes(tmp_path))
    order = arrival_order(pods, nodes.total_gpus, seed=1, target=1.3)
    requested = sum(pods.gpu_milli(i) for i in order)
    assert requested <= 1.3 * 4 * 1000
    assert order == arrival_order(pods, nodes.total_gpus, seed=1, target=1.3)
    assert {tuple(arrival_order(pods, nodes.total_gpus, seed=s)) for s in range(8)} != {tuple(order)}
    # Above the target, pods are dropped until it holds.
    cut = arrival_order(pods, nodes.total_gpus, seed=1, target=0.5)
    assert sum(pods.gpu_milli(i) for i in cut) <= 2000 and len(cut) < len(pods.names)


def test_bestfit_packs_and_fgd_fills_the_half_used_gpu(tmp_path: Path) -> None:
    nodes, pods = load_workload(*_two_nodes(tmp_path))
    model = FragmentationModel.from_demands(pods.demands)
    rng = np.random.default_rng(0)
    for policy in (PolicyName.BESTFIT, PolicyName.FGD):
        cluster = ClusterArrays(nodes, model, order_seed=0)
        half = PodDemand(4000, 500, 1)
        node, slots = CHOOSERS[policy](cluster, half, 1024, rng)
        cluster.take(node, slots, half, 1024)
        # The second half-GPU pod goes onto the same GPU: no GPU is left half used.
        again = CHOOSERS[policy](cluster, half, 1024, rng)
        assert again == (node, slots), policy


def test_engine_placement_shares_the_gpu_the_workload_cannot_use_otherwise(tmp_path: Path) -> None:
    nodes, pods = load_workload(*_two_nodes(tmp_path))
    model = FragmentationModel.from_demands(pods.demands)
    cluster = ClusterArrays(nodes, model, order_seed=0)
    usher = EnginePlacement(nodes, pods, cluster)
    rng = np.random.default_rng(0)
    first = usher.place(1, rng)  # p2, a half GPU
    assert first is not None
    cluster.take(first[0], first[1], pods.demands[1], 1024)
    second = usher.place(2, rng)  # p3, another half GPU
    assert second == first
    # The engine's own state agrees: one GPU is full, the other three whole.
    frees = sorted(f for n in usher.state.nodes for f in n.gpu_free)
    assert frees == [0, 1000, 1000, 1000]


def test_a_pod_that_fits_nowhere_stays_unplaced(tmp_path: Path) -> None:
    # The CPU-only pod asks for more CPU than any node has; tuning to 130% keeps at least one.
    nodes, pods = load_workload(*_files(tmp_path, "a,8000,8192,1,T4\n", "hog,16000,1024,0,0\nok,4000,1024,1,1000\n"))
    model = FragmentationModel.from_demands(pods.demands)
    for policy in PolicyName:
        result = run_seed(policy, 3, nodes, pods, model)
        assert result.placed >= 1 and result.unplaced >= 1, policy
        assert result.alloc100 == 100.0  # the one GPU is taken


def test_curve_averages_the_arrivals_that_round_to_each_percent() -> None:
    timeline = Timeline.empty()
    for arrived, allocated in ((900, 900), (1000, 950), (1004, 960), (1300, 1000)):
        timeline.record(arrived, allocated, 0.0)
    values = curve(timeline, timeline.allocated, 1000)
    assert values[100] == pytest.approx((95.0 + 96.0) / 2)
    assert values[90] == pytest.approx(90.0)
    assert values[95] is None


def test_command_prints_json_for_every_policy_and_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Tenth-of-a-GPU pods: the tuned arrivals reach exactly 130% of the four GPUs.
    nodes_csv, pods_csv = _files(tmp_path, "a,32000,65536,2,T4\nb,32000,65536,2,T4\n",
                                 "".join(f"s{i},1000,1024,1,100\n" for i in range(20)))
    code = main(["bench", "fgd", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--seeds", "1-2",
                 "--policy", "bestfit", "usher", "--json", "--jobs", "1"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"bestfit", "usher"}
    for figures in out["policies"].values():
        assert set(figures["seeds"]) == {"1", "2"}
        assert figures["alloc130"] == 100.0  # 5.2 GPUs asked of 4: the cluster ends full
        assert figures["alloc100"] == pytest.approx(100.0, abs=1.0) and figures["frag90"] >= 0


def test_command_reports_a_bad_row_with_file_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv, pods_csv = _files(tmp_path, "a,32000,65536,2,T4\n", "p1,4000,1024,1,1000\np2,lots,1024,1,500\n")
    code = main(["bench", "fgd", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--seeds", "1"])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"{pods_csv}:3: cpu_milli: expected a whole number (got 'lots')"


def test_command_refuses_bad_seeds_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv, pods_csv = _two_nodes(tmp_path)
    assert main(["bench", "fgd", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--seeds", "9-3"]) == 2
    assert capsys.readouterr().err.strip() == "usher: --seeds: range '9-3' ends before it starts"
    assert main(["bench", "fgd", "--pods", str(tmp_path / "none.csv"), "--nodes", str(nodes_csv)]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'none.csv'}: no such file"


@needs_openb
def test_harness_reproduces_the_paper_on_the_default_trace() -> None:
    """BestFit and FGD at 130% arrived within 0.5 points of the paper's 93.08% and 95.39%."""
    nodes, pods = load_workload(OPENB / "openb_node_list_gpu_node.csv", OPENB / "openb_pod_list_default.csv")
    model = FragmentationModel.from_demands(pods.demands)
    for policy, paper in ((PolicyName.BESTFIT, 93.08), (PolicyName.FGD, 95.39)):
        runs = [run_seed(policy, seed, nodes, pods, model) for seed in range(42, 52)]
        assert abs(np.mean([r.alloc130 for r in runs]) - paper) <= 0.5, policy
