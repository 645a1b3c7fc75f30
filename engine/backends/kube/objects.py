"""How usher reads Kubernetes objects: the labels and annotations it honours, parsed once.

A pod becomes a ``PodView`` and a node a ``NodeView``: plain records with the engine's units
(milli-GPUs, millicores, bytes, seconds). A pod that asks for something usher cannot honour
(a malformed annotation, a share and whole GPUs at once) carries a ``problem`` instead of being
dropped, so it can stay pending with a reason that says what is wrong.

Conventions (documented for users in docs/operating.md):

- queue: label ``usher/queue``, or Kueue's ``kueue.x-k8s.io/queue-name``; else the queue whose
  ``namespaces`` lists the pod's namespace (the mirror's ``queue_of``);
- gang: what ``owners.infer_group`` finds (usher's ``usher/gang`` + ``usher/gang-size`` labels,
  a PodGroup, Kueue's pod-group labels, or the top owner: a Job, JobSet, PyTorchJob, RayCluster,
  LeaderWorkerSet, ...), passed to ``pod_view``; the owner's usher annotations win over the pod's;
- requests: ``pod_requests``, kube-scheduler's arithmetic (containers and sidecars, the largest
  init container, ``spec.overhead``), for every resource named, as kube-scheduler's
  NodeResourcesFit checks them: GPUs, CPU and memory, and the rest (extended resources such as
  ``rdma/ib``, hugepages, ephemeral storage) plus one of the node's ``pods`` and its host ports
  (``host_ports``) as ``extra``; a
  node offers only the extras its allocatable lists (``pods`` without limit when unlisted, as a
  bare test object); ``holding_of`` for the pods usher does not schedule;
- GPUs: ``nvidia.com/gpu`` requests (or limits); a share of one GPU: annotation
  ``usher/gpu-fraction``; acceptable models: ``usher/gpu-model`` (comma list); GPUs asked
  through ``spec.resourceClaims`` are added by ``dra_pods`` (they need the watched claims);
- topology: ``usher/topology-required`` / ``usher/topology-preferred`` naming a level;
- backfill: ``usher/estimate`` (a duration); ``usher/checkpoint-every``; ``usher/preemptible``;
- consolidation: ``usher/movable`` (``true``/``false``): whether usher may evict the job's pods
  to start it again elsewhere, in room it keeps until they come back; by default only pods a
  controller owns that it would create again (never a bare pod, nor a batch Job whose
  ``podFailurePolicy`` or ``backoffLimit`` would fail it: ``owners.job_survives_eviction``);
- operator decisions (approve, hold) are not read from pods: they live in ConfigMap
  ``usher-system/usher-decisions`` (``decisions``), where tenants cannot write; a pod or owner
  that carries ``usher/approved`` or ``usher/hold`` is refused with a problem saying so. usher
  writes ``usher/gpus`` at bind time.
- node constraints (``constraints``): ``spec.nodeSelector``, required and preferred node affinity
  and ``spec.tolerations``, against nodes' labels and ``spec.taints``, as kube-scheduler reads
  them; pod affinity, pod anti-affinity and topology spread constraints are refused (a problem).
- nodes: ``nvidia.com/gpu`` allocatable, label ``nvidia.com/gpu.product`` for the model,
  ``nvidia.com/gpu.memory`` (MiB, as GPU feature discovery writes it), annotation
  ``usher/nvlink`` (``0,1,2,3;4,5,6,7``) for NVLink islands, ``usher/gpu-health``
  (``{"3": "XID 79 ..."}``: the GPUs found unhealthy and why) for GPUs out of service; both are
  written by ``usher agent`` (``format_nvlink``, ``format_gpu_health``).

Longer than the house's 600 lines on purpose: it is the one place where usher reads a pod's
and a node's labels, annotations and requests (each rule once, so that no two callers read one
name two ways), so a reader finds every honoured name and its parser here; the owners' rules
are in ``owners``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

import yaml

from ...scenario.limits import CONFIG_LIMITS
from ...scenario.quantity import parse_cpu, parse_duration, parse_memory
from ...scenario.yamltree import YamlLimitError, load_bounded
from ...selectors import label_selector_or_nothing
from ...state import HOST_PORT, MILLI, PODS, UNLIMITED, Extras
from .constraints import NodeConstraints, parse_constraints
from .podrules import NO_RULES, PodRules, parse_pod_rules
# usher's labels and annotations, re-exported here where callers have always found them
from .names import GPU_RESOURCE, SCHEDULER_NAME, Annotation, Label
from .owners import GroupSpec, Kind, infer_group
from .taints import Taint, node_taints


#: gang kinds that are not a workload owner worth naming (a pod alone, usher's own labels)
_POD_KINDS = ("Pod", "Gang")


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL = (Phase.SUCCEEDED, Phase.FAILED)
TRUE_WORDS = ("true", "yes", "1")
FALSE_WORDS = ("false", "no", "0")


def _flag(text: str) -> bool:
    """``true``/``yes``/``1`` or ``false``/``no``/``0`` (any case); anything else is refused."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_time(text: str | None) -> float:
    """Seconds since the epoch from an RFC 3339 timestamp (``2026-11-21T10:00:00Z``); 0 if absent."""
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that puts ``worker-9`` before ``worker-10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


