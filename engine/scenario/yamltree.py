"""YAML to plain Python data, remembering the line of every path and refusing duplicate keys.

PyYAML's composer gives nodes with marks; we build the data from them ourselves so that each
mapping key and sequence item gets its 1-based line under its path, e.g.
`("jobs", 0, "pods", 0, "gpu") -> 14`. Merge keys (`<<`) and aliases work as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import PathSegment

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"

YamlPath = tuple[PathSegment, ...]


@dataclass
class YamlIssue:
    """A problem found while reading YAML: syntax, duplicate keys, odd keys or tags."""

    path: YamlPath
    line: int | None
    message: str


@dataclass
class YamlDocument:
    """The data of one YAML document with the line of each path in it."""

    data: Any
    lines: dict[YamlPath, int] = field(default_factory=dict)
    issues: list[YamlIssue] = field(default_factory=list)

    def line_of(self, path: Sequence[PathSegment]) -> int | None:
        """The line of `path`, or of its nearest ancestor present in the file."""
        key = tuple(path)
        while key:
            line = self.lines.get(key)
            if line is not None:
                return line
            key = key[:-1]
        return self.lines.get(())


def read_yaml(text: str) -> YamlDocument:
    """Parse one YAML document; syntax errors become a single issue with its line."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        return YamlDocument(None, issues=[_syntax_issue(exc)])
    except yaml.YAMLError as exc:
        return YamlDocument(None, issues=[YamlIssue((), None, f"YAML syntax error: {exc}")])
    doc = YamlDocument(None)
    if root is None:
        return doc
    doc.lines[()] = root.start_mark.line + 1
    doc.data = _Builder(doc).build(root, ())
    return doc


def _syntax_issue(exc: yaml.MarkedYAMLError) -> YamlIssue:
    """`did not find expected key (while parsing a block mapping that starts on line 2)`."""
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    message = f"YAML syntax error: {exc.problem or exc.context or 'cannot parse'}"
    if exc.problem == "but found another document":
        message = "a scenario file holds one YAML document; this starts another"
    elif exc.problem and exc.context:
        started = exc.context_mark.line + 1 if exc.context_mark is not None else None
        where = f" that starts on line {started}" if started is not None and started != line else ""
        message += f" ({exc.context}{where})"
    return YamlIssue((), line, message)


class _Builder:
    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.scalars = SafeConstructor()
        self.active: set[int] = set()

    def build(self, node: Node, path: YamlPath) -> Any:
        if id(node) in self.active:
            self._issue(path, node, "an alias refers to the mapping or list that contains it")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return self._sequence(node, path)
            return self._scalar(node, path)
        finally:
            self.active.discard(id(node))

    def _scalar(self, node: Node, path: YamlPath) -> Any:
        try:
            return self.scalars.construct_object(node)
        except ConstructorError as exc:
            self._issue(path, node, f"cannot read this value: {exc.problem}")
            return None

    def _sequence(self, node: SequenceNode, path: YamlPath) -> list[Any]:
        items = []
        for index, item in enumerate(node.value):
            self.doc.lines[(*path, index)] = item.start_mark.line + 1
            items.append(self.build(item, (*path, index)))
        return items

    def _mapping(self, node: MappingNode, path: YamlPath) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merges = [value for key, value in node.value if key.tag == _MERGE_TAG]
        for source in merges:
            self._merge(result, source, path)
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, ScalarNode):
                self._issue(path, key_node, "mapping keys must be plain values")
                continue
            key = self._scalar(key_node, path)
            try:
                hash(key)
            except TypeError:
                self._issue(path, key_node, "mapping keys must be plain values")
                continue
            line = key_node.start_mark.line + 1
            if key in first_line:
                self._issue((*path, key), key_node, f"duplicate key {key!r} (first given on line {first_line[key]})")
            first_line[key] = line
            self.doc.lines[(*path, key)] = line
            result[key] = self.build(value_node, (*path, key))
        return result

    def _merge(self, result: dict[Any, Any], source: Node, path: YamlPath) -> None:
        sources = source.value if isinstance(source, SequenceNode) else [source]
        for item in sources:
            if not isinstance(item, MappingNode):
                self._issue(path, item, "a merge key (<<) needs a mapping or a list of mappings")
                continue
            merged = self.build(item, path)
            for key, value in merged.items():
                result.setdefault(key, value)

    def _issue(self, path: YamlPath, node: Node, message: str) -> None:
        self.doc.issues.append(YamlIssue(path, node.start_mark.line + 1, message))
