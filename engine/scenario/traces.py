"""Import of public GPU-cluster traces into scenario nodes and jobs.

Format `openb` (Alibaba cluster-trace-gpu-v2023, the FGD paper's data):
- node list columns `sn, cpu_milli, memory_mib, gpu, model` -> one node per row;
- pod list columns `name, cpu_milli, memory_mib, num_gpu, gpu_milli` and optionally
  `gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time` -> one job with one
  pod per row, its priority from the QoS class `qos` (``QOS_CLASSES``). A pod asks for `num_gpu` GPUs, or for `gpu_milli / 1000` of one GPU when
  `num_gpu` is 1 and `gpu_milli` is below 1000; it arrives at `creation_time` and runs for
  `deletion_time - scheduled_time` when both are there (else until the end).

Rows are checked here and turned into models with `model_construct` (no second validation),
so that a trace of thousands of pods is checked once per row, not again by pydantic.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TextIO

from .errors import Locator, Problem
from .limits import MAX_GPUS_PER_NODE, MAX_JOBS, MAX_NODES, too_large
from .models import HOSTNAME_LABEL, JobSpec, NodeSpec, PodSpec, TraceSpec

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
MAX_ROW_PROBLEMS = 20
"""Malformed rows reported per file before the rest are only counted."""

MIB = 2**20
TRACE_POD_NAME = "pod"


class Qos(StrEnum):
    """The QoS classes of the openb pod list's ``qos`` column."""

    LATENCY_SENSITIVE = "LS"
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BE"


QOS_CLASSES: dict[Qos, tuple[int, bool]] = {
    Qos.LATENCY_SENSITIVE: (100, False),
    Qos.GUARANTEED: (100, False),
    Qos.BURSTABLE: (50, False),
    Qos.BEST_EFFORT: (0, True),
}
"""A pod's priority and whether it may be preempted, by its QoS class; a pod without one (no
``qos`` column, or an empty cell) is best effort."""


@dataclass(frozen=True)
class TraceOrigin:
    """Where an imported node or job came from."""

    trace: int
    file: str
    line: int


@dataclass
class TraceImport:
    """Everything imported from a scenario's `traces`, in order, with origins and problems."""

    nodes: list[NodeSpec] = field(default_factory=list)
    jobs: list[JobSpec] = field(default_factory=list)
    node_origins: list[TraceOrigin] = field(default_factory=list)
    job_origins: list[TraceOrigin] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class _BadCell(ValueError):
    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column = column


def import_traces(traces: list[TraceSpec], base_dir: Path, locator: Locator) -> TraceImport:
    """Read every trace entry's files (paths relative to `base_dir`)."""
    result = TraceImport()
    for index, trace in enumerate(traces):
        if trace.nodes is not None:
            _import_file(result, index, "nodes", trace.nodes, base_dir, locator, trace)
        if trace.pods is not None:
            _import_file(result, index, "pods", trace.pods, base_dir, locator, trace)
    return result


def _import_file(
    result: TraceImport,
    index: int,
    kind: str,
    name: str,
    base_dir: Path,
    locator: Locator,
    trace: TraceSpec,
) -> None:
    path = base_dir / name
    shown = str(path)
    # rows past the limit on nodes (jobs) are never read: a huge file costs no more than that
    most = max(0, MAX_NODES - len(result.nodes)) if kind == "nodes" else max(0, MAX_JOBS - len(result.jobs))
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(itertools.islice(_rows(handle), most + 2))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        result.problems.append(locator.problem(("traces", index, kind), f"cannot read {shown}: {reason}"))
        return
    if not rows:
        result.problems.append(Problem(shown, "", 1, "the file is empty; expected a header row"))
        return
    header_line, header = rows[0]
    columns = {column.strip(): i for i, column in enumerate(header)}
    required = NODE_COLUMNS if kind == "nodes" else POD_COLUMNS
    missing = [column for column in required if column not in columns]
    if missing:
        result.problems.append(
            Problem(shown, "", header_line, f"missing column(s) {', '.join(missing)} in the header row")
        )
        return
    if len(rows) > most + 1:
        limit, noun = (MAX_NODES, "nodes") if kind == "nodes" else (MAX_JOBS, "jobs")
        result.problems.append(
            Problem(shown, "", rows[-1][0], f"more than {limit:,} {noun} in all; usher refuses scenarios with more")
        )
        return
    bad_rows = 0
    for line, row in rows[1:]:
        if len(row) != len(header):
            problem = Problem(shown, "", line, f"expected {len(header)} columns, got {len(row)}")
        else:
            try:
                if kind == "nodes":
                    result.nodes.append(_node(row, columns, trace.prefix))
                    result.node_origins.append(TraceOrigin(index, shown, line))
                else:
                    assert trace.queue is not None
                    result.jobs.append(_job(row, columns, trace.prefix, trace.queue))
                    result.job_origins.append(TraceOrigin(index, shown, line))
                continue
            except _BadCell as exc:
                problem = Problem(shown, exc.column, line, str(exc))
        bad_rows += 1
        if bad_rows <= MAX_ROW_PROBLEMS:
            result.problems.append(problem)
    if bad_rows > MAX_ROW_PROBLEMS:
        result.problems.append(Problem(shown, "", None, f"... and {bad_rows - MAX_ROW_PROBLEMS} more malformed rows"))


