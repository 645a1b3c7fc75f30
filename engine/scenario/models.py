"""The pydantic schema of a scenario file (contract section 2), with canonical values.

YAML names are camelCase (`gpuModel`, `nodeGroups`, ...); Python attributes are snake_case.
After validation every quantity is canonical: durations are float seconds, CPU is int
millicores, memory is int bytes, pod GPUs are a float that is either whole or a share in
(0, 1) rounded to 1/1000. Unknown fields are errors everywhere, so a typo never slips by.

Checks that need more than one object (names that must exist, capacity) live in `checks.py`;
the loader (`loader.py`) turns both kinds of failure into `Problem`s with paths and lines.

Longer than the house's 600 lines: one pydantic class per part of the contract, in the
contract's order, so the module reads as the scenario file's schema.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ..enums import (
    Action,
    Approval,
    BorrowWithinCohort,
    ReclaimWithinCohort,
    TopologyMode,
    WithinQueue,
)
from .errors import FieldIssues, Problem
from ..podrules.replay import JOB_LABEL
from .job_rules import AntiAffinitySpec, SpreadSpec
from .limits import MAX_GPUS_PER_NODE, MAX_NODES, MAX_PODS_PER_JOB, too_large
from .quantity import parse_cpu, parse_duration, parse_memory
from .schema_base import LabelSelector, SchemaModel, SelectorTerm

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""Always the node's name, on every node."""


GPU_SHARE_STEP = 1000
"""Fractional GPU requests are rounded to 1/GPU_SHARE_STEP of a GPU."""


# The enums are the engine's own (one definition for the file format and the engine);
# the scenario-side names are kept as aliases.
WithinQueuePolicy = WithinQueue
ReclaimWithinCohortPolicy = ReclaimWithinCohort
BorrowWithinCohortPolicy = BorrowWithinCohort
EventAction = Action


class TraceFormat(StrEnum):
    OPENB = "openb"


NODE_ACTIONS = frozenset(
    {EventAction.DRAIN, EventAction.CORDON, EventAction.UNCORDON, EventAction.FAIL, EventAction.RECOVER}
)
JOB_ACTIONS = frozenset({EventAction.APPROVE, EventAction.PREEMPT, EventAction.HOLD, EventAction.RELEASE})
QUEUE_ACTIONS = frozenset({EventAction.SET_QUOTA})


# --- canonical scalar types -------------------------------------------------------------


def _gpu_amount(value: object) -> float:
    """A finite number of GPUs, 0 or more (quotas may be fractional)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number of GPUs (got {value!r})")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"must be a number of GPUs (got {value!r})") from None
    if not 0 <= number < float("inf"):
        raise ValueError(f"must be a number of GPUs, 0 or more (got {value!r})")
    return number


def _gpu_request(value: object) -> float:
    """A pod's GPUs: whole, or a share of one GPU rounded to 1/GPU_SHARE_STEP."""
    number = _gpu_amount(value)
    if number > MAX_GPUS_PER_NODE:  # a pod runs on one node
        raise ValueError(too_large(value, MAX_GPUS_PER_NODE))
    if number.is_integer():
        return number
    if number > 1:
        raise ValueError(f"must be a whole number or a share between 0 and 1 (got {value!r})")
    share = round(number * GPU_SHARE_STEP) / GPU_SHARE_STEP
    if share == 0:
        raise ValueError(f"a GPU share must be at least {1 / GPU_SHARE_STEP} (got {value!r})")
    return share


def _at_most(most: int) -> BeforeValidator:
    """Refuses a count above `most`, naming the limit: counts size allocations.

    Checked before the integer is parsed, so `count: 1e12` (a string to YAML 1.1) is refused
    for its size rather than as "not an integer".
    """

    def check(value: object) -> object:
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                return value
        if isinstance(number, int | float) and not isinstance(number, bool) and number > most:
            raise ValueError(too_large(value, most))
        return value

    return BeforeValidator(check)


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be longer than zero (got {value!r})")
    return seconds


