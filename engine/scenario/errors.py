"""Problems found in a scenario file, and the exception that carries all of them.

A `Problem` names the file, the YAML path in the contract's style (`jobs[3].pods[0].gpu`) and,
where known, the line, so `usher check` can print every mistake at once and exit 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

PathSegment = str | int
"""One step of a YAML path: a mapping key or a sequence index."""


@dataclass(frozen=True)
class Problem:
    """One mistake in a scenario (or in a trace file it imports)."""

    file: str
    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.path:
            return f"{where}: {self.path}: {self.message}"
        return f"{where}: {self.message}"


class ScenarioError(Exception):
    """A scenario that cannot be used; `problems` lists every mistake found, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


class FieldIssues(ValueError):
    """Raised by model validators that check several fields together.

    Each issue names the field (by its YAML name) that is wrong, so the loader can point at
    that field's line instead of at the whole mapping.
    """

    def __init__(self, issues: Sequence[tuple[str, str]]) -> None:
        self.issues: list[tuple[str, str]] = list(issues)
        super().__init__("; ".join(f"{field}: {message}" for field, message in self.issues))


def format_path(segments: Sequence[PathSegment]) -> str:
    """Render path segments as `jobs[3].pods[0].gpu` (odd keys as `labels["usher/rack"]`)."""
    out: list[str] = []
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _plain_key(seg):
            out.append(f".{seg}" if out else seg)
        else:
            out.append(f'["{seg}"]')
    return "".join(out)


def _plain_key(key: str) -> bool:
    return bool(key) and all(c.isalnum() or c in "_-" for c in key)


@dataclass(frozen=True)
class Locator:
    """Makes `Problem`s for one scenario file, finding the line of a YAML path."""

    file: str
    line_of: Callable[[Sequence[PathSegment]], int | None]

    def problem(self, path: Sequence[PathSegment], message: str) -> Problem:
        return Problem(self.file, format_path(path), self.line_of(path), message)
