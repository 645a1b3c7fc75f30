"""usher's import contracts (``.importlinter``) hold: no circles, the engine's layers, a core
without I/O, a console that reaches controllers only through their contract.

import-linter reads a package from its folder, and usher's subpackages live beside ``src/usher``
(pyproject's ``package-dir``: ``engine/`` is ``usher.engine``, ``sandbox/`` is ``usher.sandbox``,
...), so the test lays out a tree of links shaped as the installed package and runs
``lint-imports`` on it. By hand, the same::

    python tests/test_import_contracts.py    # builds the tree in a temporary folder and lints it
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import grimp

from import_circles import circles

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def package_tree(into: Path) -> Path:
    """Links under ``into``/usher laid out as the installed ``usher`` package; returns ``into``."""
    dirs: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = into / "usher"
    top.mkdir()
    for entry in (ROOT / dirs["usher"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in dirs.items():
        if name == "usher":
            continue
        parent, _, leaf = name.rpartition(".")
        assert parent == "usher", f"package-dir {name!r}: only usher's direct subpackages are laid out"
        link = top / leaf
        assert not link.exists(), f"package-dir {name!r}: src/usher already has {leaf}"
        link.symlink_to(ROOT / folder)
    return into


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``.importlinter``, finding usher in ``tree`` and the circle contract in tests/."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(TESTS)])}
    # lint-imports' own entry point, run by this interpreter wherever the script was installed
    run_cli = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", run_cli, str(ROOT / ".importlinter"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=240,
    )


def test_import_contracts_hold(tmp_path: Path) -> None:
    done = lint(package_tree(tmp_path))
    assert done.returncode == 0, f"lint-imports found broken import contracts:\n{done.stdout}\n{done.stderr}"
    contracts = (ROOT / ".importlinter").read_text().count("[importlinter:contract:")
    assert f"Contracts: {contracts} kept, 0 broken." in done.stdout, done.stdout


def test_the_circle_contract_names_every_module_of_a_circle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.state", "p.cycle"), ("p.cycle", "p.policy.quota"), ("p.policy.quota", "p.state"),
                               ("p.cli", "p.state"), ("p.a", "p.b"), ("p.b", "p.a"), ("q.x", "q.y"), ("q.y", "q.x")]:
        graph.add_import(importer=importer, imported=imported)
    assert sorted(circles(graph, {"p"})) == [["p.a", "p.b"], ["p.cycle", "p.policy.quota", "p.state"]]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        result = lint(package_tree(Path(folder)))
        print(result.stdout, result.stderr, sep="")
        sys.exit(result.returncode)
