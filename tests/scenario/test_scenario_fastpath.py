"""The loader's fast path (issue 14) gives what the line-tracking path gives, within the same bounds.

`parse_scenario` first reads plain data without lines (`yamltree.read_plain`) and falls back to
the line-tracking read (`read_yaml`) for anything that needs a report. Here both paths load the
same texts: good ones to the same `Scenario`, bad ones to the same problems (file, path, line,
message); `read_plain` refuses every document `compose_bounded` refuses, at once.
"""

from __future__ import annotations

import gc
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from usher.engine.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from usher.engine.scenario import loader as scenario_loader
from usher.engine.scenario import yamltree
from usher.engine.scenario.limits import CONFIG_LIMITS, MAX_DEPTH, SCENARIO_LIMITS, YamlLimits
from usher.engine.scenario.models import validate_scenario
from usher.engine.scenario.yamltree import NeedsLines, read_plain, read_yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_workloads", REPO / "bench" / "workloads.py")
assert _spec is not None and _spec.loader is not None
workloads = importlib.util.module_from_spec(_spec)  # bench/ is not a package
_spec.loader.exec_module(workloads)

pytestmark = pytest.mark.skipif(not yamltree.FAST_READER, reason="PyYAML without libyaml: no fast path")

HEAD = """\
name: t
topology: {levels: [usher/rack]}
priorityClasses: {low: 10}
nodes:
  - {name: n1, gpus: 8, cpu: 64, memory: 512Gi, gpuModel: H100, labels: {usher/rack: r1}}
  - {name: n2, gpus: 4, cpu: 32, memory: 1Ti, gpuModel: A100, labels: {usher/rack: r1}}
queues:
  - {name: q}
  - {name: r, quota: {gpu: 4}}
"""

LOL = '["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
BOMB = f"a: &a {LOL}\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def _load(text: str, fast: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Scenario | list[str]:
    """The scenario, or its problems as text, on one path."""
    monkeypatch.setattr(scenario_loader, "FAST_PATH", fast)
    try:
        return parse_scenario(text, **kwargs)
    except ScenarioError as exc:
        return [str(p) for p in exc.problems]


def _facts(scenario: Scenario) -> dict[str, Any]:
    """Everything a loaded scenario shows: dumps (set fields too), generated nodes, jobs, warnings."""
    return {
        "dump": scenario.model_dump(),
        "set": scenario.model_dump(exclude_unset=True, by_alias=True),
        "nodes": [n.model_dump() for n in scenario.all_nodes()],
        "jobs": [j.model_dump(exclude_unset=True) for j in scenario.all_jobs()],
        "warnings": [str(w) for w in scenario.warnings],
        "repr": repr(scenario.model_dump()),
    }


