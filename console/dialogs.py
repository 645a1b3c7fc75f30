"""The console's dialogs: confirmation with consequences, the quota form, help, and job details.

Dangerous actions (preempt, drain, quota changes) open a ``ConfirmDialog`` that says what will
happen before anything does; ``QuotaDialog`` validates every field as it is typed and previews
which pending jobs the new limits make admissible. Each dialog returns its answer through
``dismiss`` so the app's action can await it.

On a small terminal (80x24) a dialog's body scrolls between its title and its buttons, which are
docked at the bottom so Apply / Cancel are always on screen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from usher.engine import fmt
from usher.engine.state import RESOURCE_NAMES, Queue
from usher.engine.whatif import QuotaPreview, parse_limit

from .keys import BindingId


class ConfirmDialog(ModalScreen[bool]):
    """Yes or no, after reading what will happen."""

    BINDINGS = [
        Binding("escape", "answer(False)", "Cancel", id=str(BindingId.BACK)),
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n", "answer(False)", "No", show=False),
    ]

    def __init__(self, title: str, body: Text | str, confirm: str = "Confirm", danger: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm = confirm
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                yield Static(self.body)
            with Horizontal(id="dialog-buttons"):
                yield Button(f"{self.confirm} (y)", variant="error" if self.danger else "primary", id="yes")
                yield Button("Cancel (n)", id="no")

    def on_mount(self) -> None:
        if not self.is_attached:
            return  # the console is closing: this dialog's fields are being taken down
        # focused at once (``Widget.focus`` waits a turn): a key right behind the one that
        # opened the dialog finds it
        self.set_focus(self.query_one("#no", Button))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


@dataclass(slots=True, frozen=True)
class QuotaEdit:
    """The limits a quota form produced, in engine units; ``INF`` means unlimited."""

    queue: str
    nominal: tuple[float, float, float]
    borrowing_limit: tuple[float, float, float]
    lending_limit: tuple[float, float, float]


FIELDS = (("nominal", "quota"), ("borrowing_limit", "borrowing limit"), ("lending_limit", "lending limit"))


def show_limit(resource: str, value: float) -> str:
    """A limit as the form shows it (``fmt.figure``, the one rule); blank means unlimited."""
    return fmt.figure(resource, value, unlimited="")


class QuotaDialog(ModalScreen[QuotaEdit | None]):
    """Edit a queue's quota, borrowing and lending limits; blank means unlimited."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id=str(BindingId.BACK))]

    def __init__(self, queue: Queue, preview: Callable[[QuotaEdit], QuotaPreview]) -> None:
        super().__init__()
        self.queue = queue
        self.preview = preview

    def compose(self) -> ComposeResult:
        q = self.queue
        with Vertical(id="dialog"):
            yield Label(f"Limits of queue {q.name}" + (f" (cohort {q.cohort})" if q.cohort else ""), id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                with Grid(id="quota-grid"):
                    yield Label("")
                    for res in RESOURCE_NAMES:
                        yield Label(res)
                    for attr, label in FIELDS:
                        yield Label(label)
                        for r, res in enumerate(RESOURCE_NAMES):
                            yield Input(
                                show_limit(res, getattr(q, attr)[r]), placeholder="unlimited", id=f"{attr}-{res}", compact=True
                            )
                yield Static("", id="quota-error")
                yield Static("", id="quota-preview")
            with Horizontal(id="dialog-buttons", classes="-compact"):
                yield Button("Apply", variant="primary", id="apply", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        if not self.is_attached:
            return  # the console is closing (a quit behind the key that opened the form)
        self.set_focus(self.query_one("#nominal-gpu", Input))
        self._update()

    def read(self) -> QuotaEdit:
        """The form's values; ``ValueError`` naming the field when one does not parse."""
        values = {}
        for attr, label in FIELDS:
            vec = []
            for res in RESOURCE_NAMES:
                text = self.query_one(f"#{attr}-{res}", Input).value
                try:
                    vec.append(float(parse_limit(res, text)))
                except Exception as exc:  # noqa: BLE001 - every parse error is the user's to fix
                    raise ValueError(f"{label} {res}: {text!r}: {exc}") from None
            values[attr] = tuple(vec)
        return QuotaEdit(self.queue.name, values["nominal"], values["borrowing_limit"], values["lending_limit"])

    def _update(self) -> None:
        error = self.query_one("#quota-error", Static)
        preview = self.query_one("#quota-preview", Static)
        apply = self.query_one("#apply", Button)
        try:
            edit = self.read()
        except ValueError as exc:
            error.update(Text(str(exc), style="bold red"))
            preview.update("")
            apply.disabled = True
            return
        error.update("")
        apply.disabled = False
        p = self.preview(edit)
        lines = Text()
        if p.admissible:
            lines.append(f"Would become admissible ({len(p.admissible)}): ", style="bold")
            lines.append(", ".join(p.admissible[:12]) + (" …" if len(p.admissible) > 12 else ""))
            lines.append("\n")
            if p.room_now:
                lines.append(f"  with room to start now: {', '.join(p.room_now[:12])}\n")
        if p.blocked:
            lines.append(f"Would stop fitting ({len(p.blocked)}): ", style="bold")
            lines.append(", ".join(p.blocked[:12]) + "\n")
        if p.over_quota:
            lines.append(
                f"Its running jobs hold {fmt.gpu_amount(p.over_quota * 1000)} above the new ceiling; they keep running "
                "until they end or a reclaiming queue preempts them.\n"
            )
        if not lines.plain:
            lines.append("No pending job changes admissibility.", style="dim")
        preview.update(lines)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._update()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self._apply()
        else:
            self.dismiss(None)

    def _apply(self) -> None:
        try:
            self.dismiss(self.read())
        except ValueError:
            self._update()

    def action_cancel(self) -> None:
        self.dismiss(None)


class TextScreen(ModalScreen[None]):
    """A scrollable page of text (help, job details); ``esc`` goes back."""

    BINDINGS = [
        Binding("escape", "close", "Back", id=str(BindingId.BACK)),
        Binding("q", "close", "Back", show=False),
    ]

    def __init__(self, title: str, body: Text, *, classes: str = "") -> None:
        super().__init__(classes=classes)
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(id="page"):
            yield Label(self.title_text, id="dialog-title")
            with VerticalScroll(id="page-body"):
                yield Static(self.body, id="page-text")

    def action_close(self) -> None:
        self.dismiss(None)
