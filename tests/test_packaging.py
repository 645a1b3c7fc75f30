"""Every package folder ships: pyproject's ``packages`` list names each folder with an
``__init__.py`` under the ``package-dir`` roots.

The list is explicit (usher's subpackages live beside ``src/usher``), so a new subpackage that
is not added installs nowhere: an editable install still finds it, a wheel does not, and the
user's ``import usher`` fails. This holds the list to the tree.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _packages_in_tree(package_dir: dict[str, str]) -> set[str]:
    found: set[str] = set()
    for name, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            if any(part.startswith((".", "__")) for part in relative.parts):
                continue
            found.add(".".join((name, *relative.parts)) if relative.parts else name)
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    in_tree = _packages_in_tree(setuptools["package-dir"])
    # a folder under one root that is itself another root (src/usher holds no engine/) counts once
    listed = set(setuptools["packages"])
    assert in_tree - listed == set(), "package folders missing from pyproject's packages"
    assert listed - in_tree == set(), "pyproject lists packages with no folder"