#: How the queue config names each kind of limit.
LIMIT_FIELDS = ("quota", "borrowingLimit", "lendingLimit")


def edit_queue_limits(text: str, queue: str, limits: dict[str, dict[str, Any]]) -> str | None:
    """The queue config ``text`` with ``limits`` (field -> resource -> amount in spec units,
    None to drop it) merged into ``queue``'s entry; None when the config has no such queue.
    Raises ``ValueError`` when ``text`` is not a queue config that can be edited (broken YAML, a
    document past the ConfigMap's limits, no list of queues)."""
    try:
        doc = load_bounded(text, CONFIG_LIMITS) or {}
    except (YamlLimitError, yaml.YAMLError) as exc:
        raise ValueError(f"the queue config cannot be read: {str(exc).splitlines()[0]}") from None
    queues = doc.get("queues") if isinstance(doc, dict) else None
    if not isinstance(queues, list):
        raise ValueError("the queue config has no list of queues")
    entry = next((q for q in queues if isinstance(q, dict) and q.get("name") == queue), None)
    if entry is None:
        return None
    for field_name, values in limits.items():
        current = dict(entry.get(field_name) or {})
        for resource, amount in values.items():
            if amount is None:
                current.pop(resource, None)
            else:
                current[resource] = amount
        entry[field_name] = current
    return yaml.safe_dump(doc, sort_keys=False)


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


@dataclass(slots=True)
class PodView:
    """What usher needs of one pod, in engine units."""

    key: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    created: float
    phase: Phase
    node: str | None
    queue: str | None
    #: the gang's key (``ns/<usher/gang>``, ``ns/<Kind>/<owner>``, ``ns/<pod>`` for a pod alone)
    gang: str
    gang_size: int | None
    priority: int
    #: ``spec.preemptionPolicy`` is not ``Never`` (its PriorityClass's, set by admission)
    preempts: bool
    gpu_milli: int
    cpu: int
    memory: int
    models: frozenset[str] | None
    topology_required: str | None
    topology_preferred: str | None
    estimate: float | None
    checkpoint_every: float | None
    #: what the pod asks (``usher/preemptible``): the engine grants "not preemptible" only for
    #: quota its queue owns (``Job.shielded``), never for what it borrowed
    preemptible: bool
    gpus: list[int] = field(default_factory=list)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    problem: str | None = None
    #: a deletion is under way (``metadata.deletionTimestamp``): the pod still holds its node
    terminating: bool = False
    #: the gang's top owner (``PyTorchJob/llama-ft``), else the pod's controller; None for a bare pod
    owner: str | None = None
    #: the fewest pods of the gang that may start (an elastic workload's minimum); None: all
    gang_minimum: int | None = None
    #: the owner makes the pods beyond the minimum only once those run (``GroupSpec.staged``)
    gang_staged: bool = False
    #: how the gang is shown (``PyTorchJob research/llama-ft``); None: by its key
    gang_title: str | None = None
    #: which incarnation of the gang (``GroupSpec.uid``): an operator's approval is of one
    gang_uid: str | None = None
    #: what the gang's size waits for (an owner not seen yet); None: nothing
    waiting_for: str | None = None
    #: nodeSelector, node affinity and tolerations (``constraints``); None when it has none
    constraints: NodeConstraints | None = None
    #: whether it is made anew after an eviction: a controller owns it, one that would (not a
    #: batch Job the eviction would fail, ``owners.job_survives_eviction``)
    comes_back: bool = False
    #: whether consolidation may evict it to start it again elsewhere (``usher/movable``;
    #: by default when it comes back)
    movable: bool = False
    #: what it asks beyond GPUs, CPU and memory (``Requests.extra``)
    extra: Extras = ()
    #: its labels (pod rules match pods by them)
    labels: dict[str, str] = field(default_factory=dict)
    #: pod affinity, anti-affinity and topology spread (``podrules``)
    rules: PodRules = NO_RULES
    #: the nodes whose devices can give its ResourceClaims (``dra``; None: any), and why not others
    claim_nodes: frozenset[str] | None = None
    claim_exclusions: str | None = None
    #: what it waits for before its claims can be read (a claim still to be made from its template)
    claims_waiting: str | None = None

    @property
    def live(self) -> bool:
        return self.phase not in TERMINAL

    @property
    def bound(self) -> bool:
        return self.node is not None

    def signature(self) -> tuple[Any, ...]:
        """Pods of one gang with equal signatures form one engine pod group."""
        return (
            self.gpu_milli,
            self.cpu,
            self.memory,
            self.models,
            self.topology_required,
            self.topology_preferred,
            self.constraints,
            self.extra,
            self.rules,
            self.claim_nodes,
        )


