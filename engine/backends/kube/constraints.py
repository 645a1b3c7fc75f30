"""A pod's node constraints, and which nodes they allow: kube-scheduler's node filters for usher.

Without this module usher would place a pod with a ``nodeSelector``, node affinity or
tolerations as if it had none. Here a pod's ``spec`` is parsed once (``parse_constraints``) into a
hashable ``NodeConstraints``, and matched against nodes the way kube-scheduler's plugins do. The
rules themselves live once each: label and node selector requirements in ``engine/selectors.py``,
taints and tolerations in ``taints.py``; this module parses, filters, scores and explains.

- **TaintToleration** (filter): every ``NoSchedule`` and ``NoExecute`` taint of the node must be
  tolerated (``taints.py`` says when a toleration matches and which one counts).
  ``PreferNoSchedule`` taints are a score only: nodes with fewer untolerated ones are preferred.
- **NodeAffinity** (filter): every ``nodeSelector`` label must be on the node with that value, and
  when ``requiredDuringSchedulingIgnoredDuringExecution`` is given, at least one of its
  ``nodeSelectorTerms`` must match (terms are ORed; within a term every ``matchExpressions`` and
  ``matchFields`` requirement must hold; an empty term matches no node). Operators: ``In``,
  ``NotIn`` (also true when the label is absent), ``Exists``, ``DoesNotExist``, ``Gt`` / ``Lt``
  (the label read as an integer; absent or not an integer: no match). ``matchFields`` supports
  ``metadata.name`` (the node's name) with ``In`` / ``NotIn``, as kube-scheduler does.
  ``preferredDuringSchedulingIgnoredDuringExecution`` is a score: the weights of the terms a
  node matches.
- **NodeUnschedulable**: a cordoned node stays closed to every pod usher places. kube-scheduler
  lets in a pod that tolerates ``node.kubernetes.io/unschedulable:NoSchedule`` (DaemonSet pods,
  which usher does not schedule); usher keeps cordon meaning "nothing new here". The taints the
  control plane mirrors from a node's state (``unschedulable``, ``not-ready``, ``unreachable``)
  are therefore left out of a node's taints (``node_taints``): usher reads that state itself.

One deliberate difference: a ``NoExecute`` taint that the pod tolerates only for a time
(``tolerationSeconds``) counts as not tolerated, since the pod would be evicted mid-run; a batch
gang should not start there.

The scores follow kube-scheduler's default weights (node affinity x2, taint toleration x3, each
normalised to 0..100 over the allowed nodes). usher turns them into preference tiers: a pod goes
to the best-scoring nodes with room first, best-fit among them, then to the next tier.

Rules against other pods (``spec.affinity.podAffinity``, ``podAntiAffinity``,
``spec.topologySpreadConstraints``) are read and judged by ``podrules``, not here. Whatever usher
does not implement is never silently dropped: unknown operators, ``matchFields`` on other keys, a
``Gt`` value that is not an integer... each gives a problem naming the field path, and the pod
stays pending with it. Parsing never raises.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypedDict, TypeVar

from ...selectors import NodeSelectorOperator as SelectorOperator
from ...selectors import label_integer, requirement_matches, selects
from .taints import (
    Taint,
    Toleration,
    avoided,
    enum_choices,
    enum_member,
    node_taints,
    parse_tolerations,
    tolerated_for,
    type_name,
    untolerated,
)


class Exclusion(StrEnum):
    """Which filter keeps a node from a pod (the first that fails, in kube-scheduler's order)."""

    TAINT = "taint"
    NODE_SELECTOR = "nodeSelector"
    NODE_AFFINITY = "nodeAffinity"


class Path(StrEnum):
    """The pod spec fields this module reads (or refuses), as problems name them."""

    NODE_SELECTOR = "spec.nodeSelector"
    AFFINITY = "spec.affinity"
    NODE_AFFINITY = "spec.affinity.nodeAffinity"
    REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    PREFERRED = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


#: the one ``matchFields`` key kube-scheduler supports
NODE_NAME_FIELD = "metadata.name"
#: kube-scheduler's default score weights of its NodeAffinity and TaintToleration plugins
AFFINITY_WEIGHT = 2
TAINT_WEIGHT = 3
MAX_SCORE = 100
#: how many distinct excluding taints an explanation names
SHOWN_TAINTS = 2

#: the ``spec.affinity`` fields ``podrules`` reads (rules against other pods)
POD_RULES = frozenset({"podAffinity", "podAntiAffinity"})


@dataclass(slots=True, frozen=True)
class Requirement:
    """One ``matchExpressions`` (on a label) or ``matchFields`` (on the node name) requirement."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or field) ``key`` is ``value`` (None: absent) satisfies it."""
        return requirement_matches(self.operator, self.values, value)


@dataclass(slots=True, frozen=True)
class Term:
    """A node selector term: its requirements are ANDed; an empty term matches no node."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        for r in self.expressions:
            if not r.matches(labels.get(r.key)):
                return False
        for r in self.fields:
            if not r.matches(name):
                return False
        return True


@dataclass(slots=True, frozen=True)
class Preference:
    """A ``preferredDuringScheduling`` term and its weight (1 to 100)."""

    weight: int
    term: Term


@dataclass(slots=True, frozen=True)
class NodeConstraints:
    """Everything in a pod's spec that limits or steers which node it may go on."""

    node_selector: tuple[tuple[str, str], ...] = ()
    #: the required node affinity's terms (ORed); None when the pod has none
    required: tuple[Term, ...] | None = None
    preferred: tuple[Preference, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def untolerated(self, taints: Iterable[tuple[str, str, str]]) -> Taint | None:
        """The first ``NoSchedule`` / ``NoExecute`` taint the pod does not tolerate (for ever)."""
        return untolerated(self.tolerations, taints)

    def limited_toleration(self, taint: tuple[str, str, str]) -> int | None:
        """How long the pod tolerates a ``NoExecute`` taint it tolerates only for a time."""
        return tolerated_for(self.tolerations, taint)

    def selector_matches(self, labels: Mapping[str, str]) -> bool:
        return selects(dict(self.node_selector), (), labels)

    def affinity_matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return self.required is None or any(t.matches(name, labels) for t in self.required)

    def exclusion(self, name: str, labels: Mapping[str, str], taints: Sequence[tuple[str, str, str]]) -> Exclusion | None:
        """Which filter keeps the pod off this node, or None when every filter passes."""
        if taints and self.untolerated(taints) is not None:
            return Exclusion.TAINT
        if not self.selector_matches(labels):
            return Exclusion.NODE_SELECTOR
        if not self.affinity_matches(name, labels):
            return Exclusion.NODE_AFFINITY
        return None

    def affinity_weight(self, name: str, labels: Mapping[str, str]) -> int:
        """The summed weights of the preferred terms the node matches."""
        return sum(p.weight for p in self.preferred if p.term.matches(name, labels))

    def prefer_no_schedule(self, taints: Iterable[tuple[str, str, str]]) -> int:
        """How many ``PreferNoSchedule`` taints of the node the pod does not tolerate."""
        return avoided(self.tolerations, taints)


# -- parsing ------------------------------------------------------------------------------


def parse_constraints(spec: Mapping[str, Any]) -> tuple[NodeConstraints | None, list[str]]:
    """A pod's node constraints (None when it has none) and the problems found, never raising."""
    problems: list[str] = []
    if not isinstance(spec, Mapping):
        return None, problems
    selector = _node_selector(spec.get("nodeSelector"), problems)
    tolerations = parse_tolerations(spec.get("tolerations"), problems)
    required, preferred = _affinity(spec.get("affinity"), problems)
    if not selector and not tolerations and required is None and not preferred:
        return None, problems
    return NodeConstraints(selector, required, preferred, tolerations), problems


def _node_selector(raw: Any, problems: list[str]) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        problems.append(f"{Path.NODE_SELECTOR}: expected a map of label to value, got {type_name(raw)}")
        return ()
    out = []
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            problems.append(f"{Path.NODE_SELECTOR}.{key}: the value must be a string, got {type_name(value)}")
            continue
        out.append((key, value))
    return tuple(sorted(out))


def _affinity(raw: Any, problems: list[str]) -> tuple[tuple[Term, ...] | None, tuple[Preference, ...]]:
    if raw is None:
        return None, ()
    if not isinstance(raw, Mapping):
        problems.append(f"{Path.AFFINITY}: expected an object, got {type_name(raw)}")
        return None, ()
    required: tuple[Term, ...] | None = None
    preferred: tuple[Preference, ...] = ()
    for key, value in raw.items():
        if key == "nodeAffinity":
            required, preferred = _node_affinity(value, problems)
        elif key in POD_RULES:
            continue  # podrules reads them
        elif value:
            problems.append(f"{Path.AFFINITY}.{key} is not supported by usher")
    return required, preferred


def _node_affinity(raw: Any, problems: list[str]) -> tuple[tuple[Term, ...] | None, tuple[Preference, ...]]:
    if raw is None:
        return None, ()
    if not isinstance(raw, Mapping):
        problems.append(f"{Path.NODE_AFFINITY}: expected an object, got {type_name(raw)}")
        return None, ()
    required: tuple[Term, ...] | None = None
    preferred: list[Preference] = []
    for key, value in raw.items():
        if key == "requiredDuringSchedulingIgnoredDuringExecution":
            required = _required(value, problems)
        elif key == "preferredDuringSchedulingIgnoredDuringExecution":
            preferred = _preferred(value, problems)
        elif value:
            problems.append(f"{Path.NODE_AFFINITY}.{key} is not supported by usher")
    return required, tuple(preferred)


def _required(raw: Any, problems: list[str]) -> tuple[Term, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{Path.REQUIRED}: expected an object, got {type_name(raw)}")
        return None
    for key, value in raw.items():
        if key != "nodeSelectorTerms" and value:
            problems.append(f"{Path.REQUIRED}.{key} is not supported by usher")
    terms = raw.get("nodeSelectorTerms")
    path = f"{Path.REQUIRED}.nodeSelectorTerms"
    if not isinstance(terms, list) or not terms:
        problems.append(f"{path}: expected a non-empty list of terms, got {type_name(terms)}")
        return None
    out = []
    for i, term in enumerate(terms):
        parsed = _term(term, f"{path}[{i}]", problems)
        if parsed is not None:
            out.append(parsed)
    return tuple(out)


def parse_node_selector(raw: Any, path: str) -> tuple[tuple[Term, ...] | None, list[str]]:
    """A ``NodeSelector`` held elsewhere than in a pod (a PersistentVolume's
    ``spec.nodeAffinity.required``): its terms, ORed, matched as a pod's required node affinity
    is (None: no selector), and the problems found, named under ``path``."""
    problems: list[str] = []
    if raw is None:
        return None, problems
    if not isinstance(raw, Mapping):
        return None, [f"{path}: expected an object, got {type_name(raw)}"]
    terms = raw.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return None, [f"{path}.nodeSelectorTerms: expected a non-empty list of terms, got {type_name(terms)}"]
    out = [t for i, term in enumerate(terms) if (t := _term(term, f"{path}.nodeSelectorTerms[{i}]", problems)) is not None]
    return tuple(out), problems


def _preferred(raw: Any, problems: list[str]) -> list[Preference]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(f"{Path.PREFERRED}: expected a list, got {type_name(raw)}")
        return []
    out = []
    for i, item in enumerate(raw):
        path = f"{Path.PREFERRED}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{path}: expected an object, got {type_name(item)}")
            continue
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            problems.append(f"{path}.weight: {weight!r} is not a whole number from 1 to 100")
            continue
        term = _term(item.get("preference"), f"{path}.preference", problems)
        if term is not None:
            out.append(Preference(weight, term))
    return out


def _term(raw: Any, path: str, problems: list[str]) -> Term | None:
    if raw is None:
        return Term()
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected an object, got {type_name(raw)}")
        return None
    ok = True
    for key, value in raw.items():
        if key not in ("matchExpressions", "matchFields") and value:
            problems.append(f"{path}.{key} is not supported by usher")
            ok = False
    expressions = _requirements(raw.get("matchExpressions"), f"{path}.matchExpressions", False, problems)
    fields = _requirements(raw.get("matchFields"), f"{path}.matchFields", True, problems)
    if expressions is None or fields is None or not ok:
        return None
    return Term(expressions, fields)


def _requirements(raw: Any, path: str, on_fields: bool, problems: list[str]) -> tuple[Requirement, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{path}: expected a list, got {type_name(raw)}")
        return None
    out = []
    for i, item in enumerate(raw):
        req = _requirement(item, f"{path}[{i}]", on_fields, problems)
        if req is None:
            return None
        out.append(req)
    return tuple(out)


def _requirement(raw: Any, path: str, on_field: bool, problems: list[str]) -> Requirement | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected an object, got {type_name(raw)}")
        return None
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        problems.append(f"{path}.key: expected a non-empty string, got {key!r}")
        return None
    if on_field and key != NODE_NAME_FIELD:
        problems.append(f"{path}.key: {key!r} is not supported (matchFields supports only {NODE_NAME_FIELD})")
        return None
    op_text = raw.get("operator")
    operator = enum_member(SelectorOperator, op_text)
    if operator is None:
        problems.append(f"{path}.operator: {op_text!r} is not one of {enum_choices(SelectorOperator)}")
        return None
    if on_field and operator not in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        problems.append(f"{path}.operator: {op_text!r} is not supported on {NODE_NAME_FIELD} (In, NotIn)")
        return None
    values = raw.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        problems.append(f"{path}.values: expected a list of strings, got {values!r}")
        return None
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        problems.append(f"{path}.values: {operator} needs at least one value")
        return None
    if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        problems.append(f"{path}.values: {operator} takes no values, got {values!r}")
        return None
    numeric = operator in (SelectorOperator.GT, SelectorOperator.LT)
    if numeric and (len(values) != 1 or label_integer(values[0]) is None):
        problems.append(f"{path}.values: {operator} needs exactly one integer value, got {values!r}")
        return None
    return Requirement(key, operator, tuple(values))


# -- matching against nodes ---------------------------------------------------------------


class NodeLike(Protocol):
    """What matching needs of a node: a ``NodeView`` or the engine's ``Node``."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def taints(self) -> Sequence[tuple[str, str, str]]: ...


N = TypeVar("N", bound=NodeLike)


@dataclass(slots=True)
class NodeFilter:
    """The outcome of matching a pod's constraints against a list of nodes."""

    #: the names of the nodes that pass every filter; None when every node does
    eligible: frozenset[str] | None
    nodes: int = 0
    #: how many nodes each filter excluded (the first filter that fails counts)
    excluded: Counter[Exclusion] = field(default_factory=Counter)
    #: the taints that excluded nodes, with how many nodes each
    taints: Counter[Taint] = field(default_factory=Counter)
    #: preference score (0 to 500) of each allowed node; empty when the pod prefers nothing
    scores: dict[str, int] = field(default_factory=dict)


def filter_nodes(constraints: NodeConstraints | None, nodes: Iterable[NodeLike]) -> NodeFilter:
    """Which nodes pass the pod's filters, why the others do not, and how the allowed ones score."""
    if constraints is None:
        return NodeFilter(None, sum(1 for _ in nodes))
    result, allowed, scores = _match(constraints, nodes)
    if result.excluded:
        result.eligible = frozenset(n.name for n in allowed)
    if scores is not None:
        result.scores = {n.name: s for n, s in zip(allowed, scores)}
    return result


def _match(constraints: NodeConstraints, nodes: Iterable[N]) -> tuple[NodeFilter, list[N], list[int] | None]:
    """Counts of what excludes nodes, the allowed nodes, and their scores (None: all alike)."""
    result = NodeFilter(None)
    allowed: list[N] = []
    avoid: list[int] = []
    selector = bool(constraints.node_selector)
    affinity = constraints.required is not None
    # Nodes share taint sets: judge each distinct set once (the untolerated taint, if any, and
    # how many PreferNoSchedule taints the pod does not tolerate).
    verdicts: dict[tuple[tuple[str, str, str], ...], tuple[Taint | None, int]] = {(): (None, 0)}
    for node in nodes:
        result.nodes += 1
        taints = tuple(node.taints)
        verdict = verdicts.get(taints)
        if verdict is None:
            verdict = verdicts[taints] = (constraints.untolerated(taints), constraints.prefer_no_schedule(taints))
        if verdict[0] is not None:
            result.excluded[Exclusion.TAINT] += 1
            result.taints[verdict[0]] += 1
        elif selector and not constraints.selector_matches(node.labels):
            result.excluded[Exclusion.NODE_SELECTOR] += 1
        elif affinity and not constraints.affinity_matches(node.name, node.labels):
            result.excluded[Exclusion.NODE_AFFINITY] += 1
        else:
            allowed.append(node)
            avoid.append(verdict[1])
    return result, allowed, _scores(constraints, allowed, avoid)


def _scores(constraints: NodeConstraints, allowed: Sequence[NodeLike], avoid: list[int]) -> list[int] | None:
    """kube-scheduler's NodeAffinity and TaintToleration scores of the allowed nodes, normalised
    and weighted; None when every node scores alike."""
    if not allowed:
        return None
    if constraints.preferred:
        affinity = [constraints.affinity_weight(n.name, n.labels) for n in allowed]
    else:
        affinity = [0] * len(allowed)
    top_affinity, top_avoid = max(affinity), max(avoid)
    if not top_affinity and not top_avoid:
        return None
    out = []
    for a, t in zip(affinity, avoid):
        a_score = MAX_SCORE * a // top_affinity if top_affinity else 0
        t_score = MAX_SCORE - MAX_SCORE * t // top_avoid if top_avoid else MAX_SCORE
        out.append(AFFINITY_WEIGHT * a_score + TAINT_WEIGHT * t_score)
    return out


def explain_exclusions(result: NodeFilter, constraints: NodeConstraints | None = None) -> str | None:
    """Why the excluded nodes are excluded, in words; None when no node is.

    E.g. ``3 nodes have a taint the pod does not tolerate (gpu=reserved:NoSchedule), 2 do not
    match its nodeSelector``.
    """
    parts = []
    n = result.excluded.get(Exclusion.TAINT, 0)
    if n:
        common = [taint for taint, _ in result.taints.most_common()]
        shown = []
        for taint in common[:SHOWN_TAINTS]:
            limited = constraints.limited_toleration(taint) if constraints is not None else None
            shown.append(str(taint) if limited is None else f"{taint}, tolerated for {limited}s only")
        detail = "; ".join(shown)
        if len(common) > SHOWN_TAINTS:
            more = len(common) - SHOWN_TAINTS
            detail += f"; and {more} other taint{'s' if more > 1 else ''}"
        parts.append(f"{_nodes(n)} {'has' if n == 1 else 'have'} a taint the pod does not tolerate ({detail})")
    n = result.excluded.get(Exclusion.NODE_SELECTOR, 0)
    if n:
        parts.append(f"{_nodes(n, not parts)} {'does' if n == 1 else 'do'} not match its nodeSelector")
    n = result.excluded.get(Exclusion.NODE_AFFINITY, 0)
    if n:
        parts.append(f"{_nodes(n, not parts)} {'does' if n == 1 else 'do'} not match its required node affinity")
    return ", ".join(parts) or None


def _nodes(n: int, noun: bool = True) -> str:
    if not noun:
        return str(n)
    return f"{n} node{'s' if n != 1 else ''}"


# -- for the engine -----------------------------------------------------------------------


class EngineNode(NodeLike, Protocol):
    """The engine's ``Node`` as seen here: an id besides what matching needs."""

    @property
    def id(self) -> int: ...


class GroupConstraints(TypedDict):
    """The engine ``PodGroup`` fields that carry a pod's node constraints."""

    eligible: frozenset[int] | None
    preferred: tuple[frozenset[int], ...]
    exclusions: str | None


def group_constraints(constraints: NodeConstraints | None, nodes: Sequence[EngineNode]) -> GroupConstraints:
    """``PodGroup`` keyword arguments for a pod with ``constraints`` on the engine's ``nodes``.

    ``eligible``: the node ids the pod may go on (None: any); ``preferred``: node ids in
    preference tiers, best first (the least preferred nodes are in no tier); ``exclusions``: why
    the other nodes are excluded, for the pod's "why pending" message.
    """
    if constraints is None:
        if not any(n.taints for n in nodes):
            return GroupConstraints(eligible=None, preferred=(), exclusions=None)
        constraints = NodeConstraints()  # no tolerations: every NoSchedule/NoExecute taint excludes
    result, allowed, scores = _match(constraints, nodes)
    ids = [n.id for n in allowed]
    return GroupConstraints(
        eligible=frozenset(ids) if result.excluded else None,
        preferred=_tiers(ids, scores),
        exclusions=explain_exclusions(result, constraints),
    )


def eligible_node_ids(constraints: NodeConstraints | None, nodes: Sequence[EngineNode]) -> frozenset[int] | None:
    """The ids of the engine ``nodes`` the pod may go on; None when it may go on any."""
    return group_constraints(constraints, nodes)["eligible"]


def _tiers(ids: Sequence[int], scores: Sequence[int] | None) -> tuple[frozenset[int], ...]:
    """Node ids grouped by score, best first, without the lowest score (the fallback)."""
    if scores is None:
        return ()
    levels: dict[int, set[int]] = {}
    for nid, score in zip(ids, scores):
        levels.setdefault(score, set()).add(nid)
    ranked = sorted(levels, reverse=True)
    return tuple(frozenset(levels[s]) for s in ranked[:-1])
