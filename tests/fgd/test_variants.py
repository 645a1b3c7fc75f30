"""The paper's workload variants (``usher bench fgd --workload``): what each name promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from usher.cli import main
from usher.fgd.variants import (
    DEFAULT_POD_FILE,
    NODE_FILE,
    WORKLOADS,
    Family,
    build,
    defining_percent,
    gpu_request,
    is_constrained,
    is_gpu,
    pods_file,
    read_node_shapes,
    read_rows,
    spec_fits,
)

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-gpu-v2023"
needs_openb = pytest.mark.skipif(not OPENB.is_dir(), reason=f"trace files not found at {OPENB}")

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"

BUILT = [w for w in WORKLOADS.values() if w.family != Family.PUBLIC]


@pytest.fixture(scope="module")
def default_rows() -> list[dict[str, str]]:
    return read_rows(OPENB / DEFAULT_POD_FILE)


@needs_openb
@pytest.mark.parametrize("workload", BUILT, ids=lambda w: w.name)
def test_each_variant_has_what_its_name_says(workload, default_rows) -> None:
    rows = build(default_rows, workload.family, workload.percent, workload.name, read_node_shapes(OPENB / NODE_FILE))
    assert defining_percent(rows, workload.family) == pytest.approx(workload.percent, abs=1.0)
    assert [r["name"] for r in rows] == [f"openb-pod-{i:04d}" for i in range(len(rows))]
    # Only what the family varies changes: the other pods are the default's.
    gpu = [r for r in rows if is_gpu(r)]
    default_gpu = [r for r in default_rows if is_gpu(r)]
    if workload.family == Family.CPU:
        assert [gpu_request(r) for r in gpu] == [gpu_request(r) for r in default_gpu]
    if workload.family == Family.GPUSHARE:
        assert len(gpu) == len(default_gpu) and len(rows) == len(default_rows)
    if workload.family == Family.GPUSPEC:
        assert [gpu_request(r) for r in rows] == [gpu_request(r) for r in default_rows]


@needs_openb
def test_the_built_gpushare40_and_multigpu20_match_the_public_lists(default_rows) -> None:
    for name, family, percent in (("gpushare40", Family.GPUSHARE, 40.0), ("multigpu20", Family.MULTIGPU, 20.0)):
        public = read_rows(OPENB / f"openb_pod_list_{name}.csv")
        built = build(default_rows, family, percent, name)
        assert defining_percent(built, family) == pytest.approx(defining_percent(public, family), abs=0.5), name
        assert len(built) == pytest.approx(len(public), rel=0.01), name
        assert sum(not is_gpu(r) for r in built) == sum(not is_gpu(r) for r in public), name
        total = sum(map(gpu_request, built))
        assert total == pytest.approx(sum(map(gpu_request, public)), rel=0.01), name


@needs_openb
def test_constrained_pods_get_model_sets_some_node_can_hold(default_rows) -> None:
    nodes = read_node_shapes(OPENB / NODE_FILE)
    rows = build(default_rows, Family.GPUSPEC, 33.0, "gpuspec33", nodes)
    constrained = [r for r in rows if is_constrained(r)]
    assert constrained and all(spec_fits(r["gpu_spec"], r, nodes) for r in constrained)
    assert len({r["gpu_spec"] for r in constrained}) > 3


@needs_openb
def test_a_variant_is_the_same_file_every_time(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("gpushare80", "cpu250", "gpuspec20", "multigpu40"):
        first = pods_file(name, OPENB, tmp_path / "a").read_bytes()
        assert first == pods_file(name, OPENB, tmp_path / "b").read_bytes(), name
    assert pods_file("default", OPENB, tmp_path) == OPENB / DEFAULT_POD_FILE


def _traces(tmp_path: Path) -> Path:
    """A tiny trace folder: two T4 nodes and a default list of shares, whole GPUs and CPU pods."""
    openb = tmp_path / "traces" / "alibaba-gpu-v2023"
    openb.mkdir(parents=True)
    (openb / NODE_FILE).write_text(NODE_HEADER + "a,32000,65536,2,T4\nb,32000,65536,2,T4\n")
    pods = "".join(f"s{i},1000,1024,1,100,\n" for i in range(10)) + "w,2000,1024,1,1000,\nm,2000,1024,2,1000,\n"
    (openb / DEFAULT_POD_FILE).write_text(POD_HEADER + pods + "c,1000,1024,0,0,\n")
    return tmp_path / "traces"


def test_workload_runs_a_variant_from_the_traces_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "fgd", "--workload", "gpushare80", "--traces", str(_traces(tmp_path)), "--seeds", "1-2",
                 "--policy", "fgd", "usher", "--json", "--jobs", "1"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"fgd", "usher"}
    lead = out["lead"]["usher-fgd"]
    assert set(lead) == {"alloc100", "alloc130", "frag90"}
    assert all({"mean", "sd", "beyond_paired_sd", "beyond_each_sd"} <= set(v) for v in lead.values())


def test_the_table_ends_with_the_paired_lead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fgd", "--workload", "cpu250", "--traces", str(_traces(tmp_path)), "--seeds", "1-2",
                 "--policy", "fgd", "usher", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "| fgd |" in out and "| usher |" in out
    assert "usher - fgd, paired over 2 seeds" in out


def test_unknown_workload_lists_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "fgd", "--workload", "gpushare70"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'gpushare70'" in err and "'gpushare80'" in err and "'cpu050'" in err
    assert "Traceback" not in err


def test_pods_and_workload_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "fgd", "--workload", "default", "--pods", "p.csv", "--nodes", "n.csv"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_pods_without_nodes_and_a_missing_traces_folder_are_clear_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fgd", "--pods", str(tmp_path / "p.csv")]) == 2
    assert capsys.readouterr().err.strip() == "usher: --nodes is required with --pods"
    assert main(["bench", "fgd", "--workload", "gpushare60", "--traces", str(tmp_path)]) == 2
    missing = tmp_path / "alibaba-gpu-v2023" / DEFAULT_POD_FILE
    assert capsys.readouterr().err.strip() == f"usher: {missing}: no such file"