class Requests(NamedTuple):
    """What a pod asks of its node, in engine units (GPUs as a whole count)."""

    cpu: int
    memory: int
    gpus: int
    #: every other resource it asks, and one pod (``Extras``)
    extra: Extras = ()


#: the resources ``Requests`` names; every other one is an extra
_NAMED = frozenset({"cpu", "memory", GPU_RESOURCE})


def pod_requests(spec: dict[str, Any], problems: list[str] | None = None) -> Requests:
    """A pod's effective request, as kube-scheduler computes it.

    The larger of (every app container plus every sidecar) and, for each ordinary init
    container, its own request plus the sidecars started before it; plus the pod's
    ``overhead``. A limit stands in for a missing request, as the API server defaults it. An
    unreadable quantity counts as zero and is reported in ``problems`` with its field path.
    """
    sums: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}

    def amounts(c: dict[str, Any], where: str) -> dict[str, int]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        out: dict[str, int] = {}
        for name, value in merged.items():
            parse = parse_cpu if name == "cpu" else _int if name == GPU_RESOURCE else parse_memory
            try:
                out[name] = parse(str(value))
            except ValueError as exc:
                if problems is not None:
                    problems.append(f"{where}.resources {name}: {exc}")
        return out

    def plus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}

    for i, c in enumerate(spec.get("initContainers") or []):
        a = amounts(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            sidecars = plus(sidecars, a)
        else:
            with_sidecars = plus(a, sidecars)
            init_peak = {k: max(init_peak.get(k, 0), with_sidecars.get(k, 0)) for k in init_peak.keys() | with_sidecars.keys()}
    for i, c in enumerate(spec.get("containers") or []):
        sums = plus(sums, amounts(c, f"spec.containers[{i}]"))
    running = plus(sums, sidecars)
    total = {k: max(running.get(k, 0), init_peak.get(k, 0)) for k in running.keys() | init_peak.keys()}
    total = plus(total, amounts({"resources": {"requests": spec.get("overhead") or {}}}, "spec.overhead"))
    extra = {k: v for k, v in total.items() if k not in _NAMED and v > 0}
    extra[PODS] = extra.get(PODS, 0) + 1
    for port in host_ports(spec):
        extra[f"{HOST_PORT}{port}"] = 1
    return Requests(total.get("cpu", 0), total.get("memory", 0), total.get(GPU_RESOURCE, 0), tuple(sorted(extra.items())))


def host_ports(spec: dict[str, Any]) -> set[str]:
    """The host ports a pod takes on its node (``TCP/29500``), as kube-scheduler's NodePorts
    counts them: the ``hostPort`` of each port of its containers and sidecars (with
    ``hostNetwork``, every container port is one, as the API server defaults it). Two pods on one
    node may not take the same protocol and port; usher does not tell host IPs apart (stricter
    than kube-scheduler only for pods that bind one port to different host addresses)."""
    containers = [*(spec.get("containers") or []),
                  *(c for c in spec.get("initContainers") or [] if isinstance(c, dict) and c.get("restartPolicy") == "Always")]
    found: set[str] = set()
    for c in containers:
        for port in (c.get("ports") or []) if isinstance(c, dict) else []:
            if not isinstance(port, dict):
                continue
            number = port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else None)
            if isinstance(number, int) and number > 0:
                found.add(f"{port.get('protocol') or 'TCP'}/{number}")
    return found


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """Whether a raw label selector (an API object's) selects ``labels`` (``selectors.read_label_selector``).
    An empty selector selects everything, a missing one nothing (a policy/v1
    PodDisruptionBudget's rule); one usher cannot read selects nothing."""
    read = label_selector_or_nothing(selector)
    return read is not None and read.selects(labels)


