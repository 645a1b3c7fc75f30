"""usher and the sandbox read each Kubernetes rule as Kubernetes does: one table per rule, each
case answered by both sides and compared with kube's answer.

Each rule is written once on each side (usher: ``engine/selectors.py``, ``kube/taints.py``,
``kube/objects.pod_requests``; the sandbox, its independent oracle: ``sandbox/labels.py``,
``sandbox/nodefit.py``). If the two drift apart, usher binds where the sandbox's kubelet refuses
or its taint manager evicts, or waits where a cluster would have room; this table says which rule
and which case. The expected answers come from Kubernetes' own code: apimachinery's
``labels.Requirement.Matches`` (``Gt``/``Lt`` read with ``strconv.ParseInt(s, 10, 64)``),
``Toleration.ToleratesTaint``, the taint eviction controller's ``GetMatchingTolerations`` and
``getMinTolerationTime``, and component-helpers' ``resource.PodRequests``.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubectl import Kubectl
from sandboxes import kubectl_fixture, two_node_sandbox_fixture  # noqa: F401 (the kubectl and sandbox fixtures)

from usher.engine.backends.kube.constraints import parse_constraints
from usher.engine.backends.kube.objects import GPU_RESOURCE, pod_requests, selector_matches
from usher.sandbox import nodefit
from usher.sandbox.apiserver import ServerThread
from usher.sandbox.store import LabelSelector

MI = 2**20

# -- label selectors (metav1.LabelSelector: a PodDisruptionBudget's, a workload's) -------------

LABELS = {"app": "train", "tier": "gpu"}

LABEL_SELECTORS = [
    ("an empty selector selects everything", {}, LABELS, True),
    ("matchLabels: each key with that value", {"matchLabels": {"app": "train"}}, LABELS, True),
    ("matchLabels: another value", {"matchLabels": {"app": "serve"}}, LABELS, False),
    ("matchLabels: a missing key", {"matchLabels": {"team": "a"}}, LABELS, False),
    ("In", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, LABELS, True),
    ("In with a missing key", {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, LABELS, False),
    ("NotIn with a missing key holds", {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, LABELS, True),
    ("NotIn with a listed value", {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, LABELS, False),
    ("Exists", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, LABELS, True),
    ("DoesNotExist", {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, LABELS, False),
    ("every term must hold", {"matchLabels": {"app": "train"},
                              "matchExpressions": [{"key": "tier", "operator": "In", "values": ["cpu"]}]}, LABELS, False),
    ("an empty selector on no labels", {}, {}, True),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), [c[1:] for c in LABEL_SELECTORS], ids=[c[0] for c in LABEL_SELECTORS])
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected, "usher"
    assert LabelSelector.from_spec(selector).matches(labels) is expected, "sandbox"


@pytest.mark.parametrize(("query", "expected"), [
    ("app=train,tier in (gpu,cpu)", True), ("team notin (a)", True), ("!app", False), ("tier!=gpu", False), ("", True),
    ("gen>3", True), ("gen<4", False), ("team>1", False),
])
def test_the_query_syntax_uses_the_same_requirement_rule(query: str, expected: bool) -> None:
    """A list or watch's ``labelSelector`` (``-l`` in kubectl), ``>`` and ``<`` included."""
    assert LabelSelector.parse(query).matches({**LABELS, "gen": "4"}) is expected


def test_kubectl_selects_nodes_by_a_label_read_as_an_integer(sandbox: ServerThread, kubectl: Kubectl) -> None:
    """What ``kubectl get -l 'gen>3'`` answers on a cluster: only labels ParseInt reads as more
    than 3 (``1_0`` is no base-10 integer), and a bound that is no integer is refused."""
    four, ten = kubectl.ok("get", "nodes", "-o", "name").split()[:2]
    kubectl.ok("label", four, "gen=4")
    kubectl.ok("label", ten, "gen=1_0")
    assert kubectl.ok("get", "nodes", "-l", "gen>3", "-o", "name").split() == [four]
    assert kubectl.ok("get", "nodes", "-l", "gen<5", "-o", "name").split() == [four]
    refused = kubectl.run("get", "nodes", "-l", "gen>x")
    assert refused.returncode != 0 and "must be an integer" in refused.stderr


