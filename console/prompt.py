"""The ``:`` prompt: k9s's command line, with Tab completion.

``:`` opens it; ``Tab`` completes the command typed so far (``:to`` → ``:topology``), again and
again to cycle through every command that matches (``shift+tab`` backwards), and after
``:theme `` through the theme names; the prompt keeps the focus. What would complete is also
shown greyed after the cursor (``→`` accepts it). ``:q``, ``:quit``, ``:q!`` and ``:exit`` quit,
as in k9s and vi.

The same widget serves the ``/`` filter, where Tab does nothing (there is nothing to complete).

A paste with a newline in it is handed whole to ``paste_lines`` (the app runs what it completes
as if Enter was pressed, then the lines after it); Textual's ``Input`` would keep the first line
and drop the rest without a word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual import events
from textual.binding import Binding
from textual.suggester import Suggester
from textual.widgets import Input

#: the commands ``:`` understands, in the order Tab offers them
COMMANDS = ("overview", "queues", "jobs", "nodes", "topology", "events", "theme", "speed", "help", "quit")
#: commands that take an argument: Tab completes them with a space after
TAKES_ARGUMENT = ("theme", "speed")
#: what quits (k9s and vi habits)
QUIT_WORDS = ("q", "q!", "quit", "exit", "qa", "wq")
#: shown in the prompt before anything is typed, and in the message for an unknown command
HINT = ":queues :jobs :nodes :topology :events :theme NAME :quit   (Tab completes)"


def completions(text: str, themes: Iterable[str], replay: bool = True) -> list[str]:
    """Every command line Tab can make of ``text`` (what is typed after the ``:``), in order.

    A first word completes to the commands it begins (``speed`` only on a replay, which has a
    speed); after ``theme `` the theme names complete."""
    body = text.lstrip(":").lstrip()
    head, sep, rest = body.partition(" ")
    if not sep:
        words = [w for w in COMMANDS if replay or w != "speed"]
        return [w + (" " if w in TAKES_ARGUMENT else "") for w in words if w.startswith(head.lower())]
    if head.lower() == "theme" and " " not in rest.strip():
        return [f"theme {name}" for name in sorted(themes) if name.startswith(rest.strip())]
    return []


class _CommandSuggester(Suggester):
    """Shows the first completion greyed after the cursor."""

    def __init__(self, prompt: CommandPrompt) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.prompt = prompt

    async def get_suggestion(self, value: str) -> str | None:
        if self.prompt.completer is None or not value.startswith(":") or value == ":":
            return None
        matches = self.prompt.completer(value[1:])
        return ":" + matches[0] if matches else None


class CommandPrompt(Input):
    """An ``Input`` whose Tab completes (with ``completer`` set) instead of moving the focus."""

    BINDINGS = [
        Binding("tab", "complete(1)", "Complete", show=False),
        Binding("shift+tab", "complete(-1)", "Complete backwards", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        self.completer: Callable[[str], list[str]] | None = None
        #: takes a paste that has a newline in it (set by the app while the prompt is open)
        self.paste_lines: Callable[[str], None] | None = None
        # select_on_focus off: the ``:`` it opens with stays when the first letter is typed
        super().__init__(id=id, suggester=_CommandSuggester(self), select_on_focus=False)
        self._matches: list[str] = []
        self._index = 0

    def _on_paste(self, event: events.Paste) -> None:
        if self.paste_lines is not None and ("\n" in event.text or "\r" in event.text):
            event.prevent_default()  # not Input's: it keeps the first line only
            event.stop()
            self.paste_lines(event.text)

    def action_complete(self, step: int) -> None:
        """Complete the command, or, when the value is the last completion, go to the next one."""
        if self.completer is None:
            return
        current = self.value.removeprefix(":")
        if self._matches and current == self._matches[self._index]:
            self._index = (self._index + step) % len(self._matches)
        else:
            self._matches = self.completer(current)
            if not self._matches:
                self.app.bell()
                return
            self._index = 0 if step > 0 else len(self._matches) - 1
            if len(self._matches) > 1 and self._matches[self._index].rstrip() == current.rstrip():
                # what is typed is itself the first match: Tab moves on to the next one
                self._index = (self._index + step) % len(self._matches)
        self.value = ":" + self._matches[self._index]
        self.cursor_position = len(self.value)
