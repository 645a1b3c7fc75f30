"""Invariants on random scenarios, checked from the report alone (hypothesis).

No node over capacity, no shared GPU above 1, no whole GPU given twice, no partial gang, quotas
and cohort limits held (also by the independent quota audit), required topology held, nothing
placed on cordoned or failed nodes, and the same scenario gives byte-identical reports. The gang
baselines keep every one of them; ``kube-default`` binds pod by pod, so it keeps all but the
gang invariant (its partial gangs are tested in ``test_baseline_policies``), and its namespace
quotas never let a queue above its nominal quota.
"""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from usher.engine.controller import Controller
from usher.engine.quota_audit import audit_quotas
from usher.engine.report import build_report, dumps
from usher.engine.scenario import ScenarioError, parse_scenario

LEVEL = "usher/rack"


@st.composite
def scenarios(draw) -> str:
    n_nodes = draw(st.integers(2, 6))
    per_rack = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([4, 8]))
    lines = [
        "name: prop",
        f"topology: {{levels: [{LEVEL}, kubernetes.io/hostname]}}",
        "priorityClasses: {low: 1, high: 10}",
        "nodeGroups:",
        f"  - {{prefix: n, count: {n_nodes}, layout: {{{LEVEL}: {per_rack}}}, template: {{gpus: {gpus}, cpu: 32, memory: 256Gi, nvlink: [{list(range(gpus // 2))}, {list(range(gpus // 2, gpus))}]}}}}",
        "queues:",
    ]
    queues = ["qa", "qb", "qc"]
    policies = ["Never", "LowerPriority", "Any"]
    for q in queues:
        quota = draw(st.integers(2, n_nodes * gpus))
        borrow = draw(st.one_of(st.none(), st.integers(0, 8)))
        lend = draw(st.one_of(st.none(), st.integers(0, quota)))
        extra = ""
        if borrow is not None:
            extra += f", borrowingLimit: {{gpu: {borrow}}}"
        if lend is not None:
            extra += f", lendingLimit: {{gpu: {lend}}}"
        reclaim = draw(st.sampled_from(policies))
        within = draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]))
        borrow_pol = draw(st.sampled_from(["Never", "LowerPriority"]))
        lines.append(
            f"  - {{name: {q}, cohort: c, quota: {{gpu: {quota}, cpu: 128}}{extra}, "
            f"preemption: {{withinQueue: {within}, reclaimWithinCohort: {reclaim}, borrowWithinCohort: {borrow_pol}}}}}"
        )
    lines.append("jobs:")
    n_jobs = draw(st.integers(1, 14))
    for i in range(n_jobs):
        count = draw(st.integers(1, 3))
        gpu = draw(st.sampled_from([0, 0.25, 0.5, 1, 2, 4] + ([8] if gpus == 8 else [])))
        topo = draw(st.sampled_from(["", ", topology: {required: usher/rack}", ", topology: {preferred: usher/rack}"]))
        min_count = draw(st.one_of(st.none(), st.integers(1, count)))
        mc = f", minCount: {min_count}" if min_count else ""
        ck = draw(st.sampled_from(["", ", checkpointEvery: 10m"]))
        lines.append(
            f"  - {{name: j{i}, queue: {draw(st.sampled_from(queues))}, submit: {draw(st.integers(0, 7200))}, "
            f"priority: {draw(st.sampled_from(['low', 'high']))}, duration: {draw(st.integers(60, 7200))}{mc}{ck}, "
            f"pods: [{{count: {count}, gpu: {gpu}, cpu: {draw(st.integers(0, 16))}{topo}}}]}}"
        )
    events = draw(st.lists(st.tuples(st.integers(0, 9000), st.sampled_from(["drain", "cordon", "uncordon", "fail", "recover"]), st.integers(1, n_nodes)), max_size=4))
    if events:
        lines.append("events:")
        for at, action, k in events:
            lines.append(f"  - {{at: {at}, action: {action}, node: n-{k:02d}}}")
    return "\n".join(lines) + "\n"


def _run(text: str, policy: str = "usher") -> tuple[dict, object]:
    scenario = parse_scenario(text, file="prop.yaml")
    ctrl = Controller(scenario, policy)
    ctrl.run_to_end()
    return build_report(ctrl), scenario


