"""Bounded YAML: alias bombs, deep nesting, oversized documents and huge counts are refused.

Each refusal is a problem naming the place (file, line, YAML path), the limit and the value,
for scenarios, the queue ConfigMap, keymaps, themes and the sandbox's YAML request bodies.
A document that would hang or exhaust memory without the bounds is refused at once with them;
the timeout marks only guard the suite should that ever regress (no duration is asserted).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from usher.engine.scenario import ScenarioError, parse_queue_config, parse_queue_config_async, parse_scenario
from usher.engine.scenario.limits import (
    CONFIG_LIMITS,
    MAX_DEPTH,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_PODS,
    MAX_PODS_PER_JOB,
    MAX_QUEUES,
    SCENARIO_LIMITS,
    YamlLimits,
)
from usher.engine.scenario.loader import load_scenario
from usher.engine.scenario.yamltree import YamlLimitError, compose_bounded, load_bounded, read_yaml

REPO = Path(__file__).resolve().parents[2]

LOL = '["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
BOMB = f"a: &a {LOL}\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
"""The classic nine-level "billion laughs": 9**9 (387M) strings from ~400 bytes."""

DEEP = "[" * 5_000 + "]" * 5_000
"""10 kB of nested lists: 5,000 levels."""

GOOD = """\
name: limits
nodes: [{name: n1, gpus: 8}]
queues: [{name: q}]
jobs:
  - {name: a, queue: q, pods: [{count: 1, gpu: 8}]}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="t.yaml")
    return [str(p) for p in caught.value.problems]


def config_problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_queue_config(text, "usher-system/usher-queues[queues.yaml]")
    return [str(p) for p in caught.value.problems]


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_the_bomb_is_what_it_claims() -> None:
    assert len(BOMB.encode()) < 450
    assert BOMB.count("*") == 8 * 9


# --- alias bombs ----------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_billion_laughs_is_refused_naming_line_path_and_limit() -> None:
    # a..f expand to 672k values; the first *f in g passes 1M
    assert problems(BOMB) == [
        "t.yaml:7: g[0]: aliases expand past 1,000,000 values (an alias bomb?); usher refuses documents this large"
    ]


@pytest.mark.timeout(30)
def test_a_bomb_through_merge_keys_is_refused() -> None:
    lines = ["l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}"]
    for i in range(1, 12):
        keys = ", ".join(f"k{j}: *l{i - 1}" for j in range(8))
        lines.append(f"l{i}: &l{i} {{<<: *l{i - 1}, {keys}}}")
    found = problems("\n".join(lines) + "\n")
    assert len(found) == 1 and "aliases expand past 1,000,000 values (an alias bomb?)" in found[0]


@pytest.mark.timeout(30)
def test_a_bomb_in_the_queue_config_is_refused_below_the_smaller_limit() -> None:
    found = config_problems(BOMB)
    assert found == [
        (
            "usher-system/usher-queues[queues.yaml]:6: f[0]: aliases expand past 100,000 values (an alias bomb?); "
            "usher refuses documents this large"
        )
    ]


@pytest.mark.timeout(30)
def test_the_async_queue_config_parse_refuses_a_bomb_and_parses_a_good_config() -> None:
    with pytest.raises(ScenarioError, match="alias bomb"):
        asyncio.run(parse_queue_config_async(BOMB, "cm"))
    config = asyncio.run(parse_queue_config_async("queues: [{name: a, quota: {gpu: 8}}]\n", "cm", "lab"))
    assert config.name == "lab" and [q.name for q in config.queues] == ["a"]


def test_a_few_aliases_still_work() -> None:
    text = GOOD + "  - &b {name: b, queue: q, pods: &pods [{count: 2, gpu: 4}]}\n  - {name: c, queue: q, pods: *pods}\n"
    scenario = parse_scenario(text, file="t.yaml")
    assert [j.pod_count for j in scenario.jobs] == [1, 2, 2]


def test_an_alias_inside_its_own_anchor_is_still_reported_by_the_reader() -> None:
    doc = read_yaml("x: &a {b: *a}\n")
    assert [(i.path, i.line, i.message) for i in doc.issues] == [
        (("x", "b"), 1, "an alias refers to the mapping or list that contains it")
    ]


