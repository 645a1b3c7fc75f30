"""bench/compare.py: what it accepts, how it orders its runs, and the arithmetic of its report.
(Nothing here times anything.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_scripts import load

compare = load("compare")


def test_an_unknown_benchmark_is_refused_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compare.parse_args(["HEAD", "b1", "b2-bsy"])
    err = capsys.readouterr().err
    assert "BENCH: unknown benchmark 'b2-bsy'" in err
    assert "b2-busy" in err and "contention" in err and "kube:binds" in err


def test_repeats_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compare.parse_args(["HEAD", "--repeats", "0"])
    assert "--repeats: 0 is not a positive number of runs" in capsys.readouterr().err


def test_arguments_and_their_defaults() -> None:
    args = compare.parse_args(["HEAD~2", "b2-busy", "kube:binds", "--repeats", "5", "--decisions", "none"])
    assert (args.base, args.benches, args.repeats, args.decisions, args.head) == ("HEAD~2", ["b2-busy", "kube:binds"], 5, "none", None)
    args = compare.parse_args(["HEAD"])
    assert (args.benches, args.repeats, args.decisions) == (["b1"], 3, compare.Decisions.QUICK)


def test_a_bad_base_is_an_error_naming_it() -> None:
    with pytest.raises(compare.CompareError, match="BASE: 'no-such-commit' is not a commit"):
        compare.resolve("no-such-commit", "BASE")
    assert len(compare.resolve("HEAD", "BASE")) == 40


def test_the_sides_take_turns_going_first() -> None:
    assert compare.order(3) == [("base", 0), ("head", 0), ("head", 1), ("base", 1), ("base", 2), ("head", 2)]


def test_table_rows_take_each_rows_first_number() -> None:
    output = "\n".join([
        "# usher /x/src/usher engine /x/engine",
        "| benchmark | result |",
        "|---|---|",
        "| B1 first cycle | 1.25 s, 9,032 jobs placed |",
        "| B1 placement rate | 18,075 pods/s |",
        "| contention busy/quiet (B2 at 1.3x against 1.0x) | 2.50x CPU, 2.4x wall |",
        "| a row without figures | none |",
    ])
    assert compare.table_rows(output) == {
        "B1 first cycle [s]": 1.25,
        "B1 placement rate [pods/s]": 18075.0,
        "contention busy/quiet (B2 at 1.3x against 1.0x) [x CPU]": 2.5,
    }


def test_summary_gives_medians_and_head_over_base(tmp_path: Path) -> None:
    def side(name: str, cpus: list[float], cycles: list[str]) -> object:
        s = compare.Side(name, tmp_path, "c0ffee", tmp_path)
        s.runs = [{"cpu": c, "wall": 2 * c} for c in cpus]
        s.outputs = [f"| B1 first cycle | {c} s |" for c in cycles]
        return s

    base = side("base", [10.0, 30.0, 20.0], ["1.0", "3.0", "2.0"])
    head = side("head", [5.0, 15.0, 10.0], ["0.5", "0.75", "9.0"])
    lines = compare.summary([base, head])
    assert "| whole run, cpu s | 20.00 | 10.00 | 0.50 |" in lines
    assert "| whole run, wall s | 40.00 | 20.00 | 0.50 |" in lines
    assert "| B1 first cycle [s] | 2 | 0.75 | 0.38 |" in lines


def test_a_ratio_over_nothing_is_not_given() -> None:
    assert compare.ratio(3.0, 0.0) is None and compare.fmt_ratio(None) == "n/a"
    assert compare.ratio(3.0, 2.0) == 1.5


def test_the_package_folder_follows_the_trees_package_dir(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for folder in ("src/usher", "engine", "sandbox"):
        (tree / folder).mkdir(parents=True)
    (tree / "src/usher/__init__.py").write_text("")
    (tree / "src/usher/cli.py").write_text("")
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = {"usher" = "src/usher", "usher.engine" = "engine", "usher.sandbox" = "sandbox"}\n'
    )
    compare.link_package(tree, tmp_path / "pkg")
    usher = tmp_path / "pkg" / "usher"
    assert sorted(p.name for p in usher.iterdir()) == ["__init__.py", "cli.py", "engine", "sandbox"]
    assert (usher / "engine").resolve() == (tree / "engine").resolve()
    assert (usher / "cli.py").resolve() == (tree / "src/usher/cli.py").resolve()