def _string_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _label_value(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _priority(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be an integer or a priority class name (got {value!r})")
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration)]
PositiveSeconds = Annotated[float, BeforeValidator(_positive_duration)]
Millicores = Annotated[int, BeforeValidator(parse_cpu)]
Bytes = Annotated[int, BeforeValidator(parse_memory)]
GpuRequest = Annotated[float, BeforeValidator(_gpu_request)]
GpuAmount = Annotated[float, BeforeValidator(_gpu_amount)]
ModelList = Annotated[list[str], BeforeValidator(_string_list)]
LabelValue = Annotated[str, BeforeValidator(_label_value)]
Priority = Annotated[int | str, BeforeValidator(_priority)]
GpuCount = Annotated[int, Field(ge=0), _at_most(MAX_GPUS_PER_NODE)]
NodeCount = Annotated[int, Field(ge=1), _at_most(MAX_NODES)]
PodCount = Annotated[int, Field(ge=1), _at_most(MAX_PODS_PER_JOB)]


def _set_field(model: BaseModel, name: str, value: Any) -> None:
    """`model.<name> = value` as pydantic does it without assignment validation, minus its cost.

    BaseModel.__setattr__ stores the value and marks the field as set; here both directly, as
    the loader sets defaults on every job of a 100,000-job scenario.
    """
    model.__dict__[name] = value
    model.__pydantic_fields_set__.add(name)


# --- resources, topology ----------------------------------------------------------------


class Resources(SchemaModel):
    """An amount per resource (quota, limits); an absent resource is None (unlimited/unset)."""

    gpu: GpuAmount | None = None
    cpu: Millicores | None = None
    memory: Bytes | None = None


class TopologySpec(SchemaModel):
    """Node label keys, outermost first; `kubernetes.io/hostname` is the node's name."""

    levels: list[str] = Field(default_factory=list)

    @field_validator("levels")
    @classmethod
    def _unique(cls, levels: list[str]) -> list[str]:
        repeated = sorted({level for level in levels if levels.count(level) > 1})
        if repeated:
            raise ValueError(f"levels must be distinct ({', '.join(repeated)} repeated)")
        return levels


class PodTopology(SchemaModel):
    """`{required: LEVEL}` or `{preferred: LEVEL}` on a pod group: exactly one of the two."""

    required: str | None = None
    preferred: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PodTopology:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("give exactly one of `required` or `preferred`, naming a topology level")
        return self

    @property
    def mode(self) -> TopologyMode:
        return TopologyMode.REQUIRED if self.required is not None else TopologyMode.PREFERRED

    @property
    def level(self) -> str:
        level = self.required if self.required is not None else self.preferred
        assert level is not None
        return level


# --- nodes ----------------------------------------------------------------------------------


class NodeTemplate(SchemaModel):
    """A node's fields except its name (also a node group's `template`)."""

    labels: dict[str, LabelValue] = Field(default_factory=dict)
    gpus: GpuCount = 0
    gpu_model: str | None = None
    gpu_memory: Bytes | None = None
    nvlink: list[list[int]] | None = None
    cpu: Millicores | None = None
    """None: the node is not limited by CPU."""
    memory: Bytes | None = None
    """None: the node is not limited by memory."""

    @model_validator(mode="after")
    def _nvlink_partition(self) -> NodeTemplate:
        if self.nvlink is None:
            return self
        indices = [i for island in self.nvlink for i in island]
        wrong = sorted({i for i in indices if not 0 <= i < self.gpus})
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        missing = sorted(set(range(self.gpus)) - set(indices))
        empty = any(not island for island in self.nvlink)
        if wrong or repeated or missing or empty:
            details = []
            if wrong:
                details.append(f"no GPU {_ints(wrong)} on a node with {self.gpus} GPUs")
            if repeated:
                details.append(f"GPU {_ints(repeated)} in more than one island")
            if missing:
                details.append(f"GPU {_ints(missing)} in no island")
            if empty:
                details.append("an island is empty")
            raise FieldIssues(
                [("nvlink", f"islands must split GPUs 0..{self.gpus - 1} with each GPU once: " + "; ".join(details))]
                if self.gpus
                else [("nvlink", "a node without GPUs has no NVLink islands")]
            )
        return self

    @property
    def nvlink_islands(self) -> list[list[int]]:
        """NVLink islands by GPU index; default one island of all GPUs (none without GPUs)."""
        if self.nvlink is not None:
            return [list(island) for island in self.nvlink]
        return [list(range(self.gpus))] if self.gpus else []


