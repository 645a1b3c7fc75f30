"""Loading a scenario file: YAML with line numbers, schema validation, traces, cross-checks.

`load_scenario(path)` and `parse_scenario(text)` return a `Scenario` or raise `ScenarioError`
listing every problem found, each with the file, the YAML path (`jobs[3].pods[0].gpu`) and the
line. Schema errors are all reported at once; the cross-checks run once the schema passes.
"""

from __future__ import annotations

import asyncio
import difflib
import gc
import os
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .checks import check_scenario
from .errors import FieldIssues, Locator, PathSegment, Problem, ScenarioError, format_path
from .limits import (
    CONFIG_LIMITS,
    MAX_EVENTS,
    MAX_GPUS,
    MAX_JOBS,
    MAX_NODES,
    MAX_PODS,
    MAX_PODS_PER_JOB,
    MAX_QUEUES,
    SCENARIO_LIMITS,
)
from .models import Scenario, validate_scenario
from .traces import TraceImport, import_traces
from .yamltree import (
    FAST_READER,
    NeedsLines,
    YamlDocument,
    YamlLimitError,
    read_plain,
    read_text_bounded,
    read_yaml,
)


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and check a scenario file; trace paths are relative to its folder.

    The file is read no further than `SCENARIO_LIMITS.max_bytes`; a larger one is a problem.
    """
    file = Path(path)
    try:
        text = read_text_bounded(file, SCENARIO_LIMITS)
    except YamlLimitError as exc:
        raise ScenarioError([exc.problem(str(file))]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ScenarioError([Problem(str(file), "", None, f"cannot read the file: {reason}")]) from None
    return parse_scenario(text, file=str(file), base_dir=file.parent)


FAST_PATH = FAST_READER
"""Whether `parse_scenario` tries the fast path first (libyaml present; tests and
`bench/loading.py --slow` turn it off to compare)."""


def parse_scenario(text: str, file: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Check a scenario given as YAML text; `file` names it in problems, `base_dir` anchors traces.

    The text must be within `limits.SCENARIO_LIMITS` (size, nesting, aliases) and its counts
    within the `limits` module's (nodes, GPUs, jobs, pods ...); past one is a problem.

    Two paths give the same `Scenario` and the same problems. The fast one (`FAST_PATH`) reads
    plain data without lines (`yamltree.read_plain`) and validates it; YAML that needs a report
    (a syntax error, a limit, a duplicate key ...) or a schema error sends the text to the
    line-tracking path, which reports it with YAML path and line as always. Cross-check errors
    and warnings need only the lines: the fast path reads them then (`_LazyLines`).
    """
    with _gc_paused():
        if FAST_PATH:
            scenario = _parse_fast(text, file, base_dir)
            if scenario is not None:
                return scenario
        return _parse_with_lines(text, file, base_dir)


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a scenario loads (in any thread); then as before.

    Loading makes millions of objects and no cycles worth collecting, and each automatic
    collection walks all of them: a third of B3's load time. Nested and concurrent loads share
    one pause, so the collector's state is restored once, by the last load to finish.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


class _LazyLines:
    """The lines of a scenario's YAML paths, read (by `read_yaml`) the first time one is asked."""

    def __init__(self, text: str) -> None:
        self.text: str | None = text
        self.doc: YamlDocument | None = None

    def line_of(self, path: Sequence[PathSegment]) -> int | None:
        """As `YamlDocument.line_of` on the text's line-tracking read."""
        if self.doc is None:
            assert self.text is not None
            self.doc = read_yaml(self.text, SCENARIO_LIMITS)
            self.text = None
        return self.doc.line_of(path)


def _parse_fast(text: str, file: str, base_dir: Path | None) -> Scenario | None:
    """`parse_scenario` without a line table, or None where the line-tracking path must report.

    None for anything `read_plain` leaves to `read_yaml` and for every schema error (their
    messages and paths come from pydantic's error locations against the line-tracking read).
    """
    try:
        data = read_plain(text, SCENARIO_LIMITS)
    except NeedsLines:
        return None
    if type(data) is not dict:
        return None  # empty, or not a mapping: a problem
    try:
        scenario = validate_scenario(data)
    except ValidationError:
        return None
    del data
    lines = _LazyLines(text)
    locator = Locator(file, lines.line_of)
    return _checked(scenario, file, base_dir, locator, [])


def _parse_with_lines(text: str, file: str, base_dir: Path | None) -> Scenario:
    """`parse_scenario` through the line-tracking read: every problem with its path and line."""
    doc = read_yaml(text, SCENARIO_LIMITS)
    locator = Locator(file, doc.line_of)
    problems = [Problem(file, format_path(issue.path), issue.line, issue.message) for issue in doc.issues]
    if doc.data is None:
        if not problems:
            problems.append(Problem(file, "", 1, "the file is empty; a scenario needs at least `name`"))
        raise ScenarioError(problems)
    if not isinstance(doc.data, dict):
        kind = "a list" if isinstance(doc.data, list) else f"the value {doc.data!r}"
        message = f"the top level must be a mapping (name:, nodes:, jobs: ...), not {kind}"
        problems.append(Problem(file, "", doc.line_of(()), message))
        raise ScenarioError(problems)
    try:
        scenario = Scenario.model_validate(doc.data)
    except ValidationError as exc:
        flagged = {p.path for p in problems}  # a value the YAML reader already refused
        problems.extend(p for p in _schema_problems(exc, doc, locator) if p.path not in flagged)
        raise ScenarioError(_ordered(problems, file)) from None
    return _checked(scenario, file, base_dir, locator, problems)