def _unavailable(scenario) -> dict[str, list[tuple[float, float]]]:
    """Per node, the intervals in which it was cordoned or failed (from the events)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    cordoned: dict[str, float | None] = {}
    failed: dict[str, float | None] = {}
    for ev in sorted(scenario.events, key=lambda e: e.at):
        a, n = str(ev.action), ev.node
        if a in ("cordon", "drain") and cordoned.get(n) is None:
            cordoned[n] = ev.at
        elif a == "uncordon" and cordoned.get(n) is not None:
            out[n].append((cordoned[n], ev.at))
            cordoned[n] = None
        elif a == "fail" and failed.get(n) is None:
            failed[n] = ev.at
        elif a == "recover" and failed.get(n) is not None:
            out[n].append((failed[n], ev.at))
            failed[n] = None
    for d in (cordoned, failed):
        for n, since in d.items():
            if since is not None:
                out[n].append((since, float("inf")))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_on_random_scenarios(text: str) -> None:
    _check_invariants(text, "usher")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["kueue", "volcano", "slurm", "fifo"]))
def test_invariants_hold_for_the_gang_baselines(text: str, policy: str) -> None:
    _check_invariants(text, policy)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_kube_default_holds_every_invariant_but_the_gang(text: str) -> None:
    _check_invariants(text, "kube-default")


def _check_invariants(text: str, policy: str) -> None:
    gang = policy != "kube-default"
    try:
        report, scenario = _run(text, policy)
    except ScenarioError:
        assume(False)  # a gang bigger than the cluster: rejected up front, nothing to replay
        return
    nodes = {n.name: n for n in scenario.all_nodes()}
    jobs = {j.name: j for j in scenario.all_jobs()}
    queues = {q.name: q for q in scenario.queues}
    runs = [(j["name"], r) for j in report["jobs"] for r in j["runs"]]
    # Each pod holds its GPUs from its run's start, or from when it was bound (pod by pod).
    pods = [(name, r, p, p.get("since", r["start"])) for name, r in runs for p in r["placements"]]
    blocked = _unavailable(scenario)
    moments = sorted({since for _, _, _, since in pods})
    for t in moments:
        active = [(name, p) for name, r, p, since in pods if since <= t < r["end"] or (since == t == r["end"])]
        whole: dict[tuple[str, int], str] = {}
        shared: dict[tuple[str, int], float] = defaultdict(float)
        cpu: dict[str, int] = defaultdict(int)
        usage: dict[str, float] = defaultdict(float)
        for name, p in active:
            spec = jobs[name]
            pod_cpu = spec.pods[0].cpu
            usage[spec.queue] += spec.pods[0].gpu
            node = nodes[p["node"]]
            cpu[p["node"]] += pod_cpu
            for g in p["gpus"]:
                assert 0 <= g < node.gpus
                key = (p["node"], g)
                if "gpuShare" in p:
                    assert key not in whole, f"{key} whole and shared at {t}"
                    shared[key] += p["gpuShare"]
                else:
                    assert key not in whole and key not in shared, f"GPU {key} given twice at {t}"
                    whole[key] = name
        assert all(v <= 1.0 + 1e-9 for v in shared.values())
        for n, used in cpu.items():
            assert nodes[n].cpu is None or used <= nodes[n].cpu
        # Quotas: no queue above nominal + borrowing limit; the cohort never above its total.
        total_nominal = sum(q.quota.gpu for q in queues.values())
        assert sum(usage.values()) <= total_nominal + 1e-9
        for qname, used in usage.items():
            q = queues[qname]
            ceiling = q.quota.gpu + (q.borrowing_limit.gpu if q.borrowing_limit and q.borrowing_limit.gpu is not None else 1e9)
            if not gang:  # a namespace ResourceQuota: no borrowing
                ceiling = q.quota.gpu
            assert used <= ceiling + 1e-9, f"{qname} uses {used} > {ceiling} at {t}"
    assert audit_quotas(scenario, report) == []
    for name, r in runs:
        spec = jobs[name]
        group = spec.pods[0]
        n = len(r["placements"])
        # Never a partial gang: at least minCount pods, at most all of them (pod by pod: a run
        # that never started to work may hold fewer, but never more).
        assert (spec.min_count or group.count) <= n <= group.count or (not gang and r.get("workStart", 0) is None)
        if group.topology is not None and group.topology.required:
            racks = {nodes[p["node"]].labels[LEVEL] for p in r["placements"]}
            assert len(racks) == 1
        for p in r["placements"]:
            bound = p.get("since", r["start"])
            for lo, hi in blocked.get(p["node"], []):
                assert not (lo <= bound < hi), f"{name} placed on unavailable {p['node']} at {bound}"
    # Determinism: the same scenario gives a byte-identical report.
    again, _ = _run(text, policy)
    assert dumps(again) == dumps(report)
    json.loads(dumps(report))
