"""The console's detail pages: a job (why it waits, what it asks for, its pods, runs and events),
an event whole, and a job's pods as YAML or their logs.

A page is a :class:`~.dialogs.TextScreen` over the view (``esc`` closes it). Pods' YAML and logs
are read from the API server on a cluster, in a worker, so the console keeps drawing while the
answer comes; on a replay there are no pods: ``y`` shows the job itself and ``l`` says why there
are no logs (the controller's ``Capability.PODS`` tells them apart).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text

from usher.engine import fmt, reservations
from usher.engine.contract import ConsoleController
from usher.engine.enums import Capability, JobState
from usher.engine.state import MILLI

from .catalog import View
from .dialogs import TextScreen
from .model import ConsoleModel, moment, span
from .pods import NO_LOGS_ON_A_REPLAY, logs_text, replay_job_yaml, yaml_text
from .table import RowTable
from .views import render_outside_job

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[int]
else:
    _Base = object


def asks_words(job) -> str:
    """What a job asks for, in pods and GPUs: ``4 pods x 8 GPUs (worker)``; a pod group's name
    is added only when it is one a person gave (not the ``g0`` a cluster's gang is built with)."""
    parts = []
    for g in job.groups:
        if g.gpu_milli >= MILLI and g.gpu_milli % MILLI == 0:
            each = fmt.plural(g.gpu_milli // MILLI, "GPU")
        elif g.gpu_milli:
            each = f"{fmt.gpus(g.gpu_milli)} of a GPU"
        else:
            each = "no GPU"
        name = "" if not g.name or re.fullmatch(r"g\d+|pods?", g.name) else f" ({g.name})"
        parts.append(f"{fmt.plural(g.count, 'pod')} x {each}{name}")
    return " + ".join(parts)


class Pages(_Base):
    """Enter, ``y`` and ``l``: the selected job's or event's page, its pods' YAML, their logs."""

    controller: ConsoleController
    model: ConsoleModel
    view: View

    def action_details(self) -> None:
        if self.view == View.QUEUES and self.focused is self.query_one("#queue-table", RowTable):
            self.query_one("#queue-jobs", RowTable).focus()
            self._refresh_bar()
            return
        if self.view == View.EVENTS:
            self.show_event()
            return
        name = self.selected_job()
        if name is None:
            return
        self.push_screen(TextScreen(f"Job {name}", self.job_details(name)))

    def show_event(self) -> None:
        """Enter in the Events view: the selected event whole (at 80 columns its result is cut)."""
        table = self.query_one("#event-table", RowTable)
        key = table.current_key
        row = next((r for r in table.rows if r.key == key), None)
        if row is None:
            self.set_status("select an event first", "warning")
            return
        when, actor, action, target, result = row.cells
        body = Text()
        for label, value in (("time", when), ("actor", actor), ("action", action), ("target", target)):
            body.append(f"{label:<8}", Style(bold=True))
            body.append(f"{value}\n")
        body.append("result\n", Style(bold=True))
        body.append(result + "\n")
        self.push_screen(TextScreen(f"Event: {action} {target}".rstrip(), body))

    def action_pod_yaml(self) -> None:
        """``y``: the selected job's pods as YAML, from the API server (on a replay: the job)."""
        name = self._job_or_say()
        if name is None:
            return
        if Capability.PODS not in self.controller.capabilities:
            state = self.controller.state
            self.push_screen(TextScreen(f"YAML of job {name} (a replay: no pods)", yaml_text(replay_job_yaml(state, state.job(name)))))
            return
        self.set_status(f"reading the pods of {name} from the API server…")
        self.run_worker(self._show_pod_yaml(name), group="reads", exclusive=True)

    async def _show_pod_yaml(self, name: str) -> None:
        try:
            text = await self.controller.pod_yaml(name)
        except Exception as exc:  # noqa: BLE001 - an unanswered read is reported, never a crash
            self.set_status(f"✗ YAML of {name}: {exc}", "error")
            return
        self.set_status("")
        self.push_screen(TextScreen(f"YAML of the pods of {name}", yaml_text(text)))

    def action_pod_logs(self) -> None:
        """``l``: the last lines of the logs of the selected job's pods (none on a replay)."""
        name = self._job_or_say()
        if name is None:
            return
        if Capability.PODS not in self.controller.capabilities:
            self.set_status(NO_LOGS_ON_A_REPLAY, "warning")
            return
        self.set_status(f"reading the logs of {name} from the API server…")
        self.run_worker(self._show_pod_logs(name), group="reads", exclusive=True)

    async def _show_pod_logs(self, name: str) -> None:
        try:
            entries = await self.controller.pod_logs(name)
        except Exception as exc:  # noqa: BLE001 - an unanswered read is reported, never a crash
            self.set_status(f"✗ logs of {name}: {exc}", "error")
            return
        self.set_status("")
        pods = self.controller.pods_of_job(name)
        shown = len({title.split("/")[0] for title, _, _ in entries})
        self.push_screen(TextScreen(f"Logs of the pods of {name}", logs_text(entries, (shown, len(pods)))))

    def job_details(self, name: str) -> Text:
        """The detail page: why it waits (in words), its request, its runs and preemptions."""
        state = self.controller.state
        now = self.controller.now
        outside = self.model.outside_job(name)
        if outside is not None:  # kept out of the engine's queues: no engine job to tell of
            pods = self.controller.pods_of_job(name)
            return render_outside_job(outside, pods, state.audit, now)
        job = state.job(name)
        expl = self.model.explanations(now, fresh=True).get(job.id)
        t = Text()
        t.append(f"{job.name}", Style(bold=True))
        t.append(f"   queue {job.queue}   priority {job.priority}   state {job.state}\n")
        t.append(f"asks for     {asks_words(job)}\n")
        if rules := "; ".join(dict.fromkeys(w for g in job.groups if g.rules is not None and (w := g.rules.words()))):
            t.append(f"pod rules    {rules}\n")
        if job.estimate:
            t.append(f"estimate     {span(job.estimate)}")
            if job.checkpoint_every:
                t.append(f", checkpoints every {span(job.checkpoint_every)}")
            t.append("\n")
        t.append(f"submitted    {moment(job.submit)}, waited {span(max(0.0, now - job.submit) if job.current_run is None and job.state != JobState.FINISHED else 0.0) or '-'} so far\n")
        if expl is not None and expl.reason:
            t.append("\nWhy it waits\n", Style(bold=True, underline=True))
            t.append(f"  {expl.reason}: {expl.message}\n")
            if expl.queue_position:
                t.append(f"  position {expl.queue_position} in queue {job.queue}\n")
            if expl.estimated_start is not None:
                when = "now" if expl.estimated_start <= now else f"in {span(expl.estimated_start - now)} (at {moment(expl.estimated_start)})"
                t.append(f"  expected to start {when}\n")
            elif expl.reason:
                t.append("  no start time can be planned yet\n", Style(dim=True))
        held = reservations.held(state)
        if held is not None and held.holder == job.name and job.current_run is None:
            t.append("\nReservation\n", Style(bold=True, underline=True))
            quota = f" of queue {held.queue}'s quota" if held.limited else ""
            cohort = f" (with its cohort {held.cohort})" if held.limited and held.cohort else ""
            nodes = f" and room on {', '.join(held.nodes[:6])}{' …' if len(held.nodes) > 6 else ''}" if held.nodes else ""
            when = "now" if held.start <= now else f"{moment(held.start)} (in {span(held.start - now)})"
            t.append(f"  holds {fmt.gpus(held.gpus * MILLI)} GPUs{quota}{cohort}{nodes} from {when}\n")
            t.append("  later jobs that would run past that start wait for it; shorter ones start beside it\n", Style(dim=True))
        pods = self.controller.pods_of_job(job.name)
        if pods:
            t.append("\nPods\n", Style(bold=True, underline=True))
            for pod, phase, node in pods[:24]:
                t.append(f"  {pod:<40} {phase:<12} {node or '-'}\n")
            if len(pods) > 24:
                t.append(f"  … {len(pods) - 24} more pods\n")
        t.append("\nRuns\n", Style(bold=True, underline=True))
        # a watching mirror may have made earlier jobs of this name (one per time its pods came
        # back): their runs are this job's history
        runs = [run for j in state.jobs if j.name == job.name for run in j.runs]
        if not runs:
            t.append("  none yet\n", Style(dim=True))
        for k, run in enumerate(runs, 1):
            end = "running" if run.end is None else f"{moment(run.end)} ({run.end_reason}{' by ' + run.by if run.by else ''})"
            t.append(f"  #{k}  {moment(run.start)} → {end}\n")
            for p in run.placements[:12]:
                share = f" ({fmt.gpus(p.share)} of a GPU)" if p.share else ""
                t.append(f"      {p.pod:<28} {state.nodes[p.node_id].name:<16} GPUs {','.join(map(str, p.gpus))}{share}\n")
            if len(run.placements) > 12:
                t.append(f"      … {len(run.placements) - 12} more pods\n")
        related = [e for e in state.audit if e.target == job.name or job.name in e.result]
        if related:
            t.append("\nEvents\n", Style(bold=True, underline=True))
            for e in related[-10:]:
                t.append(f"  {moment(e.time):>9}  {e.actor:<10} {e.action:<10} {e.result}\n")
        return t