def test_undefined_aliases_and_duplicate_anchors_are_syntax_errors_with_their_lines() -> None:
    assert problems("name: x\nqueues: *nope\n") == ["t.yaml:2: YAML syntax error: found undefined alias 'nope'"]
    found = problems("name: &x a\nqueues: &x []\n")
    assert len(found) == 1 and found[0].startswith("t.yaml:2: YAML syntax error: second occurrence")


# --- nesting ---------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_ten_kilobytes_of_nested_lists_is_refused_not_a_recursion_error() -> None:
    assert problems(DEEP) == [
        "t.yaml:1: [0][0]: lists and mappings nest more than 64 levels deep; usher refuses documents nested this deep"
    ]


def test_deep_block_mappings_name_the_line_where_the_limit_is_passed() -> None:
    text = "name: x\njunk:\n" + "".join("  " * (i + 1) + "a:\n" for i in range(100))
    found = problems(text)
    # junk is level 1; the mapping that opens on line 66 is level 65
    assert found == [
        "t.yaml:66: junk.a: lists and mappings nest more than 64 levels deep; usher refuses documents nested this deep"
    ]


def test_exactly_the_depth_limit_is_allowed() -> None:
    assert MAX_DEPTH == 64
    node = compose_bounded(nested(64), SCENARIO_LIMITS)
    assert node is not None
    with pytest.raises(YamlLimitError, match="more than 64 levels deep"):
        compose_bounded(nested(65), SCENARIO_LIMITS)


def test_aliases_cannot_nest_past_the_limit_either() -> None:
    # each anchor is 30 levels of lists around the previous one: 30, 60, 90 levels once expanded
    text = "a0: &a0 " + nested(30) + "\n"
    text += "a1: &a1 " + "[" * 29 + "[*a0]" + "]" * 29 + "\n"
    assert compose_bounded(text, SCENARIO_LIMITS) is not None
    text += "a2: &a2 " + "[" * 29 + "[*a1]" + "]" * 29 + "\n"
    with pytest.raises(YamlLimitError) as caught:
        compose_bounded(text, SCENARIO_LIMITS)
    assert caught.value.line == 3
    assert caught.value.message == (
        "the alias *a1 nests lists and mappings more than 64 levels deep; usher refuses documents nested this deep"
    )


def test_deep_nesting_in_the_queue_config_is_refused() -> None:
    assert config_problems("queues: " + DEEP) == [
        (
            "usher-system/usher-queues[queues.yaml]:1: queues[0]: lists and mappings nest more than 64 levels deep; "
            "usher refuses documents nested this deep"
        )
    ]


# --- size and the number of values -------------------------------------------------------------


def test_an_oversized_scenario_text_is_refused_before_parsing() -> None:
    text = "name: x\n#" + "x" * SCENARIO_LIMITS.max_bytes + "\n"
    found = problems(text)
    assert len(found) == 1
    assert found[0].startswith("t.yaml: the document is over 32 MiB (33,554,442 bytes)")
    assert found[0].endswith("usher refuses documents this large")