class NodeSpec(NodeTemplate):
    """One node. After loading, `labels` always holds `kubernetes.io/hostname` = `name`."""

    name: str

    @model_validator(mode="after")
    def _hostname(self) -> NodeSpec:
        host = self.labels.get(HOSTNAME_LABEL)
        if host is not None and host != self.name:
            raise FieldIssues([("labels", f"{HOSTNAME_LABEL} is always the node's name ({self.name!r}), got {host!r}")])
        self.labels[HOSTNAME_LABEL] = self.name
        return self


def _last_word(label_key: str) -> str:
    return re.split(r"[/.\-]", label_key)[-1]


class NodeGroup(SchemaModel):
    """`count` nodes named `<prefix>-01`, ... from one template, labelled by `layout`."""

    prefix: str
    count: NodeCount
    layout: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Label key -> consecutive nodes per domain; domains are `<prefix>-<last word><k>`."""
    template: NodeTemplate = Field(default_factory=NodeTemplate)

    @model_validator(mode="after")
    def _layout_vs_labels(self) -> NodeGroup:
        issues = []
        clash = sorted(set(self.layout) & set(self.template.labels))
        if clash:
            issues.append(("template", f"labels {', '.join(clash)} are set by `layout`; set them in one place"))
        if HOSTNAME_LABEL in self.layout:
            issues.append(("layout", f"{HOSTNAME_LABEL} is always the node's name"))
        if HOSTNAME_LABEL in self.template.labels:
            issues.append(("template", f"{HOSTNAME_LABEL} is always the node's name"))
        if issues:
            raise FieldIssues(issues)
        return self

    def node_names(self) -> list[str]:
        width = max(2, len(str(self.count)))
        return [f"{self.prefix}-{i:0{width}d}" for i in range(1, self.count + 1)]

    def nodes(self) -> list[NodeSpec]:
        """The generated nodes, in order, with template and layout labels and the hostname."""
        fields = self.template.model_dump(exclude={"labels"})
        nodes = []
        for i, name in enumerate(self.node_names()):
            labels = dict(self.template.labels)
            for key, per_domain in self.layout.items():
                labels[key] = f"{self.prefix}-{_last_word(key)}{i // per_domain + 1}"
            labels[HOSTNAME_LABEL] = name
            nodes.append(NodeSpec.model_construct(name=name, labels=labels, **_copy(fields)))
        return nodes


def _copy(fields: dict[str, Any]) -> dict[str, Any]:
    nvlink = fields.get("nvlink")
    if nvlink is None:
        return dict(fields)
    return {**fields, "nvlink": [list(island) for island in nvlink]}


# --- queues ---------------------------------------------------------------------------------


class Preemption(SchemaModel):
    """Kueue's preemption policies; all Never by default (Kueue's defaults)."""

    within_queue: WithinQueuePolicy = WithinQueuePolicy.NEVER
    reclaim_within_cohort: ReclaimWithinCohortPolicy = ReclaimWithinCohortPolicy.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER


#: a Kubernetes label value: what a pod's ``usher/queue`` label can name
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class QueueSpec(SchemaModel):
    """A queue (Kueue ClusterQueue + LocalQueue in one)."""

    name: str

    @field_validator("name")
    @classmethod
    def _a_label_value(cls, name: str) -> str:
        if not _LABEL_VALUE.fullmatch(name):
            raise ValueError(
                f"{name!r} cannot be a queue's name: pods name their queue in the label usher/queue, whose value is at "
                "most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
        return name
    cohort: str | None = None
    quota: Resources = Field(default_factory=Resources)
    """Nominal quota; an absent resource is unlimited."""
    borrowing_limit: Resources | None = None
    """None: may borrow all the cohort lends; within it, an absent resource is unlimited."""
    lending_limit: Resources | None = None
    """None: lends all unused nominal quota; within it, an absent resource is unlimited."""
    weight: float = Field(default=1.0, gt=0)
    approval: Approval = Approval.AUTO
    preemption: Preemption = Field(default_factory=Preemption)
    namespaces: list[str] = Field(default_factory=list)
    """On a cluster: the namespaces whose pods may use this queue (as Kueue's LocalQueues, one
    per namespace); their pods that name no queue land in the first queue that lists their
    namespace. A replay's jobs always name their queue."""
    namespace_selector: LabelSelector | None = None
    """On a cluster: namespaces whose labels it selects may use this queue too (Kueue's
    ClusterQueue ``namespaceSelector``; ``{}`` selects every namespace). With neither this nor
    ``namespaces``, no namespace may use the queue: a tenant's ``usher/queue`` label only chooses
    among the queues its namespace is allowed."""

    def admits(self, namespace: str, labels: dict[str, str] | None) -> bool:
        """Whether pods of ``namespace`` (with these labels; None: not seen) may use the queue."""
        if namespace in self.namespaces:
            return True
        selector = self.namespace_selector
        if selector is None:
            return False
        if not selector.match_labels and not selector.match_expressions:
            return True  # ``{}``: every namespace, seen or not
        return labels is not None and selector.matches(labels)

    def who_may_use(self) -> str:
        """The allowed namespaces in words, for a pod's pending message."""
        parts = []
        if self.namespaces:
            parts.append("namespaces " + ", ".join(self.namespaces))
        if self.namespace_selector is not None:
            sel = self.namespace_selector
            terms = [f"{k}={v}" for k, v in sel.match_labels.items()]
            terms += [f"{t.key} {t.operator}{' ' + ','.join(t.values) if t.values else ''}" for t in sel.match_expressions]
            parts.append(f"namespaces labelled {' and '.join(terms)}" if terms else "every namespace")
        return " and ".join(parts) if parts else "no namespace (it lists no namespaces and no namespaceSelector)"
    usage_half_life: PositiveSeconds | None = None
    """Decayed fair share: the queue's share also counts the GPUs it used lately, an average
    whose weight halves every this long (Slurm's PriorityDecayHalfLife), so a team that used the
    cluster all week yields to one that did not. None: only what it holds now counts."""