def pod_view(obj: dict[str, Any], group: GroupSpec | None = None) -> PodView:
    """Parse one pod; never raises for user mistakes (they land in ``problem``).

    ``group`` is the pod's gang as ``owners.infer_group`` found it through the owner caches;
    without it, only what the pod itself says counts (usher's labels; otherwise a pod alone).
    The gang's owner's usher annotations win over the pod's.
    """
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    labels = meta.get("labels") or {}
    if group is None:
        group = infer_group(obj, lambda *_: None, served=())
    ann = {**(meta.get("annotations") or {}), **group.annotations}
    problems: list[str] = []
    if group.problem and not group.waiting:
        problems.append(group.problem)
    ns = meta.get("namespace", "default")
    name = meta["name"]

    def parse(what: str, text: str | None, parser, default=None):
        if text is None:
            return default
        try:
            return parser(text)
        except ValueError as exc:
            problems.append(f"{what}: {exc}")
            return default

    cpu, memory, whole, extra = pod_requests(spec, problems)
    fraction = parse(f"annotation {Annotation.GPU_FRACTION}", ann.get(Annotation.GPU_FRACTION), _fraction)
    if fraction is not None and whole:
        # the kubelet counts the whole GPUs and knows nothing of the share: counting the share
        # would let usher bind onto GPUs the kubelet sees as taken (and it would refuse the pod)
        problems.append(
            f"annotation {Annotation.GPU_FRACTION} asks for a share of one GPU but the pod also requests "
            f"{GPU_RESOURCE}: {whole}, which the kubelet counts as {whole} whole GPU{'s' if whole > 1 else ''}; "
            f"ask for one or the other"
        )
    for decision in (Annotation.APPROVED, Annotation.HOLD):
        if decision in ann:
            problems.append(
                f"annotation {decision} is an operator's decision, which usher does not take from a pod or its owner; "
                f"remove it and ask an operator (the console's approve and hold, kept in ConfigMap usher-system/usher-decisions)"
            )
    gpu_milli = round(fraction * MILLI) if fraction is not None else whole * MILLI

    constraints, constraint_problems = parse_constraints(spec)
    problems.extend(constraint_problems)
    pod_rules, rule_problems = parse_pod_rules(spec, labels)
    problems.extend(rule_problems)
    models = ann.get(Annotation.GPU_MODEL)
    gpus_text = ann.get(Annotation.GPUS)
    owner = f"{group.kind}/{group.name}" if group.owner is not None else next(
        (f"{o.get('kind')}/{o.get('name')}" for o in meta.get("ownerReferences") or [] if o.get("controller")), None
    )
    # by default: when a controller owns it and would make it anew (a batch Job that an eviction
    # would fail, by its podFailurePolicy or backoffLimit, would not)
    comes_back = owner is not None and group.survives_eviction is not False
    movable = parse(f"annotation {Annotation.MOVABLE}", ann.get(Annotation.MOVABLE), _flag, comes_back)
    return PodView(
        key=f"{ns}/{name}",
        namespace=ns,
        name=name,
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        created=parse_time(meta.get("creationTimestamp")),
        phase=Phase(status.get("phase", "Pending")) if status.get("phase") in Phase.__members__.values() else Phase.UNKNOWN,
        node=spec.get("nodeName") or None,
        queue=labels.get(Label.QUEUE) or labels.get(Label.KUEUE_QUEUE),
        gang=group.key,
        gang_size=group.size,
        gang_minimum=group.minimum,
        gang_staged=group.staged,
        gang_title=_title(group),
        gang_uid=group.uid if group.uid is not None else (meta.get("uid") or None) if group.kind == Kind.POD else None,
        waiting_for=group.problem if group.waiting else None,
        priority=int(spec.get("priority") or 0),
        preempts=spec.get("preemptionPolicy") != "Never",
        gpu_milli=gpu_milli,
        cpu=cpu,
        memory=memory,
        models=frozenset(m.strip() for m in models.split(",") if m.strip()) if models else None,
        topology_required=ann.get(Annotation.TOPOLOGY_REQUIRED),
        topology_preferred=ann.get(Annotation.TOPOLOGY_PREFERRED),
        estimate=parse(f"annotation {Annotation.ESTIMATE}", ann.get(Annotation.ESTIMATE), parse_duration),
        checkpoint_every=parse(f"annotation {Annotation.CHECKPOINT_EVERY}", ann.get(Annotation.CHECKPOINT_EVERY), parse_duration),
        preemptible=parse(f"annotation {Annotation.PREEMPTIBLE}", ann.get(Annotation.PREEMPTIBLE), _flag, True),
        gpus=parse(f"annotation {Annotation.GPUS}", gpus_text, _index_list, []) if gpus_text else [],
        conditions={
            c.get("type", ""): (c.get("status", ""), c.get("reason", ""), c.get("message", ""))
            for c in status.get("conditions") or []
        },
        problem="; ".join(problems) or None,
        terminating=bool(meta.get("deletionTimestamp")),
        owner=owner,
        constraints=constraints,
        labels=dict(labels),
        rules=pod_rules,
        comes_back=comes_back,
        movable=movable,
        extra=extra,
    )