def test_an_oversized_scenario_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as handle:
        handle.write("name: x\n")
        handle.write(("#" + "x" * 1023 + "\n") * (SCENARIO_LIMITS.max_bytes // 1024 + 1))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: the file is over 32 MiB; usher refuses documents this large"
    ]


def test_multibyte_text_is_measured_in_bytes() -> None:
    limits = YamlLimits(max_bytes=10, max_depth=64, max_values=100, max_alias_values=100)
    assert compose_bounded("a: ééé", limits) is not None  # 9 bytes
    with pytest.raises(YamlLimitError, match=r"over 10 bytes \(11 bytes\)"):
        compose_bounded("a: éééé", limits)


def test_an_oversized_queue_config_is_refused() -> None:
    text = "queues: []\n#" + "x" * CONFIG_LIMITS.max_bytes + "\n"
    found = config_problems(text)
    assert len(found) == 1 and "the document is over 1 MiB" in found[0]


def test_too_many_values_are_refused_where_the_limit_is_passed() -> None:
    limits = YamlLimits(max_bytes=1000, max_depth=64, max_values=10, max_alias_values=10)
    assert compose_bounded("[1, 2, 3, 4, 5, 6, 7, 8, 9]", limits) is not None  # the list and 9 items
    with pytest.raises(YamlLimitError) as caught:
        compose_bounded("a: 1\nb: [1, 2, 3, 4,\n  5, 6, 7]\n", limits)
    assert (caught.value.line, caught.value.path) == (3, ("b", 5))
    assert caught.value.message == "the document holds more than 10 values; usher refuses documents this large"


def test_a_queue_config_of_too_many_values_is_refused() -> None:
    text = "queues: []\njunk: [" + ",".join(["0"] * 250_000) + "]\n"  # 500 kB, under 1 MiB
    found = config_problems(text)
    # the mapping, queues, [], junk and the list are 5 values: item 199,995 is the 200,001st
    assert found == [
        (
            "usher-system/usher-queues[queues.yaml]:2: junk[199995]: the document holds more than 200,000 values; "
            "usher refuses documents this large"
        )
    ]


def test_load_bounded_is_safe_load_within_limits() -> None:
    text = "a: &x [1, 2.5, true, null, '3', 2001-12-14]\nb: *x\n<<: {c: d}\n"
    assert load_bounded(text, CONFIG_LIMITS) == yaml.safe_load(text)
    assert load_bounded("", CONFIG_LIMITS) is None
    with pytest.raises(YamlLimitError, match="contains it"):
        load_bounded("a: &a [*a]", CONFIG_LIMITS)
    with pytest.raises(yaml.YAMLError):
        load_bounded("a: [1", CONFIG_LIMITS)


# --- counts inside a scenario ------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_pod_count_of_1e12_is_refused_with_the_allowed_range() -> None:
    text = GOOD.replace("{count: 1, gpu: 8}", "{count: 1e12, gpu: 8}")
    assert problems(text) == [
        "t.yaml:5: jobs[0].pods[0].count: must be at most 100,000 (got 1e12); usher refuses larger values"
    ]
    text = GOOD.replace("{count: 1, gpu: 8}", "{count: 1000000000000, gpu: 8}")
    assert problems(text) == [
        "t.yaml:5: jobs[0].pods[0].count: must be at most 100,000 (got 1,000,000,000,000); usher refuses larger values"
    ]


def test_the_largest_pod_count_is_allowed() -> None:
    text = GOOD.replace("{count: 1, gpu: 8}", f"{{count: {MAX_PODS_PER_JOB}, gpu: 0}}")
    scenario = parse_scenario(text, file="t.yaml")
    assert scenario.jobs[0].pod_count == MAX_PODS_PER_JOB


def test_node_group_gpu_and_min_count_bounds() -> None:
    text = (
        "name: x\n"
        "nodes: [{name: n1, gpus: 100000}]\n"
        "nodeGroups: [{prefix: g, count: 1.0e+9}]\n"
        "queues: [{name: q}]\n"
        "jobs: [{name: j, queue: q, minCount: 1e6, pods: [{gpu: 1e6}]}]\n"
    )
    assert problems(text) == [
        "t.yaml:2: nodes[0].gpus: must be at most 256 (got 100,000); usher refuses larger values",
        "t.yaml:3: nodeGroups[0].count: must be at most 100,000 (got 1,000,000,000); usher refuses larger values",
        "t.yaml:5: jobs[0].minCount: must be at most 100,000 (got 1e6); usher refuses larger values",
        "t.yaml:5: jobs[0].pods[0].gpu: must be at most 256 (got 1e6); usher refuses larger values",
    ]


def test_totals_are_refused_before_nodes_and_pods_are_generated() -> None:
    half = MAX_NODES // 2 + 1
    text = (
        "name: x\n"
        f"nodeGroups:\n  - {{prefix: a, count: {half}, template: {{gpus: 8}}}}\n  - {{prefix: b, count: {half}}}\n"
        "queues: [{name: q}]\n"
        "jobs:\n" + "".join(f"  - {{name: j{i}, queue: q, pods: [{{count: {MAX_PODS_PER_JOB}}}]}}\n" for i in range(21))
    )
    assert problems(text) == [
        "t.yaml:2: nodeGroups: 100,002 nodes in all; usher refuses scenarios with more than 100,000",
        f"t.yaml:6: jobs: {21 * MAX_PODS_PER_JOB:,} pods in all; usher refuses scenarios with more than {MAX_PODS:,}",
    ]


def test_pods_of_one_job_are_bounded_across_its_groups() -> None:
    text = GOOD.replace("[{count: 1, gpu: 8}]", "[{name: a, count: 60000}, {name: b, count: 60000}]")
    assert problems(text) == ["t.yaml:5: jobs[0]: 120,000 pods in one job; usher refuses jobs with more than 100,000"]


def test_too_many_queues_in_the_queue_config() -> None:
    text = "queues:\n" + "".join(f"  - {{name: q{i}}}\n" for i in range(MAX_QUEUES + 1))
    assert config_problems(text) == [
        "usher-system/usher-queues[queues.yaml]:1: queues: 10,001 queues; usher refuses more than 10,000"
    ]


def test_a_trace_node_with_too_many_gpus_is_a_row_problem(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,8,V100\nn2,1000,1024,5000,V100\n"
    )
    text = "name: x\ntraces: [{format: openb, nodes: nodes.csv}]\n"
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, file="t.yaml", base_dir=tmp_path)
    assert [str(p) for p in caught.value.problems] == [
        f"{tmp_path / 'nodes.csv'}:3: gpu: must be at most {MAX_GPUS_PER_NODE} (got 5,000); usher refuses larger values"
    ]


