"""A ConfigMap usher refused, with every error in it, said whole wherever an operator looks.

usher reads two ConfigMaps an operator edits by hand (the queues, the operators' decisions) and
keeps the last good one when an edit cannot be read. The operator then needs every error with its
place, not the first line of a log message: ``kubectl describe configmap`` shows the Event on it,
``kubectl get events`` its message on one line, the console a panel where the queues are. So a
refusal is kept as data (which ConfigMap, what usher does meanwhile, each error with its line and
path) and said three ways:

- ``text()``: a head line and one line per error, for the log and the console;
- ``event_message()``: one line, every error after the head separated by ``; ``, at most
  ``NOTE_LENGTH_LIMIT`` bytes: kube-apiserver refuses a longer note from the events.k8s.io API
  and kube's own components cut theirs to it, so a message that does not fit keeps the errors
  that do and says how many more there are (the log has them all);
- ``errors``: the errors themselves, for the console to list.

A scenario problem is written ``line 3: queues[0].qouta: unknown field``: the ConfigMap and its
key are said once, in the head.

It is plain data with no I/O, below the controllers, so the console's contract
(``contract.ConsoleController.config_refusals``) can name it for a replay (which has none) as well
as for the cluster controller that fills it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .scenario.errors import Problem

NOTE_LENGTH_LIMIT = 1024
"""Bytes: the most an Event's message may hold (kube-apiserver's NoteLengthLimit)."""
CUT = "…"


def problem_words(problem: Problem) -> str:
    """A problem without its file, which the head names: ``line 3: queues[0].qouta: unknown field``."""
    parts = [f"line {problem.line}" if problem.line is not None else "", problem.path, problem.message]
    return ": ".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class ConfigRefusal:
    """Why usher refused a ConfigMap it reads, and what it does meanwhile."""

    #: ``usher-system/usher-queues``
    configmap: str
    #: what is wrong and what usher does meanwhile: ``invalid queue config in ...; keeping ...``
    head: str
    errors: tuple[str, ...] = ()

    @classmethod
    def of_problems(cls, configmap: str, head: str, problems: Iterable[Problem]) -> ConfigRefusal:
        return cls(configmap, head, tuple(problem_words(p) for p in problems))

    def counted_head(self) -> str:
        """The head with the number of errors: ``...; 2 errors``."""
        if not self.errors:
            return self.head
        return f"{self.head}; {len(self.errors)} error{'' if len(self.errors) == 1 else 's'}"

    def text(self) -> str:
        """The head, then each error on its own line."""
        if not self.errors:
            return self.head
        return "\n".join((f"{self.counted_head()}:", *(f"  {e}" for e in self.errors)))

    def event_message(self, limit: int = NOTE_LENGTH_LIMIT) -> str:
        """Every error on one line after the head, in at most ``limit`` UTF-8 bytes; those that do
        not fit are counted (``; … and 3 more errors, in usher's log``)."""
        head = self.counted_head()
        if not self.errors:
            return _cut(head, limit)
        total = len(self.errors)
        shown, used = 0, _size(f"{head}: ")
        for k, error in enumerate(self.errors, start=1):
            used += _size(error) + (2 if k > 1 else 0)
            if used > limit:
                break
            if used + _size(_more(total - k)) <= limit:
                shown = k
        if shown:
            return f"{head}: " + "; ".join(self.errors[:shown]) + _more(total - shown)
        # not even the first error fits whole: as much of it as fits
        more = _more(total - 1)
        return _cut(f"{head}: {self.errors[0]}", limit - _size(more)) + more


def _more(rest: int) -> str:
    return f"; {CUT} and {rest} more error{'' if rest == 1 else 's'}, in usher's log" if rest else ""


def _size(text: str) -> int:
    return len(text.encode())


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes, ending in ``…`` when cut (never mid-character)."""
    if _size(text) <= limit:
        return text
    room = max(0, limit - _size(CUT))
    return text.encode()[:room].decode(errors="ignore") + CUT