# --- jobs -----------------------------------------------------------------------------------


class PodSpec(SchemaModel):
    """A group of `count` identical pods."""

    name: str = ""
    """Empty in the file: filled by the job (`pod`, or `pod<i>` when the job has several groups)."""
    count: PodCount = 1
    gpu: GpuRequest = 0.0
    """Whole GPUs per pod (2.0), or a share of one GPU in (0, 1) rounded to 1/1000."""
    gpu_model: ModelList = Field(default_factory=list)
    """Acceptable GPU models; empty: any."""
    cpu: Millicores = 0
    memory: Bytes = 0
    topology: PodTopology | None = None

    @property
    def whole_gpus(self) -> int:
        """GPUs per pod when they are whole, else 0."""
        return int(self.gpu) if self.gpu >= 1 else 0

    @property
    def is_shared(self) -> bool:
        """True when each pod asks for a share of one GPU."""
        return 0 < self.gpu < 1


class JobSpec(SchemaModel):
    """A job: one or more pod groups that share a queue, a priority and a lifetime."""

    name: str
    queue: str
    submit: Seconds = 0.0
    priority: Priority = 0
    """An integer, or a name from `priorityClasses` (see `Scenario.priority_of`)."""
    duration: PositiveSeconds | None = None
    """None: runs until the end of the replay."""
    estimate: PositiveSeconds | None = None
    """Defaults to `duration`; None when neither is given (backfill: never finishes)."""
    preemptible: bool = True
    checkpoint_every: PositiveSeconds | None = None
    """None: all work since the start of the run is lost when preempted."""
    min_count: PodCount | None = None
    """Gang size; None: all pods must start together."""
    pods: list[PodSpec] = Field(min_length=1)
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    """Labels of the job's pods, for other jobs' rules (each also carries `usher/job: <name>`)."""
    anti_affinity: list[AntiAffinitySpec] = Field(default_factory=list)
    spread: list[SpreadSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _defaults(self) -> JobSpec:
        if JOB_LABEL in self.labels:
            raise FieldIssues([("labels", f"{JOB_LABEL} is always the job's name ({self.name!r}); usher sets it")])
        if self.estimate is None:
            _set_field(self, "estimate", self.duration)
        for i, pod in enumerate(self.pods):
            if not pod.name:
                _set_field(pod, "name", "pod" if len(self.pods) == 1 else f"pod{i}")
        return self

    @property
    def pod_count(self) -> int:
        return sum(pod.count for pod in self.pods)

    @property
    def gang_size(self) -> int:
        """Pods that must start together (`minCount`, default all)."""
        return self.pod_count if self.min_count is None else self.min_count

    @property
    def total_gpu(self) -> float:
        return sum(pod.count * pod.gpu for pod in self.pods)


# --- events ---------------------------------------------------------------------------------


class EventSpec(SchemaModel):
    """Something that happens at `at` seconds: a node, job or queue action.

    Node actions (drain, cordon, uncordon, fail, recover) take `node`; job actions (approve,
    preempt, hold, release) take `job`; setQuota takes `queue` and `quota`, and optionally
    `borrowingLimit` and `lendingLimit`. For setQuota the resources named replace the queue's
    current values; resources left out keep theirs.
    """

    at: Seconds
    action: EventAction
    node: str | None = None
    job: str | None = None
    queue: str | None = None
    quota: Resources | None = None
    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None

    @model_validator(mode="after")
    def _fields_for_action(self) -> EventSpec:
        if self.action in NODE_ACTIONS:
            needed = {"node"}
        elif self.action in JOB_ACTIONS:
            needed = {"job"}
        else:
            needed = {"queue", "quota"}
        allowed = needed | ({"borrowing_limit", "lending_limit"} if self.action in QUEUE_ACTIONS else set())
        issues = []
        for name in ("node", "job", "queue", "quota", "borrowing_limit", "lending_limit"):
            present = getattr(self, name) is not None
            if name in needed and not present:
                issues.append((to_camel(name), f"required for action {self.action}"))
            elif present and name not in allowed:
                issues.append((to_camel(name), f"not used by action {self.action}"))
        if issues:
            raise FieldIssues(issues)
        return self


# --- traces and the scenario ------------------------------------------------------------


class TraceSpec(SchemaModel):
    """Bulk nodes and/or jobs from a public trace (paths relative to the scenario file)."""

    format: TraceFormat
    nodes: str | None = None
    pods: str | None = None
    queue: str | None = None
    """The queue of every imported job; required with `pods`."""
    prefix: str = ""
    """Prepended to imported node and job names (to import one file twice)."""

    @model_validator(mode="after")
    def _queue_with_pods(self) -> TraceSpec:
        issues = []
        if self.nodes is None and self.pods is None:
            issues.append(("nodes", "give `nodes`, `pods` or both"))
        if self.pods is not None and self.queue is None:
            issues.append(("queue", "required with `pods`: the queue of the imported jobs"))
        if issues:
            raise FieldIssues(issues)
        return self


class Scenario(SchemaModel):
    """A whole scenario file. Trace-imported nodes and jobs come after the explicit ones."""

    name: str
    topology: TopologySpec = Field(default_factory=TopologySpec)
    priority_classes: dict[str, int] = Field(default_factory=dict)
    nodes: list[NodeSpec] = Field(default_factory=list)
    node_groups: list[NodeGroup] = Field(default_factory=list)
    queues: list[QueueSpec] = Field(default_factory=list)
    jobs: list[JobSpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    traces: list[TraceSpec] = Field(default_factory=list)

    _trace_nodes: list[NodeSpec] = PrivateAttr(default_factory=list)
    _trace_jobs: list[JobSpec] = PrivateAttr(default_factory=list)
    _warnings: list[Problem] = PrivateAttr(default_factory=list)

    def all_nodes(self) -> list[NodeSpec]:
        """Explicit nodes, then node-group nodes, then trace nodes."""
        nodes = list(self.nodes)
        for group in self.node_groups:
            nodes.extend(group.nodes())
        nodes.extend(self._trace_nodes)
        return nodes

    def all_jobs(self) -> list[JobSpec]:
        """Explicit jobs, then trace jobs."""
        return [*self.jobs, *self._trace_jobs]

    @property
    def trace_nodes(self) -> list[NodeSpec]:
        return self._trace_nodes

    @property
    def trace_jobs(self) -> list[JobSpec]:
        return self._trace_jobs

    @property
    def warnings(self) -> list[Problem]:
        """`Problem`s that do not stop the scenario (e.g. an event naming no known job)."""
        return self._warnings

    def attach_traces(self, nodes: list[NodeSpec], jobs: list[JobSpec]) -> None:
        """Set the nodes and jobs imported from `traces` (done by the loader)."""
        self._trace_nodes = list(nodes)
        self._trace_jobs = list(jobs)

    def priority_of(self, job: JobSpec) -> int:
        """The job's priority as an integer (a class name is resolved; unknown names: 0)."""
        if isinstance(job.priority, int):
            return job.priority
        return self.priority_classes.get(job.priority, 0)

    def queue(self, name: str) -> QueueSpec | None:
        return next((q for q in self.queues if q.name == name), None)


def _ints(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


# --- validating a large scenario in little memory ------------------------------------------

_JOB_CHUNK = 2048
"""Jobs validated at a time by `validate_scenario`; their plain data is dropped right after."""
_JOB_LIST: TypeAdapter[list[JobSpec]] = TypeAdapter(list[JobSpec])


def validate_scenario(data: dict[str, Any]) -> Scenario:
    """`Scenario.model_validate(data)`, in less memory; consumes `data["jobs"]`.

    The loader's fast path: jobs are validated a chunk at a time, each chunk's plain data
    dropped (`data["jobs"]` is left holding None) and its pod groups shared with equal ones
    (`share_pod_groups`) before the next, so the plain data of 100,000 jobs and their models
    never live side by side. The result is the scenario `Scenario.model_validate` gives, the
    pod groups shared; a `ValidationError` says only that the data is wrong, not where (the
    loader re-validates the whole document for that).
    """
    jobs = data.get("jobs")
    if type(jobs) is not list:
        return Scenario.model_validate(data)
    scenario = Scenario.model_validate({**data, "jobs": []})
    validated: list[JobSpec] = []
    shared: dict[tuple[str, str], PodSpec] = {}
    for start in range(0, len(jobs), _JOB_CHUNK):
        end = start + _JOB_CHUNK
        plain = jobs[start:end]
        jobs[start:end] = [None] * len(plain)
        chunk = _JOB_LIST.validate_python(plain)
        share_pod_groups(chunk, plain, shared)
        del plain
        validated.extend(chunk)
    scenario.jobs = validated
    return scenario


def share_pod_groups(jobs: list[JobSpec], plain: list[Any], shared: dict[tuple[str, str], PodSpec]) -> None:
    """Make the pod groups of `jobs` that were read from equal data one `PodSpec` object.

    `plain` is the data each job was validated from; `shared` keeps the first group of each
    kind, by the `repr` of its data (which tells apart 1, 1.0 and True, and -0.0) and the name
    the job gave it. Equal data validates to equal groups, so a shared group dumps exactly as
    its own would. A large scenario repeats a few pod shapes (B3: 6 in 100,000 jobs) and a
    `PodSpec` costs ~700 bytes. Pod groups are read-only once loaded.
    """
    for job, data in zip(jobs, plain, strict=True):
        pods = job.pods
        raw = data.get("pods")
        if type(raw) is not list or len(raw) != len(pods):
            continue  # pods given by another name (no such field today): left alone
        for index, pod in enumerate(pods):
            first = shared.setdefault((repr(raw[index]), pod.name), pod)
            if first is not pod:
                pods[index] = first