def both(text: str, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    """What both paths give for `text`, asserting they give the same."""
    fast = _load(text, True, monkeypatch, **kwargs)
    slow = _load(text, False, monkeypatch, **kwargs)
    if isinstance(fast, Scenario) and isinstance(slow, Scenario):
        assert _facts(fast) == _facts(slow)
        return fast
    assert fast == slow
    return fast


# --- good input: the same scenario ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(workloads.b1_placement(nodes=40, jobs=300), id="b1"),
        pytest.param(workloads.b2_busy(nodes=64, jobs=3000, days=1), id="b2"),
        pytest.param(workloads.b3_scale(nodes=80, jobs=5000), id="b3"),
        pytest.param((REPO / "fixtures" / "demo.yaml").read_text(), id="demo"),
        pytest.param((REPO / "fixtures" / "examples" / "spec-example.yaml").read_text(), id="spec-example"),
    ],
)
def test_good_scenarios_load_the_same_on_both_paths(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = scenario_loader.read_yaml
    monkeypatch.setattr(scenario_loader, "read_yaml", lambda text, limits: reads.append(text) or real(text, limits))
    monkeypatch.setattr(scenario_loader, "FAST_PATH", True)
    fast = parse_scenario(text)
    assert len(reads) == (1 if fast.warnings else 0)  # lines read only for a warning
    scenario = both(text, monkeypatch)
    assert isinstance(scenario, Scenario)


@pytest.mark.parametrize(
    "jobs",
    [
        # anchors, aliases and merge keys, as hand-written scenarios use them
        (
            "jobs:\n  - &base {name: j1, queue: q, submit: 1h, pods: &p [{gpu: 1, gpuModel: H100}]}\n"
            "  - {<<: *base, name: j2}\n  - {name: j3, queue: q, pods: *p}\n"
            "  - {<<: [*base, {priority: low}], name: j4, priority: 5}\n"
        ),
        # a mapping with merges that is itself anchored and aliased
        "defaults: &d {queue: q}\njobs:\n  - &j {<<: *d, name: a, pods: [{gpu: 1}]}\n",
        # explicit tags the fast path builds, quoted and odd scalars
        "jobs:\n  - {name: !!str 123, queue: 'q', priority: !!int '7', duration: 1_000, pods: [{gpu: 0.5, cpu: '2'}]}\n",
        # several pod groups named by the job, equal groups in different jobs
        "jobs:\n"
        + "".join(f"  - {{name: g{i}, queue: q, pods: [{{gpu: 1}}, {{gpu: 1, count: 2}}]}}\n" for i in range(5)),
        # -0.0 and 0.0 GPUs, 1 and 1.0: equal to ==, not the same value
        (
            "jobs:\n  - {name: z1, queue: q, pods: [{gpu: -0.0, cpu: 1}]}\n  - {name: z2, queue: q, pods: [{gpu: 0.0, cpu: 1}]}\n"
            "  - {name: o1, queue: q, pods: [{gpu: 1}]}\n  - {name: o2, queue: q, pods: [{gpu: 1.0}]}\n"
        ),
        # a construct the fast path leaves to the line-tracking read (bytes, accepted as a str)
        "jobs: [{name: !!binary aGVsbG8=, queue: q, pods: [{gpu: 1}]}]\n",
        # keys given by their Python names, comments, block style
        "jobs:\n  # a comment\n  - name: b\n    queue: q\n    min_count: 1\n    pods:\n      - gpu: 2\n",
        # a warning (cross-check): the fast path reads the lines for it
        "jobs: [{name: w, queue: q, pods: [{gpu: 1, gpuModel: B200}]}]\nevents: [{at: 1, action: hold, job: nope}]\n",
    ],
)
def test_hand_written_constructs_load_the_same_on_both_paths(jobs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = both(HEAD + jobs, monkeypatch)
    if "defaults" in jobs:  # an unknown top-level field: the same problem on both paths
        assert isinstance(scenario, list) and "defaults" in scenario[0]
    else:
        assert isinstance(scenario, Scenario)


def test_equal_pod_groups_are_one_object_and_dump_as_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    text = workloads.b3_scale(nodes=80, jobs=5000)
    scenario = both(text, monkeypatch)
    assert isinstance(scenario, Scenario)
    groups = {id(pod) for job in scenario.jobs for pod in job.pods}
    assert len(groups) <= 6  # b3's six shapes
    z = both(HEAD + "jobs:\n  - {name: z1, queue: q, pods: [{gpu: -0.0}]}\n  - {name: z2, queue: q, pods: [{gpu: 0.0}]}\n", monkeypatch)
    assert isinstance(z, Scenario)
    assert z.jobs[0].pods[0] is not z.jobs[1].pods[0]
    assert [repr(j.pods[0].gpu) for j in z.jobs] == ["-0.0", "0.0"]


def test_validate_scenario_is_model_validate() -> None:
    data = yaml.safe_load(workloads.b3_scale(nodes=80, jobs=5000))
    expected = Scenario.model_validate(yaml.safe_load(workloads.b3_scale(nodes=80, jobs=5000)))
    got = validate_scenario(data)
    assert got.model_dump() == expected.model_dump()
    assert got.model_fields_set == expected.model_fields_set
    assert [j.model_fields_set for j in got.jobs] == [j.model_fields_set for j in expected.jobs]


def test_a_trace_import_loads_the_same_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nt1,32000,65536,4,V100M32\n")
    pod_header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    (tmp_path / "pods.csv").write_text(pod_header + "p1,4000,1024,1,250,,LS,Running,10,110,20\n")
    text = HEAD + "traces:\n  - {format: openb, nodes: nodes.csv, pods: pods.csv, queue: q}\n"
    assert isinstance(both(text, monkeypatch, file="s.yaml", base_dir=tmp_path), Scenario)
    (tmp_path / "pods.csv").write_text(pod_header + "p1,4000,1024,1,2500,,LS,Running,10,110,20\n")
    assert isinstance(both(text, monkeypatch, file="s.yaml", base_dir=tmp_path), list)


# --- bad input: the same problems -----------------------------------------------------------

BAD = {
    "syntax": HEAD + "jobs: [{name: a, queue: q\n",
    "tab": HEAD + "jobs:\n\t- {name: a}\n",
    "two documents": "name: a\n---\nname: b\n",
    "empty": "",
    "only a comment": "# nothing\n",
    "a list": "- a\n- b\n",
    "a scalar": "hello\n",
    "duplicate key": HEAD + "jobs: []\nqueues: []\n",
    "nested duplicate": HEAD + "jobs: [{name: a, queue: q, queue: r, pods: [{gpu: 1}]}]\n",
    "unknown tag": "name: !foo x\n",
    "timestamp": HEAD + "jobs: [{name: 2024-01-01, queue: q, pods: [{gpu: 1}]}]\n",
    "mapping key": HEAD + "jobs: [{? {a: 1} : b}]\n",
    "alias to a list as key": HEAD + "x: &l [1]\njobs: [{*l : 1}]\n",
    "cyclic alias": HEAD + "jobs: &j [{name: a, queue: q, pods: *j}]\n",
    "undefined alias": HEAD + "jobs: *nope\n",
    "duplicate anchor": HEAD + "a: &x 1\nb: &x 2\n",
    "merge of a scalar": HEAD + "jobs: [{<<: 1, name: a, queue: q, pods: [{gpu: 1}]}]\n",
    "merge of a list of scalars": HEAD + "jobs: [{<<: [1, 2], name: a, queue: q, pods: [{gpu: 1}]}]\n",
    "merge key as a value": HEAD + "jobs: [{name: <<, queue: q, pods: [{gpu: 1}]}]\n",
    "merge key in a list": HEAD + "jobs: [{name: a, queue: q, pods: [{gpu: 1, gpuModel: [<<]}]}]\n",
    "merge key alone": "<<\n",
    "merge key without a value": "? <<\n",
    "huge integer": HEAD + "jobs: [{name: a, queue: q, submit: " + "1" * 5000 + ", pods: [{gpu: 1}]}]\n",
    "schema": HEAD + "jobs:\n  - {name: a, queue: q, pods: [{gpu: 1.5, gpus: 2}]}\n  - {name: b, pods: []}\n",
    "schema in a large job list": HEAD
    + "jobs:\n"
    + "".join(f"  - {{name: j{i}, queue: q, pods: [{{gpu: 1}}]}}\n" for i in range(5000))
    + "  - {name: bad, queue: q, pods: [{gpu: 1.5}]}\n",
    "cross-checks": HEAD + "jobs:\n  - {name: a, queue: nope, pods: [{gpu: 16}]}\n  - {name: a, queue: q, priority: top, pods: [{gpu: 1}]}\n",
    "topology": HEAD + "jobs: [{name: a, queue: q, pods: [{gpu: 1, topology: {required: usher/blok}}]}]\n",
    "too many pods": HEAD + "jobs: [{name: a, queue: q, pods: [{count: 1e12, gpu: 1}]}]\n",
    "pod total": HEAD + "jobs:\n" + "".join(f"  - {{name: j{i}, queue: q, pods: [{{count: 100000}}]}}\n" for i in range(21)),
    "alias bomb": BOMB,
    "deep": "[" * 5_000 + "]" * 5_000,
    "deep block": "".join("  " * i + f"k{i}:\n" for i in range(70)),
    "alias too deep": "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", list(BAD.values()), ids=list(BAD))
def test_bad_input_gives_the_same_problems_on_both_paths(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    found = both(text, monkeypatch, file="t.yaml")
    assert isinstance(found, list) and found


def test_the_bounds_bad_input_names_the_place(monkeypatch: pytest.MonkeyPatch) -> None:
    assert both(BOMB, monkeypatch, file="t.yaml") == [
        "t.yaml:7: g[0]: aliases expand past 1,000,000 values (an alias bomb?); usher refuses documents this large"
    ]
    assert both("[" * 5_000 + "]" * 5_000, monkeypatch, file="t.yaml") == [
        "t.yaml:1: [0][0]: lists and mappings nest more than 64 levels deep; usher refuses documents nested this deep"
    ]


def test_a_good_file_is_read_once_a_bad_one_again_with_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = scenario_loader.read_yaml

    def counting(text: str, limits: YamlLimits = SCENARIO_LIMITS) -> Any:
        reads.append(text)
        return real(text, limits)

    monkeypatch.setattr(scenario_loader, "read_yaml", counting)
    good = HEAD + "jobs: [{name: a, queue: q, pods: [{gpu: 1}]}]\n"
    parse_scenario(good)
    assert reads == []  # the fast path: no line-tracking read
    warned = parse_scenario(good + "events: [{at: 1, action: hold, job: nope}]\n", file="t.yaml")
    assert len(reads) == 1  # lines read once, for the warning
    assert [(w.path, w.line) for w in warned.warnings] == [("events[0].job", 11)]
    with pytest.raises(ScenarioError):
        parse_scenario(good.replace("queue: q,", "queue: q, queue: r,"))
    assert len(reads) == 2
    monkeypatch.setattr(scenario_loader, "FAST_PATH", False)
    parse_scenario(good)
    assert len(reads) == 3


def test_load_scenario_takes_the_fast_path_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "jobs: [{name: a, queue: q, pods: [{gpu: 1}]}]\n")
    monkeypatch.setattr(scenario_loader, "read_yaml", None)  # would fail if called
    assert [j.name for j in load_scenario(path).jobs] == ["a"]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        parse_scenario(HEAD)
        with pytest.raises(ScenarioError):
            parse_scenario(HEAD + "jobs: [1]\n")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


# --- read_plain: the same data, the same bounds ---------------------------------------------

PLAIN = [
    "a: 1\nb: [1, 2.5, true, null, ~, 'x', \"y\", 0x1F, 1_000, .inf, -.nan, 1:30]\n",
    "a: &x {k: [1, 2]}\nb: *x\nc: [*x, *x]\n",
    "base: &b {x: 1, y: 2}\nm: {<<: *b, y: 3, z: 4}\nl: {<<: [*b, {w: 0}], x: 9}\n",
    "1: one\n2.5: two\nfalse: three\nnull: four\n",
    "k: &s scalar\nv: *s\n*s : key by alias\n",
    "? plain\n: complex-key syntax with a plain key\n",
    "s: !!str 12\ni: !!int '12'\nf: !!float '1'\nb: !!bool 'yes'\nn: !!null ''\n",
    "block: |\n  line one\n  line two\nfolded: >\n  a\n  b\n",
    "---\nexplicit: start\n...\n",
    "[1, [2, [3, [4]]]]\n",
    "just a scalar\n",
    "---\n",
]


@pytest.mark.parametrize("text", PLAIN)
def test_read_plain_builds_what_read_yaml_builds(text: str) -> None:
    doc = read_yaml(text)
    assert not doc.issues
    assert repr(read_plain(text)) == repr(doc.data)


def test_read_plain_copies_each_alias_as_read_yaml_does() -> None:
    data = read_plain("a: &x {k: [1]}\nb: *x\n")
    assert data == {"a": {"k": [1]}, "b": {"k": [1]}}
    assert data["a"] is not data["b"] and data["a"]["k"] is not data["b"]["k"]


@pytest.mark.parametrize("text", [t for t in BAD.values() if t], ids=[k for k, t in BAD.items() if t])
def test_read_plain_leaves_every_yaml_issue_to_read_yaml(text: str) -> None:
    doc = read_yaml(text)
    if doc.issues or doc.data is None or _rare(doc.data):  # a date or bytes: built by read_yaml only
        with pytest.raises(NeedsLines):
            read_plain(text)
    else:
        assert repr(read_plain(text)) == repr(doc.data)


def _rare(data: Any) -> bool:
    """Whether `data` holds a value other than str, int, float, bool and None in its lists and maps."""
    if isinstance(data, dict):
        return any(_rare(k) or _rare(v) for k, v in data.items())
    if isinstance(data, list):
        return any(_rare(item) for item in data)
    return not isinstance(data, str | int | float | bool | type(None))


@pytest.mark.timeout(30)
def test_read_plain_refuses_an_alias_bomb_at_once() -> None:
    with pytest.raises(NeedsLines):
        read_plain(BOMB, SCENARIO_LIMITS)
    with pytest.raises(NeedsLines):
        read_plain(BOMB, CONFIG_LIMITS)
    merge_bomb = ["l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}"]
    for i in range(1, 12):
        keys = ", ".join(f"k{j}: *l{i - 1}" for j in range(8))
        merge_bomb.append(f"l{i}: &l{i} {{<<: *l{i - 1}, {keys}}}")
    with pytest.raises(NeedsLines):
        read_plain("\n".join(merge_bomb) + "\n")


@pytest.mark.timeout(30)
def test_read_plain_refuses_deep_nesting_without_recursion() -> None:
    for text in ("[" * 100_000 + "]" * 100_000, "{a: " * 10_000 + "1" + "}" * 10_000):
        with pytest.raises(NeedsLines):
            read_plain(text)
    assert read_plain("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(NeedsLines):
        read_plain("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_read_plain_counts_values_and_aliases_as_compose_bounded_does() -> None:
    small = YamlLimits(max_bytes=10_000, max_depth=4, max_values=10, max_alias_values=4)
    # a mapping, 3 keys, 2 scalar values, a list and its 3 items: 10 values
    assert read_plain("a: 1\nb: 2\nc: [3, 4, 5]\n", small) == {"a": 1, "b": 2, "c": [3, 4, 5]}
    with pytest.raises(NeedsLines):
        read_plain("a: 1\nb: 2\nc: [3, 4, 5, 6]\n", small)
    aliases = YamlLimits(max_bytes=10_000, max_depth=8, max_values=100, max_alias_values=4)
    assert read_plain("a: &x [1]\nb: [*x, *x]\n", aliases) == {"a": [1], "b": [[1], [1]]}  # 2 + 2 aliased
    with pytest.raises(NeedsLines):
        read_plain("a: &x [1]\nb: [*x, *x, *x]\n", aliases)
    deep = YamlLimits(max_bytes=10_000, max_depth=3, max_values=100, max_alias_values=100)
    assert read_plain("a: &x [[1]]\n", deep) == {"a": [[1]]}
    with pytest.raises(NeedsLines):
        read_plain("a: &x [[1]]\nb: [*x]\n", deep)  # the alias brings two levels under two
    tiny = YamlLimits(max_bytes=6, max_depth=3, max_values=100, max_alias_values=100)
    assert read_plain("a: 1\n", tiny) == {"a": 1}
    with pytest.raises(NeedsLines):
        read_plain("a: 12\n\n", tiny)


@pytest.mark.parametrize(
    ("limits", "text"),
    [
        (YamlLimits(10_000, 3, 100, 100), "a: [[[1]]]\n"),
        (YamlLimits(10_000, 8, 9, 100), "a: [1, 2, 3, 4, 5, 6, 7]\n"),
        (YamlLimits(10_000, 8, 100, 3), "a: &x [1, 2]\nb: *x\nc: *x\n"),
        (YamlLimits(10, 8, 100, 100), "a: 12345678901\n"),
    ],
)
def test_read_plain_refuses_exactly_what_read_yaml_refuses(limits: YamlLimits, text: str) -> None:
    assert read_yaml(text, limits).issues  # over the limit: an issue with its line
    with pytest.raises(NeedsLines):
        read_plain(text, limits)


@pytest.mark.timeout(60)
def test_the_pure_python_parser_reads_plain_data_within_the_same_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamltree, "_Loader", yaml.SafeLoader)
    text = (REPO / "fixtures" / "demo.yaml").read_text()
    assert repr(read_plain(text)) == repr(read_yaml(text).data)
    for bad in (BOMB, "[" * 5_000 + "]" * 5_000):
        with pytest.raises(NeedsLines):
            read_plain(bad)
