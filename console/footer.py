"""The console's footer: the keys that matter in this view, never cut off at 80 columns.

Textual's footer lists every shown binding in the order the bindings were declared and lets the
rest run off the right edge. Here the keys are chosen for the width: ``?`` (help, which lists
everything) first, then the view's own actions (approve, hold, drain, zoom, ...), then the
global keys (``:``, pause, ``/``, quit, speed), then the palette; what does not fit is left out
whole rather than cut. The view's actions are drawn first, the global keys after them. Below
100 columns the footer uses Textual's compact style.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: the order global keys are kept in as the footer narrows (lower first); the view's own
#: actions, anything not named here, come right after help
GLOBAL_RANK = {
    "help": 0,
    "command_mode": 2,
    "toggle_pause": 3,
    "filter": 4,
    "quit": 5,
    "faster": 6,
    "slower": 6,
}
VIEW_RANK = 1
#: narrower than this, the footer uses the compact style (one cell less per key)
COMPACT_BELOW = 100


class UsherFooter(Footer):
    """A footer that shows the keys that matter first and never cuts one in half."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._width = 0

    def _available(self) -> int:
        return self.size.width or self.screen.size.width or self.app.size.width

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self._available()
        self._width = width
        active = self.screen.active_bindings
        entries: dict[str, tuple] = {}  # action -> (binding, enabled, tooltip), first binding wins
        for _node, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in entries:
                entries[binding.action] = (binding, enabled, tooltip)

        def rank(action: str) -> int:
            return GLOBAL_RANK.get(action.split("(")[0], VIEW_RANK)

        def cells(binding) -> int:
            # key and description with their padding (compact: a margin instead)
            return cell_len(self.app.get_key_display(binding)) + cell_len(binding.description) + (2 if self.compact else 3)

        order = list(entries)
        chosen: set[str] = set()
        used = 0
        for action in sorted(order, key=lambda a: (rank(a), order.index(a))):
            need = cells(entries[action][0])
            if used + need <= width:
                chosen.add(action)
                used += need
        shown = sorted(chosen, key=lambda a: (rank(a) != VIEW_RANK, rank(a), order.index(a)))
        for action in shown:
            binding, enabled, tooltip = entries[action]
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            ).data_bind(compact=Footer.compact)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            try:
                _node, binding, enabled, tooltip = active[self.app.COMMAND_PALETTE_BINDING]
            except KeyError:
                return
            # docked right, with a border and padding: shown only when it fits beside the rest
            if used + cells(binding) + 2 <= width:
                yield FooterKey(
                    binding.key,
                    self.app.get_key_display(binding),
                    binding.description,
                    binding.action,
                    classes="-command-palette",
                    disabled=not enabled,
                    tooltip=binding.tooltip or binding.description,
                )

    def on_mount(self) -> None:
        super().on_mount()
        self.compact = self._available() < COMPACT_BELOW

    def on_resize(self) -> None:
        width = self._available()
        self.compact = width < COMPACT_BELOW
        if width != self._width and self.is_attached:
            self.call_after_refresh(self.recompose)