# -- node selectors and required node affinity (nodeSelector, matchExpressions incl. Gt/Lt) -----


def _node(labels: dict[str, str], name: str = "n0") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def _affinity(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = fields
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


NODE_SELECTORS = [
    ("nodeSelector: the label with that value", {"nodeSelector": {"zone": "a"}}, {"zone": "a"}, True),
    ("nodeSelector: a missing label", {"nodeSelector": {"zone": "a"}}, {}, False),
    ("an empty nodeSelector allows every node", {"nodeSelector": {}}, {}, True),
    ("In", _affinity(_expr("zone", "In", "a", "b")), {"zone": "b"}, True),
    ("In with a missing label", _affinity(_expr("zone", "In", "a")), {}, False),
    ("NotIn with a missing label holds", _affinity(_expr("zone", "NotIn", "a")), {}, True),
    ("NotIn with a listed value", _affinity(_expr("zone", "NotIn", "a")), {"zone": "a"}, False),
    ("Exists", _affinity(_expr("gpu", "Exists")), {"gpu": ""}, True),
    ("DoesNotExist", _affinity(_expr("gpu", "DoesNotExist")), {"gpu": "h100"}, False),
    ("Gt", _affinity(_expr("gen", "Gt", "3")), {"gen": "4"}, True),
    ("Gt with an equal value", _affinity(_expr("gen", "Gt", "3")), {"gen": "3"}, False),
    ("Lt", _affinity(_expr("gen", "Lt", "3")), {"gen": "-2"}, True),
    ("Gt with a signed label, as ParseInt reads it", _affinity(_expr("gen", "Gt", "3")), {"gen": "+4"}, True),
    ("Gt with a label that is not an integer", _affinity(_expr("gen", "Gt", "3")), {"gen": "4a"}, False),
    ("Gt with an underscore in the label (not base 10)", _affinity(_expr("gen", "Gt", "3")), {"gen": "1_0"}, False),
    ("Gt with a label past int64", _affinity(_expr("gen", "Gt", "3")), {"gen": "9" * 20}, False),
    ("Lt with a missing label", _affinity(_expr("gen", "Lt", "3")), {}, False),
    ("Gt with a bound that is not an integer matches nothing", _affinity(_expr("gen", "Gt", "x")), {"gen": "4"}, False),
    ("matchFields metadata.name In", _affinity(fields=[_expr("metadata.name", "In", "n0")]), {}, True),
    ("matchFields metadata.name NotIn", _affinity(fields=[_expr("metadata.name", "NotIn", "n0")]), {}, False),
    ("an empty term matches no node", _affinity(), {"zone": "a"}, False),
    ("a term's requirements are ANDed", _affinity(_expr("zone", "In", "a"), _expr("gen", "Gt", "5")),
     {"zone": "a", "gen": "4"}, False),
]


@pytest.mark.parametrize(("spec", "labels", "expected"), [c[1:] for c in NODE_SELECTORS], ids=[c[0] for c in NODE_SELECTORS])
def test_node_selectors_and_required_node_affinity(spec: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    constraints, problems = parse_constraints(spec)
    # usher refuses what kube could not build (a Gt bound that is no integer) with a problem:
    # the pod is placed nowhere, as kube's term matches no node
    usher = not problems and (constraints is None or (constraints.selector_matches(labels)
                                                      and constraints.affinity_matches("n0", labels)))
    assert usher is expected, f"usher (problems: {problems})"
    assert nodefit.matches_node_selector(spec, _node(labels)) is expected, "sandbox"


# -- tolerations against taints ----------------------------------------------------------------

FOREVER = None

DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
DRAIN = {"key": "drain", "effect": "NoExecute"}
SPOT = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}


def _tol(key: str = "", operator: str | None = None, value: str = "", effect: str = "", seconds: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, given in (("key", key), ("operator", operator), ("value", value), ("effect", effect)):
        if given:
            out[name] = given
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return out


#: (case, tolerations, taint, whether any toleration matches, the eviction delay of a NoExecute taint)
TOLERATIONS = [
    ("no tolerations", [], DEDICATED, False, 0),
    ("Exists with an empty key tolerates every taint", [_tol(operator="Exists")], DEDICATED, True, FOREVER),
    ("Exists with an empty key, NoExecute", [_tol(operator="Exists")], DRAIN, True, FOREVER),
    ("Exists with a key: any value", [_tol("dedicated", "Exists")], DEDICATED, True, FOREVER),
    ("Equal (the default) needs the same value", [_tol("dedicated", value="ml")], DEDICATED, True, FOREVER),
    ("Equal with another value", [_tol("dedicated", "Equal", "cv")], DEDICATED, False, 0),
    ("Equal with no value matches a taint without one", [_tol("drain", "Equal")], DRAIN, True, FOREVER),
    ("another key", [_tol("other", "Exists")], DEDICATED, False, 0),
    ("an effect must be the taint's", [_tol("dedicated", "Exists", effect="NoExecute")], DEDICATED, False, 0),
    ("an empty effect matches every effect", [_tol("spot", "Exists")], SPOT, True, FOREVER),
    ("NoExecute with tolerationSeconds", [_tol("drain", "Exists", effect="NoExecute", seconds=300)], DRAIN, True, 300),
    ("tolerationSeconds 0: evicted at once", [_tol("drain", "Exists", effect="NoExecute", seconds=0)], DRAIN, True, 0),
    ("tolerationSeconds below 0 counts as 0", [_tol("drain", "Exists", effect="NoExecute", seconds=-5)], DRAIN, True, 0),
    ("the first match counts: limited, then for ever",
     [_tol("drain", "Exists", effect="NoExecute", seconds=60), _tol(operator="Exists")], DRAIN, True, 60),
    ("the first match counts: for ever, then limited",
     [_tol(operator="Exists"), _tol("drain", "Exists", effect="NoExecute", seconds=60)], DRAIN, True, FOREVER),
    ("the first match counts, not the shortest",
     [_tol("drain", "Exists", effect="NoExecute", seconds=100), _tol("drain", "Exists", effect="NoExecute", seconds=10)],
     DRAIN, True, 100),
    ("a toleration that does not match is passed over",
     [_tol("other", "Exists", effect="NoExecute", seconds=5), _tol("drain", "Exists", effect="NoExecute", seconds=50)],
     DRAIN, True, 50),
]


@pytest.mark.parametrize(("tolerations", "taint", "tolerated", "delay"), [c[1:] for c in TOLERATIONS], ids=[c[0] for c in TOLERATIONS])
def test_tolerations_against_a_taint(tolerations: list[dict[str, Any]], taint: dict[str, str], tolerated: bool,
                                     delay: int | None) -> None:
    no_execute = taint["effect"] == "NoExecute"
    # the sandbox: the scheduler's and kubelet's filter, and the taint eviction controller's delay
    assert nodefit.tolerates(tolerations, taint) is tolerated, "sandbox"
    if no_execute:
        assert nodefit.eviction_delay(tolerations, taint) == delay, "sandbox's taint manager"
    # usher: a NoExecute taint tolerated only for a time keeps a batch gang off (by design)
    constraints, problems = parse_constraints({"tolerations": tolerations})
    assert problems == []
    plain = (taint["key"], taint.get("value", ""), taint["effect"])
    keeps_off = taint["effect"] != "PreferNoSchedule" and (not tolerated or (no_execute and delay is not FOREVER))
    if constraints is None:
        assert keeps_off, "usher: no tolerations tolerate nothing"
        return
    assert (constraints.untolerated([plain]) is not None) is keeps_off, "usher"
    if taint["effect"] == "PreferNoSchedule":
        assert constraints.prefer_no_schedule([plain]) == (0 if tolerated else 1), "usher's score"
    if no_execute:
        assert constraints.limited_toleration(plain) == (delay if tolerated else None), "usher's explanation"


# -- a pod's effective requests ----------------------------------------------------------------


def _c(name: str, sidecar: bool = False, limits: dict[str, str] | None = None, **requests: str) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = {k.replace("_", "-"): v for k, v in requests.items()}
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "busybox:1.36", "resources": resources, **({"restartPolicy": "Always"} if sidecar else {})}


#: (case, spec, the effective requests kube-scheduler and the kubelet count, with pods: 1)
REQUESTS = [
    ("app containers summed", {"containers": [_c("a", cpu="1"), _c("b", cpu="500m", memory="1Gi")]},
     {"cpu": 1500, "memory": 1024 * MI}),
    ("a limit stands in for a missing request", {"containers": [_c("a", limits={"cpu": "2", GPU_RESOURCE: "4"})]},
     {"cpu": 2000, GPU_RESOURCE: 4}),
    ("an init container larger than the app containers",
     {"initContainers": [_c("warm", cpu="6", memory="64Mi")], "containers": [_c("a", cpu="1", memory="1Gi")]},
     {"cpu": 6000, "memory": 1024 * MI}),
    ("the largest init container, not their sum",
     {"initContainers": [_c("i1", cpu="3"), _c("i2", cpu="4")], "containers": [_c("a", cpu="1")]}, {"cpu": 4000}),
    ("sidecars run beside the app containers",
     {"initContainers": [_c("mesh", sidecar=True, cpu="1", **{"rdma/ib": "1"})], "containers": [_c("a", cpu="2", **{"rdma/ib": "2"})]},
     {"cpu": 3000, "rdma/ib": 3}),
    ("an init container runs beside the sidecars started before it",
     {"initContainers": [_c("mesh", sidecar=True, cpu="1"), _c("warm", cpu="3")], "containers": [_c("a", cpu="1")]},
     {"cpu": 4000}),
    ("a sidecar started after an init container does not run beside it",
     {"initContainers": [_c("warm", cpu="3"), _c("mesh", sidecar=True, cpu="1")], "containers": [_c("a", cpu="1")]},
     {"cpu": 3000}),
    ("overhead is added to the whole",
     {"initContainers": [_c("warm", cpu="6")], "containers": [_c("a", cpu="1")], "overhead": {"cpu": "250m", "memory": "64Mi"}},
     {"cpu": 6250, "memory": 64 * MI}),
    ("extended resources and hugepages by the same arithmetic",
     {"initContainers": [_c("warm", hugepages_2Mi="512Mi")],
      "containers": [_c("a", hugepages_2Mi="256Mi", ephemeral_storage="10Gi", limits={GPU_RESOURCE: "2"})]},
     {"hugepages-2Mi": 512 * MI, "ephemeral-storage": 10 * 1024 * MI, GPU_RESOURCE: 2}),
    ("nothing requested: only the pod itself", {"containers": [_c("a")]}, {}),
]


def _usher_requests(spec: dict[str, Any]) -> dict[str, int]:
    problems: list[str] = []
    r = pod_requests(spec, problems)
    assert problems == []
    out = {"cpu": r.cpu, "memory": r.memory, GPU_RESOURCE: r.gpus, **dict(r.extra)}
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS])
def test_a_pods_effective_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    with_pod = {**expected, "pods": 1}
    assert _usher_requests(spec) == with_pod, "usher"
    assert nodefit.pod_requests({"spec": spec}) == with_pod, "sandbox"