def test_an_integer_too_long_for_python_is_a_problem_not_a_crash() -> None:
    text = GOOD.replace("{count: 1, gpu: 8}", "{count: " + "1" * 5000 + "}")
    assert problems(text) == [
        "t.yaml:5: jobs[0].pods[0].count: cannot read this value: a whole number of more than 4,300 digits"
    ]


# --- valid files read exactly as before ------------------------------------------------------------


def _walk(node: yaml.Node | None) -> list[tuple[object, ...]]:
    """Every node's class, tag, scalar value, style and marks, in document order."""
    out: list[tuple[object, ...]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n is None:
            out.append((None,))
            continue
        marks = (n.start_mark.line, n.start_mark.column, n.end_mark.line, n.end_mark.column)
        if isinstance(n, yaml.ScalarNode):
            out.append((type(n).__name__, n.tag, n.value, n.style, *marks))
        else:
            out.append((type(n).__name__, n.tag, n.flow_style, *marks))
            children = [c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) else list(n.value)
            stack.extend(reversed(children))
    return out


SHIPPED = sorted(
    [
        *REPO.glob("fixtures/*.yaml"),
        *REPO.glob("fixtures/examples/*.yaml"),
        *REPO.glob("themes/*.yaml"),
        REPO / "deploy" / "30-configmap-queues.yaml",
    ]
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_files_compose_exactly_as_pyyaml_composes_them(path: Path) -> None:
    text = path.read_text()
    expected = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert _walk(compose_bounded(text, SCENARIO_LIMITS)) == _walk(expected)


def test_the_configmaps_queue_config_still_parses() -> None:
    manifest = yaml.safe_load((REPO / "deploy" / "30-configmap-queues.yaml").read_text())
    config = parse_queue_config(manifest["data"]["queues.yaml"], "deploy")
    assert config.queues


# --- keymaps, themes, sandbox request bodies -----------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BOMB, ":6: f[0]: aliases expand past 100,000 values (an alias bomb?)"),
        ("app.quit: " + DEEP, ':1: ["app.quit"][0]: lists and mappings nest more than 64 levels deep'),
        ("app.quit: q\n#" + "x" * CONFIG_LIMITS.max_bytes, ": the file is over 1 MiB"),
    ],
    ids=["bomb", "deep", "oversized"],
)
def test_keymap_files_are_bounded(tmp_path: Path, text: str, expected: str) -> None:
    from usher.console.keys import load_keymap

    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        load_keymap(path)
    assert str(caught.value).startswith(f"{path}{expected}")


