"""Moving around the console: views, the ``:`` prompt, the ``/`` filter, pastes, sort, themes, help.

Keys follow k9s. ``:`` opens the prompt in command mode (a view's name or alias, ``theme NAME``,
``speed X``, ``help``, ``q``; Tab completes); ``/`` opens it as a filter of the view's table
(``!`` inverts); ``esc`` goes back one step (closes the prompt, clears the filter, zooms out,
leaves a queue's jobs, returns to the previous view); ``o``/``O`` sort the Jobs view; ``T`` and
``:theme`` change the theme; ``?`` lists the keys of the view on screen with why a disabled one
is disabled. A paste outside a text field is typed into the prompt, never taken as single-key
actions (pasting ``drain`` drains nothing). The keys themselves are bound in ``app.py``
(``UsherApp.BINDINGS``, remappable by id) and let in one at a time by ``keygate.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widgets import ContentSwitcher, Input

from usher.engine.contract import ConsoleController

from .catalog import VIEW_ALIASES, View
from .dialogs import TextScreen
from .drawing import DESCENDING
from .keys import default_keymap_path
from .model import JOB_COLUMNS
from .prompt import HINT, QUIT_WORDS, CommandPrompt, completions
from .table import RowTable
from .themes import UsherTheme
from .views import HeatmapPane

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class Navigation(_Base):
    """Views and modes: switching views, the prompt and what it runs, pastes, sort, themes, help."""

    controller: ConsoleController
    is_replay: bool
    readonly: bool
    view: View
    history: list[View]
    filters: dict[View, str]
    job_sort: tuple[int, bool] | None
    prompt_mode: str | None
    theme_name: str
    _themes: dict[str, UsherTheme]

    def action_show(self, view: str) -> None:
        self.switch_to(View(view))

    def switch_to(self, view: View, remember: bool = True) -> None:
        if view != self.view:
            self.clear_error()
            if remember:
                self.history.append(self.view)
                del self.history[:-20]
        self.view = view
        self.query_one("#views", ContentSwitcher).current = str(view)
        self.redraw()
        focus = {
            View.QUEUES: "#queue-table",
            View.JOBS: "#job-table",
            View.NODES: "#node-table",
            View.TOPOLOGY: "#heatmap",
            View.EVENTS: "#event-table",
        }.get(view)
        if focus:
            self.query_one(focus).focus()
        else:
            self.set_focus(None)
        self.refresh_bindings()
        self._refresh_bar()

    def action_command_mode(self) -> None:
        self._open_prompt("command", ":")

    def action_filter(self) -> None:
        self._open_prompt("filter", self.filters.get(self.view, ""))

    def _open_prompt(self, mode: str, value: str) -> None:
        prompt = self.query_one("#prompt", CommandPrompt)
        self.prompt_mode = mode
        prompt.placeholder = HINT if mode == "command" else "filter (start with ! to invert)"
        prompt.completer = self.complete_command if mode == "command" else None
        prompt.paste_lines = self._paste_into_prompt
        prompt.value = value
        prompt.display = True
        prompt.focus()
        prompt.cursor_position = len(value)

    def complete_command(self, text: str) -> list[str]:
        """What Tab completes ``text`` (typed after ``:``) to: commands, then theme names."""
        return completions(text, self._themes, replay=self.is_replay)

    def _close_prompt(self) -> None:
        prompt = self.query_one("#prompt", CommandPrompt)
        prompt.completer = None
        prompt.paste_lines = None
        prompt.display = False
        self.prompt_mode = None
        self.switch_to(self.view, remember=False)

    def on_paste(self, event: events.Paste) -> None:
        """A paste no text field took (the views have the focus): see ``paste_text``."""
        event.stop()
        if self.screen is not self.screen_stack[0]:
            # a dialog or a page is open: its keys are its own, and no command runs under it
            self.notify("paste ignored: close this dialog first (esc)", severity="warning")
            return
        self.paste_text(event.text)

    def paste_text(self, text: str) -> None:
        """What a paste does outside a text field: it is typed into the prompt, never taken as
        single-key actions (pasting ``drain`` must not drain). Each whole line that starts with
        ``:`` runs as a command, with ``/`` sets the filter; a last line with no newline is left
        open in the prompt to finish; any other line is said to be ignored."""
        *whole, last = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in whole:
            line = line.strip()
            self._run_pasted_line(line)
            if line[1:].split()[:1] and line.startswith(":") and line[1:].split()[0].lower() in QUIT_WORDS:
                return  # a pasted :q quits; nothing after it runs
        last = last.strip()
        if last.startswith(":"):
            self._open_prompt("command", last)
        elif last.startswith("/"):
            self._open_prompt("filter", last[1:])
            self.filters[self.view] = last[1:]
            self.redraw()
        elif last:
            self._ignore_pasted(last)

    def _run_pasted_line(self, line: str) -> None:
        if line.startswith(":"):
            self.run_command_line(line[1:])
        elif line.startswith("/"):
            self.filters[self.view] = line[1:].strip()
            self.redraw(force=True)
        elif line:
            self._ignore_pasted(line)

    def _ignore_pasted(self, line: str) -> None:
        shown = line if len(line) <= 30 else line[:29] + "…"
        self.set_status(f"pasted text ignored: {shown!r} (paste a :command or a /filter)", "warning")

    def _paste_into_prompt(self, text: str) -> None:
        """A paste with a newline into the open prompt: what it completes runs as if Enter was
        pressed, and the lines after it as a paste (``paste_text``)."""
        prompt = self.query_one("#prompt", CommandPrompt)
        at = prompt.cursor_position
        typed = prompt.value[:at] + text + prompt.value[at:]
        if self.prompt_mode == "filter":
            typed = "/" + typed
        self._close_prompt()
        self.paste_text(typed)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "prompt" and self.prompt_mode == "filter":
            self.filters[self.view] = event.value
            self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "prompt":
            return
        mode, text = self.prompt_mode, event.value.strip()
        self._close_prompt()
        if mode == "filter":
            self.filters[self.view] = text
            self.redraw(force=True)
        else:
            self.run_command_line(text.lstrip(":"))

    def run_command_line(self, text: str) -> None:
        """What ``:`` mode understands: a view name, ``theme NAME``, ``speed X``, ``quit``."""
        words = text.split()
        if not words:
            return
        head, rest = words[0].lower(), words[1:]
        if head in QUIT_WORDS:
            self.exit(0)
        elif head in VIEW_ALIASES:
            self.switch_to(VIEW_ALIASES[head])
        elif head == "theme" and rest:
            self.use_theme(rest[0])
        elif head == "theme":
            self.set_status(f":theme needs a name: {', '.join(sorted(self._themes))}", "error")
        elif head == "speed" and not self.is_replay:
            self.set_status(":speed: only a replay has a speed", "error")
        elif head == "speed" and not rest:
            self.set_status(":speed needs a number (×1 is real time)", "error")
        elif head == "speed":
            try:
                self.controller.speed = max(1.0, float(rest[0]))
                self.set_status(f"speed ×{self.controller.speed:g}")
            except ValueError:
                self.set_status(f"speed: {rest[0]!r} is not a number", "error")
        elif head == "help":
            self.action_help()
        else:
            self.set_status(f"unknown command :{text}   try {HINT}", "error")

    def action_back(self) -> None:
        if self.prompt_mode is not None:
            self._close_prompt()
            return
        if self.filters.get(self.view):
            self.filters[self.view] = ""
            self.redraw(force=True)
            return
        if self.view == View.TOPOLOGY and self.query_one("#heatmap", HeatmapPane).action_zoom_out():
            return
        if self.view == View.QUEUES and self.focused is self.query_one("#queue-jobs", RowTable):
            self.query_one("#queue-table", RowTable).focus()  # from a queue's jobs back to the queues
            self._refresh_bar()
            return
        if self.history:
            self.switch_to(self.history.pop(), remember=False)
        elif self.view != View.OVERVIEW:
            self.switch_to(View.OVERVIEW, remember=False)

    def action_invert(self) -> None:
        text = self.filters.get(self.view, "")
        self.filters[self.view] = text[1:] if text.startswith("!") else "!" + text
        self.redraw(force=True)

    def action_sort(self) -> None:
        col = 0 if self.job_sort is None else (self.job_sort[0] + 1) % len(JOB_COLUMNS)
        self.job_sort = (col, False)
        self._say_sort()
        self.redraw(force=True)

    def action_sort_reverse(self) -> None:
        col, reverse = self.job_sort or (0, False)
        self.job_sort = (col, not reverse)
        self._say_sort()
        self.redraw(force=True)

    def _say_sort(self) -> None:
        col, reverse = self.job_sort or (0, False)
        largest = (col in DESCENDING) != reverse
        self.set_status(f"jobs sorted by {JOB_COLUMNS[col]} {'▼ descending' if largest else '▲ ascending'} (o: next column, O: reverse)")

    def use_theme(self, name: str) -> None:
        if name not in self._themes:
            self.set_status(f"unknown theme {name!r}; known: {', '.join(sorted(self._themes))}", "error")
            return
        self.theme_name = name
        self.theme = self._themes[name].textual.name
        self.set_status(f"theme {name}")
        self.redraw(force=True)

    def action_use_theme_named(self, name: str) -> None:
        self.use_theme(name)

    def action_next_theme(self) -> None:
        names = sorted(self._themes)
        self.use_theme(names[(names.index(self.theme_name) + 1) % len(names)])

    def action_help(self) -> None:
        body = Text()
        body.append(f"Keys in the {self.view} view\n\n", Style(bold=True))
        keys_of: dict[tuple[str, str], list[str]] = {}
        listed = []
        for key, active in sorted(self.active_bindings.items(), key=lambda kv: kv[1].binding.description):
            b = active.binding
            if not b.description:
                continue
            if (b.action, b.description) not in keys_of:
                keys_of[(b.action, b.description)] = []
                listed.append(active)
            keys_of[(b.action, b.description)].append(self.get_key_display(b))
        for active in listed:
            b = active.binding
            keys = ", ".join(keys_of[(b.action, b.description)])
            action = b.action.split("(")[0]
            reason = self.disabled_reason(action)
            line = f"  {keys:<12} {b.description:<14} {b.id or ''}"
            if not active.enabled:
                body.append(line + f"   (disabled: {reason or 'not here'})\n", Style(dim=True))
            else:
                body.append(line + "\n")
        body.append(
            "\n  :            command mode: queues, jobs, nodes, topology, events, theme NAME, speed X, q\n"
            "               (Tab completes the command, again to cycle; :q and :quit quit)\n"
            "  /            filter the table (start with ! to invert); ! inverts the current filter\n"
            "  esc          back: close a dialog or the prompt, leave a queue's jobs, clear the filter,\n"
            "               zoom out, previous view\n"
            "  y, l         the selected job's pods as YAML, their logs (on a cluster, from the API)\n"
            "  ctrl+d       preempt the selected job (k9s's delete), as p\n"
            "  ctrl+p       command palette: views, every action by name (why one is unavailable), themes\n"
            f"\n  Remap keys in {default_keymap_path()} (binding-id: keys).\n"
        )
        if self.readonly:
            body.append("\n  Read-only: every action that changes the cluster is removed.\n", Style(bold=True))
        self.push_screen(TextScreen("Help", body))
