"""The operator's actions: approve, hold, release, preempt, cordon, uncordon, drain, set quota,
and a replay's pace.

Each action on a selected row builds an engine ``Command`` and posts it to the controller
(:meth:`Operations.post`), reporting the answer on the status line: ``✓`` done, ``•`` nothing to
do (the engine's reply says "nothing to ..."), ``✗`` refused. Dangerous ones ask first, in a
dialog that shows what would happen (the what-if answers of ``engine.whatif``: the pods a
preemption stops and the work it loses, the gangs a drain requeues, a quota change's effect).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text

from usher.engine import fmt
from usher.engine.contract import ConsoleController
from usher.engine.channel import Command, CommandError
from usher.engine.enums import Action
from usher.engine.state import INF, MILLI
from usher.engine.whatif import drain_impact, preempt_impact, quota_preview

from .dialogs import ConfirmDialog, QuotaDialog, QuotaEdit
from .model import node_used_milli, span

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


#: what the engine's reply says when a command changed nothing ("not held; nothing to release")
NOTHING_DONE = "nothing to "


class Operations(_Base):
    """Actions that change the cluster (behind a dialog when dangerous) and a replay's pace."""

    controller: ConsoleController

    def action_toggle_pause(self) -> None:
        self.controller.paused = not self.controller.paused
        self.set_status("paused" if self.controller.paused else "resumed")
        self.redraw(force=True)

    def action_faster(self) -> None:
        self.controller.speed = min(86_400.0, (self.controller.speed or 60.0) * 2)
        self.set_status(f"speed ×{self.controller.speed:g}")

    def action_slower(self) -> None:
        self.controller.speed = max(1.0, (self.controller.speed or 60.0) / 2)
        self.set_status(f"speed ×{self.controller.speed:g}")

    def post(self, cmd: Command) -> None:
        """Send ``cmd`` to the controller and report its result on the status line."""
        self.run_worker(self._post(cmd), group="commands")

    async def _post(self, cmd: Command) -> str | None:
        target = cmd.job or cmd.node or cmd.queue or ""
        try:
            result = await self.controller.post(cmd)
        except CommandError as exc:
            self.set_status(f"✗ {cmd.action} {target}: {exc}", "error")
            self.notify(str(exc), title=f"{cmd.action} failed", severity="error")
            return None
        if NOTHING_DONE in result:
            # a command that changed nothing (releasing a job that is not held) is no success
            self.set_status(f"• {cmd.action} {target}: {result}", "warning")
        else:
            self.set_status(f"✓ {cmd.action} {target}: {result}", "success")
        self.redraw(force=True)
        return result

    def _job_or_say(self) -> str | None:
        job = self.selected_job()
        if job is None:
            self.set_status("select a job first", "warning")
        return job

    def action_approve(self) -> None:
        if (job := self._job_or_say()) is not None:
            self.post(Command(Action.APPROVE, job=job))

    def action_hold(self) -> None:
        if (job := self._job_or_say()) is not None:
            self.post(Command(Action.HOLD, job=job))

    def action_release(self) -> None:
        if (job := self._job_or_say()) is not None:
            state = self.controller.state
            if job not in state.job_by_name or not state.job(job).held:
                self.set_status(f"{job} is not held; nothing to release", "warning")
                return
            self.post(Command(Action.RELEASE, job=job))

    def action_preempt(self) -> None:
        name = self._job_or_say()
        if name is None:
            return
        state = self.controller.state
        if name not in state.job_by_name or state.job(name).current_run is None:
            self.set_status(f"{name} is not running; nothing to preempt", "warning")
            return
        job = state.job(name)
        impact = preempt_impact(state, job, self.controller.now)
        body = Text()
        body.append(f"{name} ({job.queue}, priority {job.priority}) stops on every node, as one gang:\n", Style(bold=True))
        for spot in impact.pods[:16]:
            share = f" ({fmt.gpus(spot.share * MILLI)} of a GPU)" if spot.share else ""
            body.append(f"  {spot.pod:<28} {spot.node:<16} GPUs {','.join(map(str, spot.gpus))}{share}\n")
        if len(impact.pods) > 16:
            body.append(f"  … and {len(impact.pods) - 16} more pods\n")
        if impact.checkpoint_every:
            body.append(f"\nWork lost: {span(impact.work_lost)} since its last checkpoint (every {span(impact.checkpoint_every)}).\n")
        else:
            body.append(f"\nWork lost: {span(impact.work_lost)}: it has no checkpoints, so all of this run.\n", Style(bold=True))
        body.append("It goes back to its queue and restarts when admitted again.\n")
        if impact.likely_starters:
            body.append(f"Likely to start instead: {', '.join(impact.likely_starters[:10])}\n")
        else:
            body.append("Nothing waiting would start at once in the freed room.\n", Style(dim=True))
        self.push_screen(
            ConfirmDialog(f"Preempt {name}?", body, "Preempt"),
            lambda yes: self.post(Command(Action.PREEMPT, job=name)) if yes else self.set_status("preempt cancelled"),
        )

    def _node_or_say(self) -> str | None:
        node = self.selected_node()
        if node is None:
            self.set_status("select a node first", "warning")
        return node

    def _node_dialog(self, action: Action) -> None:
        name = self._node_or_say()
        if name is None:
            return
        state = self.controller.state
        node = state.node(name)
        jobs = drain_impact(state, name)
        body = Text()
        used = fmt.gpus(node_used_milli(node))
        body.append(f"{name}: {node.gpu_model} x{node.gpu_count}, {used} {'GPU' if used == '1' else 'GPUs'} in use, "
                    f"{'cordoned' if node.cordoned else 'schedulable'}{', failed' if node.failed else ''}\n\n")
        if action == Action.DRAIN:
            body.append("Drain cordons the node and evicts every pod on it. ", Style(bold=True))
            body.append("Each gang with a pod here stops everywhere and is requeued:\n")
            for j in jobs:
                body.append(f"  {j}\n")
            if not jobs:
                body.append("  (no jobs run here)\n", Style(dim=True))
        elif action == Action.CORDON:
            body.append("Cordon stops new pods landing here; running jobs keep running")
            body.append(f" ({', '.join(jobs)})" if jobs else "")
            body.append(".\n")
        else:
            body.append("Uncordon lets the scheduler place pods here again.\n")
        self.push_screen(
            ConfirmDialog(f"{str(action).capitalize()} {name}?", body, str(action).capitalize(), danger=action == Action.DRAIN),
            lambda yes: self.post(Command(action, node=name)) if yes else self.set_status(f"{action} cancelled"),
        )

    def action_cordon(self) -> None:
        self._node_dialog(Action.CORDON)

    def action_uncordon(self) -> None:
        self._node_dialog(Action.UNCORDON)

    def action_drain(self) -> None:
        self._node_dialog(Action.DRAIN)

    def action_edit_quota(self) -> None:
        name = self.selected_queue()
        if name is None:
            self.set_status("select a queue (not a cohort) first", "warning")
            return
        state = self.controller.state
        queue = state.queues[name]

        def preview(edit: QuotaEdit):
            return quota_preview(state, name, edit.nominal, edit.borrowing_limit, edit.lending_limit, self.controller.now)

        def apply(edit: QuotaEdit | None) -> None:
            if edit is None:
                self.set_status("quota edit cancelled")
                return
            changes: dict[str, dict[str, float | None]] = {}
            for attr, values in (("quota", edit.nominal), ("borrowing", edit.borrowing_limit), ("lending", edit.lending_limit)):
                current = getattr(queue, {"quota": "nominal", "borrowing": "borrowing_limit", "lending": "lending_limit"}[attr])
                diff = {
                    res: (None if v == INF else v)
                    for res, v, old in zip(("gpu", "cpu", "memory"), values, current)
                    if v != old
                }
                if diff:
                    changes[attr] = diff
            if not changes:
                self.set_status("quota unchanged")
                return
            self.post(
                Command(
                    Action.SET_QUOTA,
                    queue=name,
                    quota=changes.get("quota"),
                    borrowing_limit=changes.get("borrowing"),
                    lending_limit=changes.get("lending"),
                )
            )

        self.push_screen(QuotaDialog(queue, preview), apply)