def _rows(handle: TextIO) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(handle)
    for row in reader:
        if row and any(cell.strip() for cell in row):
            yield reader.line_num, row


def _cell(row: list[str], columns: dict[str, int], column: str) -> str:
    index = columns.get(column)
    return row[index].strip() if index is not None else ""


def _count(row: list[str], columns: dict[str, int], column: str, *, optional: bool = False) -> int | None:
    text = _cell(row, columns, column)
    if not text:
        if optional:
            return None
        raise _BadCell(column, "a value is required")
    try:
        value = int(text)
    except ValueError:
        raise _BadCell(column, f"expected a whole number (got {text!r})") from None
    if value < 0:
        raise _BadCell(column, f"must not be negative (got {value})")
    return value


def _required(row: list[str], columns: dict[str, int], column: str) -> int:
    value = _count(row, columns, column)
    assert value is not None
    return value


def _name(row: list[str], columns: dict[str, int], column: str, prefix: str) -> str:
    name = _cell(row, columns, column)
    if not name:
        raise _BadCell(column, "a name is required")
    return prefix + name


def _node(row: list[str], columns: dict[str, int], prefix: str) -> NodeSpec:
    name = _name(row, columns, "sn", prefix)
    cpu = _required(row, columns, "cpu_milli")
    memory = _required(row, columns, "memory_mib") * MIB
    gpus = _required(row, columns, "gpu")
    if gpus > MAX_GPUS_PER_NODE:
        raise _BadCell("gpu", too_large(gpus, MAX_GPUS_PER_NODE))
    model = _cell(row, columns, "model") or None
    return NodeSpec.model_construct(
        name=name,
        labels={HOSTNAME_LABEL: name},
        gpus=gpus,
        gpu_model=model,
        gpu_memory=None,
        nvlink=None,
        cpu=cpu,
        memory=memory,
    )


def _job(row: list[str], columns: dict[str, int], prefix: str, queue: str) -> JobSpec:
    name = _name(row, columns, "name", prefix)
    cpu = _required(row, columns, "cpu_milli")
    memory = _required(row, columns, "memory_mib") * MIB
    num_gpu = _required(row, columns, "num_gpu")
    if num_gpu > MAX_GPUS_PER_NODE:
        raise _BadCell("num_gpu", too_large(num_gpu, MAX_GPUS_PER_NODE))
    gpu_milli = _required(row, columns, "gpu_milli")
    if num_gpu == 1 and gpu_milli > 1000:
        raise _BadCell("gpu_milli", f"must be 1000 or less for one GPU (got {gpu_milli})")
    gpu = gpu_milli / 1000 if num_gpu == 1 and 0 < gpu_milli < 1000 else float(num_gpu)
    models = [m.strip() for m in _cell(row, columns, "gpu_spec").split("|") if m.strip()]
    created = _count(row, columns, "creation_time", optional=True)
    deleted = _count(row, columns, "deletion_time", optional=True)
    scheduled = _count(row, columns, "scheduled_time", optional=True)
    qos = _cell(row, columns, "qos") or Qos.BEST_EFFORT
    if qos not in QOS_CLASSES:
        raise _BadCell("qos", f"{qos!r} is not a QoS class; expected one of {', '.join(Qos)}")
    priority, preemptible = QOS_CLASSES[Qos(qos)]
    duration: float | None = None
    if deleted is not None and scheduled is not None and deleted - scheduled > 0:
        duration = float(deleted - scheduled)
    pod = PodSpec.model_construct(
        name=TRACE_POD_NAME, count=1, gpu=gpu, gpu_model=models, cpu=cpu, memory=memory, topology=None
    )
    return JobSpec.model_construct(
        name=name,
        queue=queue,
        submit=float(created or 0),
        priority=priority,
        duration=duration,
        estimate=duration,
        preemptible=preemptible,
        checkpoint_every=None,
        min_count=None,
        pods=[pod],
    )