@pytest.mark.timeout(30)
def test_a_keymap_that_never_ends_is_refused() -> None:
    from usher.console.keys import load_keymap

    zero = Path("/dev/zero")
    if not zero.exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(ValueError, match="over 1 MiB"):
        load_keymap(zero)


def test_a_good_keymap_still_loads(tmp_path: Path) -> None:
    from usher.console.keys import load_keymap

    path = tmp_path / "keys.yaml"
    path.write_text("# mine\nnodes.drain: D\nview.jobs: j, 2\n")
    assert load_keymap(path) == {"nodes.drain": "D", "view.jobs": "j,2"}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BOMB, "my.yaml:6: f[0]: aliases expand past 100,000 values (an alias bomb?)"),
        ("name: x\ncolors: " + DEEP, "my.yaml:2: colors[0]: lists and mappings nest more than 64 levels deep"),
        ("name: x\n#" + "x" * CONFIG_LIMITS.max_bytes, "my.yaml: the document is over 1 MiB"),
    ],
    ids=["bomb", "deep", "oversized"],
)
def test_theme_files_are_bounded(text: str, expected: str) -> None:
    from usher.console.themes import load_theme_text

    with pytest.raises(ValueError) as caught:
        load_theme_text(text, "my.yaml")
    assert str(caught.value).startswith(expected)


@pytest.mark.timeout(30)
def test_the_shipped_themes_load_and_a_hostile_user_theme_is_one_error(tmp_path: Path) -> None:
    from usher.console.themes import load_themes

    (tmp_path / "bomb.yaml").write_text(BOMB)
    (tmp_path / "big.yaml").write_text("name: big\n#" + "x" * CONFIG_LIMITS.max_bytes)
    themes, errors = load_themes([tmp_path])
    assert {"dark", "light", "colorblind"} <= set(themes)
    assert errors == [
        f"{tmp_path / 'big.yaml'}: the file is over 1 MiB; usher refuses documents this large",
        (
            f"{tmp_path / 'bomb.yaml'}:6: f[0]: aliases expand past 100,000 values (an alias bomb?); "
            "usher refuses documents this large"
        ),
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (BOMB.encode(), "the request body is refused (line 6): aliases expand past 100,000 values"),
        (DEEP.encode(), "the request body is refused (line 1): lists and mappings nest more than 64 levels deep"),
        (b"a: &a [*a]\n", "the request body is refused (line 1): an alias refers to the mapping or list"),
    ],
    ids=["bomb", "deep", "cycle"],
)
def test_sandbox_yaml_request_bodies_are_bounded(body: bytes, expected: str) -> None:
    from usher.sandbox.protobuf import decode_body
    from usher.sandbox.store import ApiError

    with pytest.raises(ApiError) as caught:
        decode_body("application/yaml", body)
    assert caught.value.code == 400
    assert expected in str(caught.value)


def test_a_good_sandbox_yaml_body_decodes_as_before() -> None:
    from usher.sandbox.protobuf import decode_body

    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {a: 'b'}}\ndata: {k: v}\n"
    assert decode_body("application/yaml", body) == yaml.safe_load(body)
    assert decode_body("application/yaml", b"") is None


@pytest.mark.timeout(30)
def test_the_pure_python_parser_is_bounded_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libyaml PyYAML parses in Python; the bounds and the nodes are the same."""
    from usher.engine.scenario import yamltree

    monkeypatch.setattr(yamltree, "_Loader", yaml.SafeLoader)
    for path in SHIPPED:
        text = path.read_text()
        assert _walk(compose_bounded(text, SCENARIO_LIMITS)) == _walk(yaml.compose(text, Loader=yaml.SafeLoader))
    assert problems(BOMB) == [
        "t.yaml:7: g[0]: aliases expand past 1,000,000 values (an alias bomb?); usher refuses documents this large"
    ]
    assert problems(DEEP) == [
        "t.yaml:1: [0][0]: lists and mappings nest more than 64 levels deep; usher refuses documents nested this deep"
    ]
