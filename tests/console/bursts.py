"""Key bursts as a terminal delivers them, and what "alive and consistent" means after one.

Shared by the console's burst tests (tests/console/test_keybursts.py, tests/kube/
test_console_bursts_on_cluster.py) and the long run in bench/keyburst.py.

A burst is what one read of the terminal gives the app: the raw characters (``:queues\\r``,
arrow keys as escape sequences, a bracketed paste ``ESC[200~...ESC[201~``) parsed by Textual's
own terminal parser into key and paste events, all posted to the app before it handles the
first, as the driver does. Resizes can be slipped in between the keys. ``settle`` then waits
until the app has handled every one of them.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from textual import events
from textual._xterm_parser import XTermParser
from textual.drivers.headless_driver import HeadlessDriver
from textual.geometry import Size
from textual.screen import ModalScreen

from usher.console import app as console_app
from usher.console.app import UsherApp, View
from usher.console.prompt import QUIT_WORDS

ESC = "\x1b"
UP, DOWN = "\x1b[A", "\x1b[B"


def paste(text: str) -> str:
    """``text`` as a terminal in bracketed-paste mode sends it."""
    return f"{ESC}[200~{text}{ESC}[201~"


def parse(*chunks: str) -> list[events.Event]:
    """The events Textual's terminal parser makes of ``chunks``, each read on its own (so that a
    lone escape stays ``escape`` rather than an alt- prefix of what follows it)."""
    out: list[events.Event] = []
    for chunk in chunks:
        parser = XTermParser()
        out += list(parser.feed(chunk))
        out += list(parser.feed(""))  # the end of the read: a lone ESC is the escape key
    return out


def resize(app: UsherApp, width: int, height: int) -> events.Resize:
    """A terminal resize as the headless driver reports one."""
    size = Size(width, height)
    if isinstance(app._driver, HeadlessDriver):
        app._driver._size = size
    return events.Resize(size, size)


def send(app: UsherApp, evs: list[events.Event]) -> None:
    """Post every event at once: the app reads them all before it handles the first."""
    for ev in evs:
        app.post_message(ev)


async def settle(pilot, app: UsherApp, rounds: int = 400) -> None:
    """Wait until every key and paste sent has been handled (the gate is open, nothing held)
    and the commands they sent to the controller have been answered."""
    for _ in range(rounds):
        await pilot.pause()
        commands = [w for w in app.workers if w.group == "commands" and not w.is_finished]
        if not app.is_running or (not app.keys.busy and not commands):
            break
    await pilot.pause()


class BurstApp(UsherApp):
    """The console, with a quit recorded instead of carried out, so that a long run can go on
    and say how each quit was asked for: by a quit command (``:q``) is right; by the ``q`` key
    binding is not, when no ``q`` was pressed on its own (a key that leaked out of the prompt)."""

    #: Textual reads a relative CSS_PATH next to the class's own module: the console's, here
    CSS_PATH = str(Path(console_app.__file__).with_name(UsherApp.CSS_PATH))

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.quit_commands: list[str] = []
        self.quit_keys = 0
        self._command_line: str | None = None

    def run_command_line(self, text: str) -> None:
        self._command_line = text
        try:
            super().run_command_line(text)
        finally:
            self._command_line = None

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        if self._command_line is not None and self._command_line.split()[0].lower() in QUIT_WORDS:
            self.quit_commands.append(self._command_line)
            return
        super().exit(result, return_code, message)

    async def action_quit(self) -> None:
        self.quit_keys += 1


#: what the random bursts are made of: single keys (no lone ``q``, the quit key, and no ``x``,
#: so that no quit word can be typed but the ``:q`` token), commands, pastes, a resize
SINGLE_KEYS = list("123456ahrpylcude oOT?!+-njkg") + ["\r", "\t", ESC, UP, DOWN, UP, DOWN]
COMMANDS = [
    ":queues\r", ":jobs\r", ":nodes\r", ":topology\r", ":events\r", ":overview\r", ":o\r",
    ":theme light\r", ":theme dark\r", ":theme colorblind\r", ":speed 120\r", ":help\r", ":bogus\r",
    ":q\r", ":to\t\r", "/a\r", "/!run\r", "/research", ":", "/",
]
PASTES = [
    paste(":jobs\n"), paste("drain"), paste("/research\n"), paste(":nodes\n/gpu\n"), paste(":queues"),
    paste("80\n"), paste("hello\nworld\n"),
]
SIZES = [(80, 24), (100, 30), (120, 40), (60, 20), (200, 60)]


def random_burst(rng: random.Random, app: UsherApp, length: int) -> list[events.Event]:
    """``length`` random tokens as one burst (keys, commands, pastes, now and then a resize)."""
    evs: list[events.Event] = []
    for _ in range(length):
        roll = rng.random()
        if roll < 0.6:
            evs += parse(rng.choice(SINGLE_KEYS))
        elif roll < 0.85:
            evs += parse(rng.choice(COMMANDS))
        elif roll < 0.95:
            evs += parse(rng.choice(PASTES))
        else:
            evs.append(resize(app, *rng.choice(SIZES)))
    return evs


@dataclass
class Check:
    """What is wrong with the app after a burst; empty when it is alive and consistent."""

    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems


def check(app: UsherApp, caught: list[warnings.WarningMessage] | None = None) -> Check:
    """Alive and consistent: running with no exception; the header names the view on screen;
    no dialog stacked on another; the prompt shown exactly when it is open, and then focused;
    otherwise the focus in the view on screen (or nowhere, on the overview); no quit by a key
    that was never pressed alone; no warning raised (a coroutine never awaited)."""
    c = Check()
    if not app.is_running or app._exception is not None:
        c.problems.append(f"not running (exception: {app._exception!r})")
        return c
    stack = app.screen_stack
    dialogs = [type(s).__name__ for s in stack[1:]]
    if len(dialogs) > 1:
        c.problems.append(f"dialogs stacked: {dialogs}")
    if any(not isinstance(s, ModalScreen) for s in stack[1:]):
        c.problems.append(f"a full screen above the console: {dialogs}")
    bar = str(app.query_one("#bar").render())
    crumbs = bar.split("   ")
    if str(app.view) not in crumbs and not any(part.startswith(f"{app.view} › ") for part in crumbs):
        c.problems.append(f"header {bar!r} does not name the view {app.view}")
    if app.query_one("#views").current != str(app.view):
        c.problems.append(f"view {app.view} but {app.query_one('#views').current} on screen")
    prompt = app.query_one("#prompt")
    if (app.prompt_mode is not None) != bool(prompt.display):
        c.problems.append(f"prompt mode {app.prompt_mode} but prompt shown={prompt.display}")
    if len(stack) == 1:
        focused = app.screen.focused
        if app.prompt_mode is not None:
            if focused is not prompt:
                c.problems.append(f"prompt open but focus on {focused}")
        elif focused is not None:
            container = app.query_one(f"#{app.view}")
            if container not in focused.ancestors_with_self:
                c.problems.append(f"focus on {focused}, outside the {app.view} view")
        elif app.view not in (View.OVERVIEW,):
            c.problems.append(f"nothing focused in the {app.view} view")
    if isinstance(app, BurstApp) and app.quit_keys:
        c.problems.append(f"quit by the q key {app.quit_keys} times, never pressed alone")
    for w in caught or []:
        c.problems.append(f"warning: {w.category.__name__}: {w.message}")
    return c