def _checked(scenario: Scenario, file: str, base_dir: Path | None, locator: Locator, problems: list[Problem]) -> Scenario:
    """A schema-valid scenario with its traces imported and cross-checked, or `ScenarioError`."""
    imported = import_traces(scenario.traces, base_dir if base_dir is not None else Path.cwd(), locator)
    problems.extend(imported.problems)
    too_large = size_problems(scenario, imported, locator.problem)
    if too_large:  # before the checks, which generate every node and pod
        raise ScenarioError(_ordered([*problems, *too_large], file))
    checked = check_scenario(scenario, imported, locator)
    problems.extend(checked.errors)
    if problems:
        raise ScenarioError(_ordered(problems, file))
    scenario.attach_traces(imported.nodes, imported.jobs)
    scenario.warnings.extend(checked.warnings)
    return scenario


#: The keys a queue configuration (the cluster's ``usher-queues`` ConfigMap) may hold.
QUEUE_CONFIG_KEYS = ("topology", "priorityClasses", "queues")


NEEDS_A_QUEUE = "a queue config needs `queues:` with at least one queue (without one, every pod waits as UnknownQueue)"


def parse_queue_config(text: str, file: str = "<queues>", name: str = "cluster") -> Scenario:
    """Check a cluster's queue configuration: a scenario's ``topology`` and ``queues`` only.

    Problems are reported like a scenario's (YAML path and line); the result is a ``Scenario``
    named ``name`` with no nodes or jobs, so the engine builds its queues the same way. The text
    must be within `limits.CONFIG_LIMITS` (1 MiB, nesting, aliases): a hostile edit of the
    ConfigMap is refused as a problem, in bounded time and memory.

    A config without a queue (an empty text, only comments, no ``queues`` or an empty list) is
    refused like any other mistake: accepted, it would leave every pod waiting as UnknownQueue.

    It takes a while for a large config (up to ~1 s for 1 MiB); in a coroutine, call
    `parse_queue_config_async`, which runs it off the event loop.
    """
    doc = read_yaml(text, CONFIG_LIMITS)
    problems = [Problem(file, format_path(issue.path), issue.line, issue.message) for issue in doc.issues]
    if doc.data is None and not problems:
        # nothing at all (an empty key, only comments): not a config without queues, which
        # would leave every pod waiting as UnknownQueue, but a mistake to refuse
        raise ScenarioError([Problem(file, "", None, f"the queue config is empty; {NEEDS_A_QUEUE}")])
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        problems.append(Problem(file, "", doc.line_of(()), "the top level must be a mapping with `queues:`"))
        raise ScenarioError(problems)
    if not problems and not data.get("queues"):
        line = doc.line_of(("queues",)) if "queues" in data else doc.line_of(())
        problems.append(Problem(file, "queues", line, f"{'empty' if 'queues' in data else 'missing'}; {NEEDS_A_QUEUE}"))
    for key in data:
        if key not in QUEUE_CONFIG_KEYS:
            allowed = ", ".join(QUEUE_CONFIG_KEYS)
            problems.append(Problem(file, str(key), doc.line_of((key,)), f"unknown field; a queue configuration has {allowed}"))
    if problems:
        raise ScenarioError(_ordered(problems, file))
    locator = Locator(file, doc.line_of)
    try:
        scenario = Scenario.model_validate({"name": name, **data})
    except ValidationError as exc:
        raise ScenarioError(_ordered(_schema_problems(exc, doc, locator), file)) from None
    too_large = size_problems(scenario, None, locator.problem)
    if too_large:
        raise ScenarioError(_ordered(too_large, file))
    checked = check_scenario(scenario, TraceImport(), locator)
    if checked.errors:
        raise ScenarioError(_ordered(checked.errors, file))
    return scenario


async def parse_queue_config_async(text: str, file: str = "<queues>", name: str = "cluster") -> Scenario:
    """`parse_queue_config` in a worker thread, so the event loop keeps running meanwhile.

    Same result and `ScenarioError`; the parse is bounded by `CONFIG_LIMITS` either way.
    """
    return await asyncio.to_thread(parse_queue_config, text, file, name)


