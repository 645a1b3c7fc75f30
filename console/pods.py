"""What ``y`` (YAML) and ``l`` (logs) show for the selected job, on a cluster and on a replay.

On a cluster both come from the API server through the controller: ``y`` the job's pods as
``kubectl get pod -o yaml`` prints them (``KubeController.pod_yaml``), ``l`` the last lines of
each pod's log from ``pods/{name}/log`` (``KubeController.pod_logs``), a pod that has not
started saying why, in the API server's words. A replay runs no pods: ``y`` shows the engine's
job as YAML, marked as such, and ``l`` says there are no logs.
"""

from __future__ import annotations

from typing import Any

import yaml
from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text
from usher.engine.state import MILLI, ClusterState, Job

#: what ``l`` says on a replay
NO_LOGS_ON_A_REPLAY = "a replay runs no pods, so there are no logs: enter shows the job's runs and placements"
REPLAY_YAML_NOTE = "# A replay runs no pods: this is the engine's job (what the scheduler knows of it), not a pod.\n"


def job_as_data(state: ClusterState, job: Job) -> dict[str, Any]:
    """The engine's job as plain data, in the scenario file's terms where it has them."""
    pods = []
    for g in job.groups:
        entry: dict[str, Any] = {"name": g.name, "count": g.count, "gpu": g.gpu_milli / MILLI}
        if g.models:
            entry["models"] = sorted(g.models)
        pods.append(entry)
    data: dict[str, Any] = {
        "name": job.name,
        "queue": job.queue,
        "priority": job.priority,
        "state": str(job.state),
        "submit": job.submit,
        "pods": pods,
    }
    for key, value in (("estimate", job.estimate), ("checkpointEvery", job.checkpoint_every)):
        if value is not None:
            data[key] = value
    if not job.preemptible:
        data["preemptible"] = False
    if job.approved:
        data["approved"] = True
    if job.held:
        data["held"] = True
    runs = []
    for run in job.runs:
        r: dict[str, Any] = {"start": run.start}
        if run.end is not None:
            r["end"] = run.end
            r["endReason"] = str(run.end_reason)
        r["placements"] = [
            {"pod": p.pod, "node": state.nodes[p.node_id].name, "gpus": list(p.gpus)} for p in run.placements
        ]
        runs.append(r)
    if runs:
        data["runs"] = runs
    return data


def replay_job_yaml(state: ClusterState, job: Job) -> str:
    return REPLAY_YAML_NOTE + yaml.safe_dump(job_as_data(state, job), sort_keys=False, default_flow_style=None)


def yaml_text(text: str) -> Text:
    """YAML with syntax colours, as a ``Text`` the page can scroll."""
    return Syntax(text, "yaml", theme="ansi_dark", background_color="default").highlight(text)


def logs_text(entries: list[tuple[str, str, str | None]], shown_of: tuple[int, int] | None = None) -> Text:
    """Each pod's (or container's) log under its name; a refusal in the API server's words."""
    t = Text()
    for title, body, error in entries:
        t.append(f"── {title} ", Style(bold=True))
        t.append("─" * max(2, 60 - len(title)) + "\n", Style(dim=True))
        if error is not None:
            t.append(f"{error}\n", Style(italic=True))
        elif not body:
            t.append("(empty)\n", Style(dim=True))
        else:
            t.append(body if body.endswith("\n") else body + "\n")
        t.append("\n")
    if not entries:
        t.append("The job has no pods.\n", Style(dim=True))
    if shown_of is not None and shown_of[0] < shown_of[1]:
        t.append(f"… the logs of {shown_of[0]} of its {shown_of[1]} pods are shown.\n", Style(dim=True))
    return t
