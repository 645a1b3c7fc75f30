"""Keys one at a time: a burst from the terminal is handled as if it had been typed slowly.

Textual gives each key to the widget that has the focus when the app *reads* the key, and runs
the key's binding only once the key has bubbled back up to the app, one message queue at a time.
A paste, or a laggy SSH link, delivers many keys in one read, so the app reads them all before it
has handled the first: with ``:queues`` + Enter sent at once, ``:`` and then ``q`` would both be
given to the overview (the prompt ``:`` opens is not focused yet), and ``q`` would quit the
console; keys typed right after ``e`` would reach the quota dialog before it has mounted its fields.

The gate lets one key (or paste) in at a time. The next waits until the one before has been
through every node it was given to, from the focused widget up to the app (a callback relayed
through their queues, each of which runs in order), again while that walk finds messages the
key caused behind it (Enter's ``Input.Submitted`` travels up the same path after the key), and
one more turn of the app's queue, where Textual puts what a binding deferred (a focus change). A screen that is still mounting (a
dialog just opened) is waited for the same way: its queue runs only once it is mounted. So
the focus, the screen and the view each key meets are the ones the keys before it left.

It is its own module because it is about Textual's delivery, not about any view: the app only
hands it the input events the driver sends (``UsherApp.on_event``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from textual import events
from textual.app import App
from textual.message_pump import MessagePump

#: what the terminal sends that goes to the focused widget: held at the gate
GATED = (events.Key, events.Paste)
#: walks of the path before the next key goes in anyway (a widget on it that never goes quiet)
MAX_PASSES = 16


class KeyGate:
    """Holds the terminal's keys and pastes until the one before them has been handled."""

    def __init__(self, app: App, dispatch: Callable[[events.Event], Awaitable[None]]) -> None:
        self.app = app
        #: how an event goes on once let through (Textual's own delivery)
        self.dispatch = dispatch
        self.held: deque[events.Event] = deque()
        #: the nodes the event let through last is travelling, target first, the app last;
        #: None when the gate is open
        self.path: tuple[MessagePump, ...] | None = None
        #: events let through, for the tests and the key-burst bench
        self.passed = 0

    @property
    def busy(self) -> bool:
        return self.path is not None or bool(self.held)

    async def take(self, event: events.Event) -> None:
        """Queue ``event`` behind any held before it, and let through what may go now."""
        self.held.append(event)
        await self._pump()

    async def _pump(self) -> None:
        app = self.app
        while self.path is None and self.held and app.is_running:
            screen = app.screen
            if not screen.is_mounted:
                # a screen just pushed (a dialog): its queue runs once it is mounted, with its
                # field focused; the keys wait for that
                self.path = (screen, app)
                self._pass(self.path)
                return
            event = self.held.popleft()
            target = app.focused or screen  # where Textual's delivery gives it
            self.path = tuple(target.ancestors_with_self)
            self.passed += 1
            await self.dispatch(event)
            self._pass(self.path)  # behind the event in each queue on its way

    def _pass(self, path: tuple[MessagePump, ...], passes: int = 1) -> None:
        self._hop(path, 0, False, passes)

    def _hop(self, path: tuple[MessagePump, ...], index: int, busy: bool, passes: int) -> None:
        """Pass a callback through ``path[index:]``'s queues in turn. Run in a node's queue, it
        notes whether messages came in behind it there (the key's binding posted one: Enter's
        ``Input.Submitted``); if any did, the path is walked again (with the focus as it is now),
        until a walk finds nothing new; then one more turn of the app's queue."""
        if path is not self.path:
            return  # released meanwhile (a node on the way was closed)
        if index > 0 and path[index - 1] is not self.app:
            busy = busy or path[index - 1].message_queue_size > 0
        for i in range(index, len(path)):
            if path[i].call_later(self._hop, path, i + 1, busy, passes):
                return
            # that node is closing: its queue will not run; go on with the next one
        app = self.app
        # what the key's binding (run by the app just now) posted waits in a queue on the path
        busy = busy or any(node.message_queue_size for node in path if node is not app)
        if busy and passes < MAX_PASSES:
            # the focus as it is now, then the rest of the path, the app last
            now = (app.focused or app.screen).ancestors_with_self
            self.path = (*dict.fromkeys(node for node in (*now, *path) if node is not app), app)
            self._pass(self.path, passes + 1)
            return
        self.app.call_later(self._release, path)

    async def _release(self, path: tuple[MessagePump, ...]) -> None:
        if path is self.path:
            self.path = None
            await self._pump()

    async def check(self) -> None:
        """Open the gate if a node the event in flight was given to has gone (a dialog closed
        by that very key): its queue, and the callback in it, are dropped with it."""
        path = self.path
        if path is not None and any(node is not self.app and not node.is_attached for node in path):
            self.path = None
            await self._pump()