def _title(group: GroupSpec) -> str:
    """The gang as people read it, one way everywhere (Events, the console, messages): its kind,
    then ``namespace/name`` as kubectl writes objects: ``PyTorchJob research/llama-ft``,
    ``LeaderWorkerSet research/serve/1`` for one group of it, ``PodGroup research/x``. A gang that
    no object stands for (usher's ``usher/gang`` label, a pod alone) is ``research/name``. Never
    the key's own order (``research/PyTorchJob/llama-ft``), which stays an identifier."""
    if group.kind in _POD_KINDS:
        return group.key
    namespace, _, rest = group.key.partition("/")
    prefix = f"{group.kind}/"
    return f"{group.kind} {namespace}/{rest.removeprefix(prefix)}"


def _number(text: str, expected: str) -> float:
    """``text`` as a finite number; else a ValueError saying what was ``expected`` (never
    Python's "could not convert string to float")."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not {expected}") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not {expected}")
    return value


def _int(text: str) -> int:
    value = _number(text, "a whole number of GPUs")
    if value != int(value) or value < 0:
        raise ValueError(f"{text!r} is not a whole number of GPUs")
    return int(value)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{text!r} is not a positive whole number")
    return int(text)


def _fraction(text: str) -> float:
    value = _number(text, "a share of one GPU (a number between 0 and 1 exclusive, such as 0.5)")
    if not 0 < value < 1:
        raise ValueError(f"{text!r} must be a share of one GPU, between 0 and 1 exclusive")
    return value


def _index_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{text!r} is not a list of GPU indices (such as 0,1,2,3)") from None


@dataclass(slots=True)
class NodeView:
    """What usher needs of one node."""

    name: str
    labels: dict[str, str]
    gpus: int
    gpu_model: str
    gpu_memory: int
    islands: list[list[int]]
    cpu: int
    memory: int
    unschedulable: bool
    ready: bool
    #: GPU index -> why the node agent found it unhealthy (annotation ``usher/gpu-health``)
    unhealthy: dict[int, str] = field(default_factory=dict)
    #: ``spec.taints`` as usher filters on them (``constraints.node_taints``)
    taints: tuple[Taint, ...] = ()
    #: what it offers beyond GPUs, CPU and memory: its allocatable of every other resource
    extra: dict[str, int] = field(default_factory=dict)

    def shape(self) -> tuple[Any, ...]:
        """Everything but schedulability: a change here means the engine rebuilds its indexes."""
        return (
            self.labels, self.gpus, self.gpu_model, self.gpu_memory, self.islands, self.cpu, self.memory, self.unhealthy,
            self.taints, self.extra,
        )


def node_view(obj: dict[str, Any]) -> NodeView:
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    labels["kubernetes.io/hostname"] = meta["name"]
    gpus = _safe(lambda: _int(str(alloc.get(GPU_RESOURCE, "0"))), 0)
    annotations = meta.get("annotations") or {}
    islands = _safe(lambda: _islands(annotations.get(Annotation.NVLINK), gpus), None)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not status.get("conditions"):
        ready = True  # a node without reported conditions (a bare test object) is taken as ready
    return NodeView(
        name=meta["name"],
        labels=labels,
        gpus=gpus,
        gpu_model=labels.get(Label.GPU_PRODUCT, ""),
        gpu_memory=_safe(lambda: int(labels.get(Label.GPU_MEMORY, "0")) * 2**20, 0),
        islands=islands if islands is not None else ([list(range(gpus))] if gpus else []),
        cpu=_safe(lambda: parse_cpu(alloc["cpu"]), UNLIMITED) if "cpu" in alloc else UNLIMITED,
        memory=_safe(lambda: parse_memory(alloc["memory"]), UNLIMITED) if "memory" in alloc else UNLIMITED,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        unhealthy=_safe(lambda: _unhealthy(annotations.get(Annotation.GPU_HEALTH), gpus), {}),
        taints=node_taints(spec),
        extra=_node_extras(alloc),
    )


def _node_extras(alloc: dict[str, Any]) -> dict[str, int]:
    """A node's allocatable beyond GPUs, CPU and memory (one that cannot be read offers none);
    ``pods`` without limit when unlisted (a bare test object: every kubelet lists it)."""
    extra = {name: _safe(lambda v=value: parse_memory(str(v)), 0) for name, value in alloc.items() if name not in _NAMED}
    extra.setdefault(PODS, UNLIMITED)
    return extra


def _safe(fn, default):
    try:
        return fn()
    except (ValueError, KeyError, TypeError):
        return default


def format_nvlink(islands: list[list[int]]) -> str:
    """The ``usher/nvlink`` value for NVLink islands: ``[[0, 1], [2, 3]]`` is ``0,1;2,3``."""
    return ";".join(",".join(str(i) for i in island) for island in islands)


def format_gpu_health(unhealthy: dict[int, str]) -> str:
    """The ``usher/gpu-health`` value: a JSON object of unhealthy GPU index -> reason (``{}``: all well)."""
    return json.dumps({str(i): unhealthy[i] for i in sorted(unhealthy)}, separators=(",", ":"))


def format_gpu_xids(boot: str, by_uuid: dict[str, list[int]]) -> str:
    """The ``usher/gpu-xids`` value: the node's boot id and the critical XIDs seen per GPU UUID
    since, ``{"boot":"...","xids":{"GPU-...":[79]}}``."""
    return json.dumps({"boot": boot, "xids": {u: by_uuid[u] for u in sorted(by_uuid)}}, separators=(",", ":"))


def parse_gpu_xids(text: str) -> tuple[str, dict[str, list[int]]]:
    """``usher/gpu-xids`` read back: (boot id, GPU UUID -> XIDs); ``ValueError`` says what is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("boot"), str) or not isinstance(doc.get("xids"), dict):
        raise ValueError('not {"boot": "<boot id>", "xids": {"<GPU UUID>": [XID, ...]}}')
    xids: dict[str, list[int]] = {}
    for uuid, values in doc["xids"].items():
        if not isinstance(values, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in values):
            raise ValueError(f"xids.{uuid}: not a list of XID numbers")
        xids[uuid] = values
    return doc["boot"], xids


