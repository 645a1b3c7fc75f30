"""The panel above the queues that says, whole, which ConfigMap usher refused and why.

On a cluster usher reads the queues and the operators' decisions from ConfigMaps an operator edits
by hand; an edit it cannot read is refused and the last good one kept, which looks like nothing
happened. So where the queues are, the console lists every refused ConfigMap with every error
(its line and YAML path), what usher does meanwhile, and the command that fixes it. The panel
reads the controller's ``config_refusals`` itself, through the callable it is given (a replay has
none: the panel stays hidden), so the views need not know about it; it takes no focus and scrolls
when the errors do not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widgets import Static

if TYPE_CHECKING:
    from usher.engine.config_errors import ConfigRefusal

#: seconds between looks at the controller's refusals
REFRESH = 0.5


def refusal_text(refusals: Mapping[str, ConfigRefusal]) -> Text:
    """Every refusal: its head, each error on its own line, and how to fix it."""
    out = Text()
    for key in sorted(refusals):
        refusal = refusals[key]
        namespace, _, name = refusal.configmap.rpartition("/")
        if out:
            out.append("\n")
        out.append(f"✗ {refusal.counted_head()}" + (":" if refusal.errors else ""), style="bold")
        for error in refusal.errors:
            out.append(f"\n    {error}")
        out.append(f"\n  fix it: kubectl edit configmap -n {namespace} {name}", style="italic")
    return out


class ConfigErrors(Static):
    """Hidden while every ConfigMap usher reads is good."""

    DEFAULT_CSS = """
    ConfigErrors {
        height: auto;
        max-height: 50%;
        overflow-y: auto;
        padding: 0 1;
        color: $error;
        border-bottom: solid $error;
        display: none;
    }
    """

    def __init__(self, refusals: Callable[[], Mapping[str, ConfigRefusal]], **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        #: the controller's refusals now (``ConsoleController.config_refusals``)
        self._refusals = refusals
        self._shown: Text | None = None

    def on_mount(self) -> None:
        self.set_interval(REFRESH, self.show_refusals)
        self.show_refusals()

    def show_refusals(self) -> None:
        refusals = self._refusals()
        text = refusal_text(refusals)
        if text == self._shown:
            return
        self._shown = text
        self.update(text)
        self.display = bool(refusals)
