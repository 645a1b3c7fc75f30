"""Every key binding's id, and the operator's keymap file that remaps them.

Each binding in the console carries one of these ids (Textual's ``Binding(..., id=...)``), so a
keymap can move it to another key. The keymap is YAML, one ``id: keys`` per line, keys separated
by commas (``jobs.preempt: ctrl+x``)::

    # ~/.config/usher/keys.yaml
    nodes.drain: D
    view.jobs: j,2

An unknown id or a malformed file is reported with the file and the line; the defaults stay.
The file is read within `CONFIG_LIMITS` (1 MiB, nesting, aliases) like every YAML usher reads.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

import yaml

from usher.engine.scenario.limits import CONFIG_LIMITS
from usher.engine.scenario.yamltree import YamlLimitError, compose_bounded, read_text_bounded


class BindingId(StrEnum):
    QUIT = "app.quit"
    HELP = "app.help"
    COMMAND = "app.command"
    BACK = "app.back"
    THEME = "app.theme"
    PAUSE = "replay.pause"
    FASTER = "replay.faster"
    SLOWER = "replay.slower"
    VIEW_OVERVIEW = "view.overview"
    VIEW_QUEUES = "view.queues"
    VIEW_JOBS = "view.jobs"
    VIEW_NODES = "view.nodes"
    VIEW_TOPOLOGY = "view.topology"
    VIEW_EVENTS = "view.events"
    FILTER = "table.filter"
    INVERT = "table.invert"
    SORT = "table.sort"
    SORT_REVERSE = "table.reverse"
    DETAILS = "jobs.details"
    APPROVE = "jobs.approve"
    HOLD = "jobs.hold"
    RELEASE = "jobs.release"
    PREEMPT = "jobs.preempt"
    YAML = "jobs.yaml"
    LOGS = "jobs.logs"
    CORDON = "nodes.cordon"
    UNCORDON = "nodes.uncordon"
    DRAIN = "nodes.drain"
    EDIT_QUOTA = "queues.edit"
    ZOOM_IN = "topology.zoom_in"
    ZOOM_OUT = "topology.zoom_out"
    METRIC = "topology.metric"


def default_keymap_path() -> Path:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "usher" / "keys.yaml"


def load_keymap(path: Path) -> dict[str, str]:
    """Read a keymap file: ``{binding id: keys}``; ``ValueError`` naming the file and line."""
    try:
        text = read_text_bounded(path, CONFIG_LIMITS)
        node = compose_bounded(text, CONFIG_LIMITS)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: cannot read: not UTF-8 text") from None
    except YamlLimitError as exc:
        raise ValueError(exc.describe(str(path))) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML") from None
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ValueError(f"{path}:{node.start_mark.line + 1}: expected 'binding-id: keys' lines")
    known = {str(b) for b in BindingId}
    out: dict[str, str] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        name = key_node.value
        if name not in known:
            raise ValueError(f"{path}:{line}: unknown binding id {name!r}; known ids: {', '.join(sorted(known))}")
        if not isinstance(value_node, yaml.ScalarNode) or not str(value_node.value).strip():
            raise ValueError(f"{path}:{line}: {name}: expected keys such as 'ctrl+d' or 'x,y'")
        keys = [k.strip() for k in str(value_node.value).split(",")]
        if any(not k for k in keys):
            raise ValueError(f"{path}:{line}: {name}: an empty key in {value_node.value!r}")
        out[name] = ",".join(keys)
    return out
