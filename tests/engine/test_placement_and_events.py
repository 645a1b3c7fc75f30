"""Topology, NVLink islands, GPU sharing, GPU models, and operator / node events."""

from conftest import job, nodes_of, replay

RACKS = """
name: t
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 5, layout: {usher/rack: 2}, template: {gpus: 8}}
queues: [{name: q}]
"""
# racks: n-rack1 = n-01, n-02; n-rack2 = n-03, n-04; n-rack3 = n-05


def test_best_fit_domain_is_the_tightest_rack_that_fits():
    r = replay(RACKS + """
jobs:
  - {name: gang, queue: q, duration: 1h, pods: [{count: 1, gpu: 8, topology: {required: usher/rack}}]}
""")
    # n-rack3 has exactly 8 free GPUs: the tightest fit, keeping the two-node racks whole.
    assert nodes_of(job(r, "gang")["runs"][0]) == ["n-05"]


SPLIT_RACKS = """
name: t
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodeGroups:
  - {prefix: n, count: 4, layout: {usher/rack: 2}, template: {gpus: 8}}
queues: [{name: q}]
jobs:
  - {name: gang, queue: q, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
events:
  - {at: 0s, action: cordon, node: n-02}
  - {at: 0s, action: cordon, node: n-04}
"""


def test_required_rack_is_unsatisfiable_when_free_gpus_are_spread_across_racks():
    early = replay(SPLIT_RACKS, until=600)
    gang = job(early, "gang")
    assert gang["pendingReason"] == "TopologyUnsatisfiable"
    assert "inside one usher/rack" in gang["message"] and "8 GPUs free" in gang["message"]
    assert "16 free in the whole cluster" in gang["message"]
    # 16 GPUs were free from the start, but not in one rack: it waits for n-04 to return.
    later = replay(SPLIT_RACKS + "  - {at: 30m, action: uncordon, node: n-04}\n")
    run = job(later, "gang")["runs"][0]
    assert run["start"] == 1800.0
    assert sorted(nodes_of(run)) == ["n-03", "n-04"]


def test_preferred_topology_falls_back_to_spanning_racks():
    r = replay("""
name: t
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodes:
  - {name: a1, gpus: 8, labels: {usher/rack: r1}}
  - {name: b1, gpus: 8, labels: {usher/rack: r2}}
queues: [{name: q}]
jobs:
  - {name: strict, queue: q, duration: 1h, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
  - {name: loose, queue: q, duration: 1h, pods: [{count: 2, gpu: 8, topology: {preferred: usher/rack}}]}
""", until=60)
    assert job(r, "strict")["pendingReason"] == "TopologyUnsatisfiable"
    assert sorted(nodes_of(job(r, "loose")["runs"][0])) == ["a1", "b1"]