def _ordered(problems: list[Problem], file: str) -> list[Problem]:
    """Unique problems, the scenario file's first by line, then other files' in found order."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (0, p.line or 0) if p.file == file else (1, 0))


# --- pydantic errors -> problems ------------------------------------------------------------


def _schema_problems(exc: ValidationError, doc: YamlDocument, locator: Locator) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors():
        kind = error["type"]
        path = _data_path(doc.data, error["loc"], missing=kind == "missing")
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, FieldIssues):
            problems.extend(locator.problem((*path, name), message) for name, message in cause.issues)
        elif kind == "missing":
            problems.append(locator.problem(path, "required field is missing"))
        elif kind == "extra_forbidden":
            problems.append(locator.problem(path, _unknown_field(path)))
        elif isinstance(cause, Exception):
            problems.append(locator.problem(path, str(cause)))
        else:
            problems.append(locator.problem(path, _message(error["msg"], error.get("input"), error.get("ctx", {}))))
    return problems


def _data_path(data: Any, loc: Sequence[PathSegment], *, missing: bool) -> tuple[PathSegment, ...]:
    """The part of a pydantic `loc` that names data in the file (drops union tags, `[key]`)."""
    path: list[PathSegment] = []
    node = data
    for index, seg in enumerate(loc):
        if _holds(node, seg):
            node = node[seg]
        elif not (missing and index == len(loc) - 1):
            continue
        path.append(seg)
    return tuple(path)


def _holds(node: Any, seg: PathSegment) -> bool:
    if isinstance(node, dict):
        return seg in node
    return isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)


def _message(msg: str, value: object, ctx: dict[str, Any]) -> str:
    if msg.startswith("List should have at least"):
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must have at least {least} items"
    if msg.startswith("Input should be"):
        msg = "must be" + msg[len("Input should be") :]
    if isinstance(value, str | int | float | bool) and "got" not in msg:
        msg += f" (got {value!r})"
    return msg


def _unknown_field(path: tuple[PathSegment, ...]) -> str:
    name = str(path[-1]) if path else ""
    allowed = _fields_at(path[:-1])
    if not allowed:
        return "unknown field"
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    return f"unknown field (allowed here: {', '.join(allowed)})"


def _fields_at(path: Sequence[PathSegment]) -> list[str]:
    """YAML field names of the model found at `path` in a scenario, if it is a model."""
    target: Any = Scenario
    for seg in path:
        target = _strip_optional(target)
        if isinstance(target, type) and issubclass(target, BaseModel):
            found = next((f for name, f in target.model_fields.items() if seg in (name, f.alias)), None)
            if found is None:
                return []
            target = found.annotation
        elif get_origin(target) is list and isinstance(seg, int):
            target = get_args(target)[0]
        elif get_origin(target) is dict:
            target = get_args(target)[1]
        else:
            return []
    target = _strip_optional(target)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return [f.alias or name for name, f in target.model_fields.items()]
    return []


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def size_problems(
    scenario: Scenario,
    imported: TraceImport | None,
    problem: Callable[[tuple[PathSegment, ...], str], Problem],
) -> list[Problem]:
    """Totals over the whole scenario that are past a limit, checked before nodes are generated.

    `problem(path, message)` makes a `Problem` at a YAML path (a `Locator.problem`).
    """
    found: list[Problem] = []
    trace_nodes = len(imported.nodes) if imported is not None else 0
    trace_jobs = imported.jobs if imported is not None else []
    nodes = len(scenario.nodes) + sum(group.count for group in scenario.node_groups) + trace_nodes
    if nodes > MAX_NODES:
        where = ("nodeGroups",) if scenario.node_groups else ("nodes",) if scenario.nodes else ("traces",)
        found.append(problem(where, f"{nodes:,} nodes in all; usher refuses scenarios with more than {MAX_NODES:,}"))
    gpus = (
        sum(node.gpus for node in scenario.nodes)
        + sum(group.count * group.template.gpus for group in scenario.node_groups)
        + (sum(node.gpus for node in imported.nodes) if imported is not None else 0)
    )
    if gpus > MAX_GPUS:
        where = ("nodeGroups",) if scenario.node_groups else ("nodes",) if scenario.nodes else ("traces",)
        found.append(problem(where, f"{gpus:,} GPUs in all; usher refuses scenarios with more than {MAX_GPUS:,}"))
    jobs = len(scenario.jobs) + len(trace_jobs)
    if jobs > MAX_JOBS:
        found.append(problem(("jobs",), f"{jobs:,} jobs in all; usher refuses scenarios with more than {MAX_JOBS:,}"))
    for index, job in enumerate(scenario.jobs):
        if job.pod_count > MAX_PODS_PER_JOB:
            found.append(
                problem(
                    ("jobs", index),
                    f"{job.pod_count:,} pods in one job; usher refuses jobs with more than {MAX_PODS_PER_JOB:,}",
                )
            )
    pods = sum(job.pod_count for job in scenario.jobs) + sum(job.pod_count for job in trace_jobs)
    if pods > MAX_PODS:
        found.append(problem(("jobs",), f"{pods:,} pods in all; usher refuses scenarios with more than {MAX_PODS:,}"))
    if len(scenario.queues) > MAX_QUEUES:
        found.append(problem(("queues",), f"{len(scenario.queues):,} queues; usher refuses more than {MAX_QUEUES:,}"))
    if len(scenario.events) > MAX_EVENTS:
        found.append(problem(("events",), f"{len(scenario.events):,} events; usher refuses more than {MAX_EVENTS:,}"))
    return found