def _unhealthy(text: str | None, gpus: int) -> dict[int, str]:
    """Unhealthy GPUs from ``usher/gpu-health``; indices the node does not have are ignored."""
    if not text:
        return {}
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return {int(k): str(v) for k, v in doc.items() if str(k).isdigit() and int(k) < gpus}


def _islands(text: str | None, gpus: int) -> list[list[int]] | None:
    """NVLink islands from ``0,1,2,3;4,5,6,7``; None (one island) when absent or not a partition."""
    if not text:
        return None
    islands = [[int(x) for x in part.split(",") if x.strip()] for part in text.split(";") if part.strip()]
    if sorted(i for isl in islands for i in isl) != list(range(gpus)):
        return None
    return islands


@dataclass(slots=True, frozen=True)
class Holding:
    """What a pod usher does not schedule (a DaemonSet's, the default scheduler's) holds on its node."""

    node: str
    requests: Requests


def holding_of(obj: dict[str, Any]) -> Holding | None:
    """The node and requests of an assigned, unfinished pod; None if it holds nothing."""
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    if not node or (obj.get("status") or {}).get("phase") in TERMINAL:
        return None
    return Holding(node, pod_requests(spec))


def as_the_kubelet_counts(view: PodView, spec: dict[str, Any]) -> PodView:
    """``view`` holding on its node at least the whole GPUs the kubelet counts for ``spec``.

    The kubelet knows nothing of ``usher/gpu-fraction``: a pod that asks for ``nvidia.com/gpu: 1``
    and a share of one holds a whole GPU as far as admission goes, whatever usher made of the
    share. Such a pod is refused as written (a problem), so usher never binds one; but one found
    bound (by an older usher, or before its annotation was read) must be counted as the kubelet
    counts it, or usher sees GPUs free that the kubelet refuses pods for (``OutOfnvidia.com/gpu``).
    """
    whole = pod_requests(spec).gpus * MILLI
    if whole > view.gpu_milli:
        view.gpu_milli = whole
    return view