def test_multi_gpu_pods_stay_inside_an_nvlink_island():
    r = replay("""
name: t
nodes: [{name: n1, gpus: 8, nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]}]
queues: [{name: q}]
jobs:
  - {name: two, queue: q, duration: 1h, pods: [{gpu: 2}]}
  - {name: four, queue: q, submit: 1s, duration: 1h, pods: [{gpu: 4}]}
  - {name: other-two, queue: q, submit: 2s, duration: 1h, pods: [{gpu: 2}]}
""")
    two = job(r, "two")["runs"][0]["placements"][0]["gpus"]
    four = job(r, "four")["runs"][0]["placements"][0]["gpus"]
    other = job(r, "other-two")["runs"][0]["placements"][0]["gpus"]
    islands = [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert any(set(four) <= isl for isl in islands)
    assert any(set(two) <= isl for isl in islands) and any(set(other) <= isl for isl in islands)
    # The 2-GPU pods share one island (the tightest fit) so the 4-GPU pod got a whole island.
    assert len(set(two) | set(other) | set(four)) == 8


def test_shared_gpus_fill_up_before_a_new_gpu_is_touched():
    r = replay("""
name: t
nodes: [{name: n1, gpus: 2}]
queues: [{name: q}]
jobs:
  - {name: s1, queue: q, duration: 1h, pods: [{gpu: 0.5}]}
  - {name: s2, queue: q, submit: 1s, duration: 1h, pods: [{gpu: 0.3}]}
  - {name: s3, queue: q, submit: 2s, duration: 1h, pods: [{gpu: 0.3}]}
  - {name: whole, queue: q, submit: 3s, duration: 1h, pods: [{gpu: 1}]}
""")
    p = {j["name"]: j["runs"][0]["placements"][0] for j in r["jobs"]}
    assert p["s1"]["gpus"] == p["s2"]["gpus"]
    assert p["s1"]["gpuShare"] == 0.5 and p["s2"]["gpuShare"] == 0.3
    # 0.5 + 0.3 + 0.3 > 1, so s3 needs the other GPU, and then no whole GPU is left.
    assert p["s3"]["gpus"] != p["s1"]["gpus"]
    # The first GPU is whole again when s2 (started at 1s) ends.
    assert job(r, "whole")["runs"][0]["start"] == 3601.0


def test_gpu_model_constraint_and_no_matching_nodes():
    r = replay("""
name: t
nodes:
  - {name: h, gpus: 8, gpuModel: H100}
  - {name: a, gpus: 8, gpuModel: A100}
queues: [{name: q}]
jobs:
  - {name: wants-a100, queue: q, duration: 1h, pods: [{gpu: 1, gpuModel: [A100]}]}
  - {name: wants-b200, queue: q, duration: 1h, pods: [{gpu: 1, gpuModel: B200}]}
""", until=60)
    assert nodes_of(job(r, "wants-a100")["runs"][0]) == ["a"]
    b = job(r, "wants-b200")
    assert b["pendingReason"] == "NoMatchingNodes"
    assert "B200" in b["message"] and "2 GPU model not accepted" in b["message"]


EVENTS_BASE = """
name: t
nodeGroups: [{prefix: n, count: 3, template: {gpus: 8}}]
queues: [{name: q}, {name: m, approval: manual}]
"""


def test_drain_requeues_the_whole_gang_and_keeps_the_node_cordoned():
    r = replay(EVENTS_BASE + """
jobs:
  - {name: gang, queue: q, duration: 2h, pods: [{count: 2, gpu: 8}]}
events:
  - {at: 30m, action: drain, node: n-01}
""")
    runs = job(r, "gang")["runs"]
    assert runs[0]["endReason"] == "Drained" and runs[0]["end"] == 1800.0
    assert len(runs[0]["placements"]) == 2
    # Restarted at once on the two other nodes, never again on the cordoned n-01.
    assert runs[1]["start"] == 1800.0 and "n-01" not in nodes_of(runs[1])


def test_node_failure_loses_work_since_checkpoint_and_recover_brings_it_back():
    r = replay("""
name: t
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - {name: j, queue: q, duration: 2h, checkpointEvery: 30m, pods: [{gpu: 8}]}
events:
  - {at: 50m, action: fail, node: n1}
  - {at: 1h, action: recover, node: n1}
""")
    runs = job(r, "j")["runs"]
    assert runs[0]["endReason"] == "NodeFailed" and runs[0]["end"] == 3000.0
    assert runs[1]["start"] == 3600.0
    # 30 of 50 minutes were checkpointed: 1h30m left.
    assert runs[1]["end"] == 3600.0 + 5400.0
    # The failed node was unavailable for 10 minutes: utilization counts only available GPUs.
    assert r["summary"]["gpuUtilization"] == 1.0


def test_cordon_keeps_new_pods_off_and_uncordon_lets_them_back():
    r = replay("""
name: t
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - {name: j, queue: q, submit: 10m, duration: 1h, pods: [{gpu: 8}]}
events:
  - {at: 0s, action: cordon, node: n1}
  - {at: 1h, action: uncordon, node: n1}
""")
    assert job(r, "j")["runs"][0]["start"] == 3600.0


OPERATOR = EVENTS_BASE + """
jobs:
  - {name: needs-ok, queue: m, duration: 1h, pods: [{gpu: 1}]}
  - {name: held, queue: q, duration: 1h, pods: [{gpu: 1}]}
  - {name: victim, queue: q, duration: 2h, pods: [{gpu: 1}]}
events:
  - {at: 0s, action: hold, job: held}
  - {at: 20m, action: approve, job: needs-ok}
  - {at: 30m, action: release, job: held}
  - {at: 40m, action: preempt, job: victim}
"""


def test_manual_approval_hold_release_and_operator_preemption():
    early = replay(OPERATOR, until=600)
    assert job(early, "needs-ok")["state"] == "AwaitingApproval"
    assert job(early, "needs-ok")["pendingReason"] == "AwaitingApproval"
    assert job(early, "held")["state"] == "Held" and job(early, "held")["pendingReason"] == "Held"
    full = replay(OPERATOR)
    assert job(full, "needs-ok")["runs"][0]["start"] == 1200.0
    assert job(full, "held")["runs"][0]["start"] == 1800.0
    v = job(full, "victim")["runs"]
    assert v[0]["endReason"] == "OperatorPreempted" and v[0]["end"] == 2400.0
    assert v[1]["start"] == 2400.0


UNLABELLED = """
name: t
topology: {levels: [usher/rack, kubernetes.io/hostname]}
nodes:
  - {name: bare-1, gpus: 8}
  - {name: bare-2, gpus: 8}
  - {name: racked, gpus: 8, labels: {usher/rack: a}}
queues: [{name: q}]
jobs:
  - {name: needs-rack, queue: q, duration: 1h, pods: [{count: 2, gpu: 8, topology: {required: usher/rack}}]}
  - {name: likes-rack, queue: q, submit: 1m, duration: 1h, pods: [{count: 2, gpu: 8, topology: {preferred: usher/rack}}]}
"""


def test_nodes_without_the_levels_label_are_in_no_domain_of_it():
    """Two nodes with no usher/rack label are not a rack: a gang that requires one rack waits
    (only one labelled rack exists, too small), while one that only prefers a rack runs on them."""
    r = replay(UNLABELLED, until=1800)
    needs = job(r, "needs-rack")
    assert needs["runs"] == [] and needs["pendingReason"] == "TopologyUnsatisfiable"
    assert "roomiest usher/rack has 8 GPUs free" in needs["message"]
    assert sorted(nodes_of(job(r, "likes-rack")["runs"][0])) == ["bare-1", "bare-2"]
