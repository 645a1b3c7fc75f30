"""YAML to plain Python data, remembering the line of every path and refusing duplicate keys.

Every YAML document usher reads (scenarios, the queue ConfigMap, keymaps, themes, the sandbox's
request bodies) goes through `compose_bounded`: it composes PyYAML's node tree from the parser's
events without recursion, and refuses a document past its `YamlLimits` (size, nesting depth,
values once aliases are expanded) while composing, before any value is built, so an alias bomb
or `[[[[...` nesting is refused at once and in little memory (`YamlLimitError`).

We build the data from the nodes ourselves so that each mapping key and sequence item gets its
1-based line under its path, e.g. `("jobs", 0, "pods", 0, "gpu") -> 14`. Merge keys (`<<`) and
aliases work as usual.

`read_plain` is the scenario loader's fast path: the same data without lines, built straight
from the parser's events within the same bounds, with no node tree or line table kept (its
cost is measured in docs/benchmarks.md, "Loading"); it raises `NeedsLines` wherever `read_yaml`
would report, and the loader then asks `read_yaml` for the report.

Longer than the house's 600 lines: the two readers (with lines, and the fast path) are kept
side by side so that their bounds and their refusals stay the same.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import PathSegment, Problem, format_path
from .limits import MIB, SCENARIO_LIMITS, YamlLimits

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: what libyaml says past a nesting limit of its own (1,000 levels in the one newer PyYAML wheels bundle)
LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
_MERGE_TAG = "tag:yaml.org,2002:merge"

YamlPath = tuple[PathSegment, ...]


# --- bounded composition ------------------------------------------------------------------


class YamlLimitError(Exception):
    """A YAML document past one of its `YamlLimits`, with the line and path where it went past."""

    def __init__(self, message: str, line: int | None = None, path: YamlPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path

    def problem(self, file: str) -> Problem:
        """This error as a `Problem` of `file` (`demo.yaml:3: a.b: aliases expand past ...`)."""
        return Problem(file, format_path(self.path), self.line, self.message)

    def describe(self, file: str) -> str:
        return str(self.problem(file))


def _size(amount: int) -> str:
    return f"{amount / MIB:g} MiB" if amount >= MIB else f"{amount:,} bytes"


def check_size(text: str | bytes, limits: YamlLimits) -> None:
    """`YamlLimitError` when `text` is over `limits.max_bytes` (UTF-8 bytes for a str)."""
    most = limits.max_bytes
    if isinstance(text, bytes):
        size = len(text)
    elif len(text) * 4 <= most:
        return  # no character takes more than 4 bytes
    else:
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > most:
        raise YamlLimitError(f"the document is over {_size(most)} ({size:,} bytes); usher refuses documents this large")


def read_text_bounded(path: str | os.PathLike[str], limits: YamlLimits) -> str:
    """The UTF-8 text of the file at `path`, reading no more than `limits.max_bytes` + 1 bytes.

    `YamlLimitError` when the file is larger; `OSError`, `UnicodeDecodeError` as `read_text`.
    A pipe or a device (`/dev/zero`) is read only as far as the limit, never to its end.
    """
    most = limits.max_bytes
    with open(path, "rb") as handle:
        data = handle.read(most + 1)
    if len(data) > most:
        raise YamlLimitError(f"the file is over {_size(most)}; usher refuses documents this large")
    return data.decode("utf-8")


class _Frame:
    """A mapping or list being composed: its node, a pending key, and its expanded size."""

    __slots__ = ("anchor", "height", "is_list", "items", "key", "node", "values")

    def __init__(self, node: Node, anchor: str | None) -> None:
        self.node = node
        self.items: list[Any] = node.value
        self.is_list = type(node) is SequenceNode
        self.anchor = anchor
        self.key: Node | None = None
        self.values = 1
        """Values in this subtree so far, aliases expanded (itself included)."""
        self.height = 0
        """The deepest nesting of its children so far (a scalar child: 0)."""


class _BoundedComposer:
    """PyYAML's `Composer.get_single_node` without recursion and with `YamlLimits` checked.

    The nodes, tags, marks and errors are those of PyYAML's composer; in addition each anchor's
    expanded size and height are kept, so an alias is charged for everything it repeats.
    """

    def __init__(self, loader: Any, limits: YamlLimits, cyclic_aliases: bool) -> None:
        self.loader = loader
        self.limits = limits
        self.cyclic_aliases = cyclic_aliases
        self.aliased = 0
        self.tags: dict[tuple[bool, bool], dict[str, str]] = {}
        """Resolved tags of plain scalars by `implicit` and value (no path resolvers in SafeLoader)."""

    def single_node(self) -> Node | None:
        loader = self.loader
        loader.get_event()  # stream start
        document = None
        if not loader.check_event(StreamEndEvent):
            loader.get_event()  # document start
            document = self._compose()
            loader.get_event()  # document end
        if not loader.check_event(StreamEndEvent):
            event = loader.get_event()
            assert document is not None
            raise ComposerError(
                "expected a single document in the stream",
                document.start_mark,
                "but found another document",
                event.start_mark,
            )
        loader.get_event()
        return document

    def _error(self, message: str, event: Any, stack: list[_Frame], *, shown: int | None = None) -> YamlLimitError:
        path = _path(stack)
        return YamlLimitError(message, event.start_mark.line + 1, path if shown is None else path[:shown])

    def _too_many(self, event: Any, stack: list[_Frame]) -> YamlLimitError:
        return self._error(
            f"the document holds more than {self.limits.max_values:,} values"
            + (" once aliases are expanded" if self.aliased else "")
            + "; usher refuses documents this large",
            event,
            stack,
        )

    def _compose(self) -> Node:
        """The root node of the document just started: one flat loop, as a scenario has millions of events."""
        get = self.loader.get_event
        resolve = self.loader.resolve
        tags = self.tags
        limits = self.limits
        max_depth = limits.max_depth
        budget = limits.max_values  # values left before the limit
        anchors: dict[str, Node] = {}
        sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, height), once its node is complete
        stack: list[_Frame] = []
        while True:
            event = get()
            kind = type(event)
            if kind is ScalarEvent:
                anchor = event.anchor
                if anchor is not None:
                    self._new_anchor(anchor, anchors, event)
                tag = event.tag
                value = event.value
                if tag is None or tag == "!":
                    implicit = event.implicit
                    known = tags.get(implicit)
                    if known is None:
                        known = tags[implicit] = {}
                    tag = known.get(value)
                    if tag is None:
                        tag = resolve(ScalarNode, value, implicit)
                        if len(value) <= 64:
                            known[value] = tag
                node = ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
                budget -= 1
                if budget < 0:
                    raise self._too_many(event, stack)
                if anchor is not None:
                    anchors[anchor] = node
                    sizes[anchor] = (1, 0)
                values = 1
                height = 0
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                frame = stack.pop()
                node = frame.node
                node.end_mark = event.end_mark
                values = frame.values
                height = frame.height + 1
                if frame.anchor is not None:
                    sizes[frame.anchor] = (values, height)
            elif kind is AliasEvent:
                anchor = event.anchor
                if anchor not in anchors:
                    raise ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
                node = anchors[anchor]
                size = sizes.get(anchor)
                if size is None:  # an alias inside its own anchor: a cycle, never expanded
                    if not self.cyclic_aliases:
                        raise self._error("an alias refers to the mapping or list that contains it", event, stack)
                    values, height = 1, 0
                else:
                    values, height = size
                if len(stack) + height > max_depth:
                    raise self._error(
                        f"the alias *{anchor} nests lists and mappings more than {max_depth} levels deep; "
                        "usher refuses documents nested this deep",
                        event,
                        stack,
                        shown=2,
                    )
                self.aliased += values
                if self.aliased > limits.max_alias_values:
                    raise self._error(
                        f"aliases expand past {limits.max_alias_values:,} values (an alias bomb?); "
                        "usher refuses documents this large",
                        event,
                        stack,
                    )
                budget -= values
                if budget < 0:
                    raise self._too_many(event, stack)
            else:  # the start of a list or mapping
                anchor = event.anchor
                if anchor is not None:
                    self._new_anchor(anchor, anchors, event)
                if len(stack) >= max_depth:
                    raise self._error(
                        f"lists and mappings nest more than {max_depth} levels deep; "
                        "usher refuses documents nested this deep",
                        event,
                        stack,
                        shown=2,
                    )
                node_class = SequenceNode if kind is SequenceStartEvent else MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(node_class, None, event.implicit)
                node = node_class(tag, [], event.start_mark, None, event.flow_style)
                budget -= 1
                if budget < 0:
                    raise self._too_many(event, stack)
                if anchor is not None:
                    anchors[anchor] = node  # before its children, as PyYAML: an alias inside is a cycle
                stack.append(_Frame(node, anchor))
                continue
            if not stack:
                return node
            parent = stack[-1]
            parent.values += values
            if height > parent.height:  # noqa: PLR1730 - no call per event
                parent.height = height
            if parent.is_list:
                parent.items.append(node)
            elif parent.key is None:
                parent.key = node
            else:
                parent.items.append((parent.key, node))
                parent.key = None

    @staticmethod
    def _new_anchor(anchor: str, anchors: dict[str, Node], event: Any) -> None:
        if anchor in anchors:
            raise ComposerError(
                f"found duplicate anchor {anchor!r}; first occurrence",
                anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )


def _path(stack: list[_Frame]) -> YamlPath:
    """The YAML path of the value being composed under `stack` (mapping keys as written)."""
    path: list[PathSegment] = []
    for frame in stack:
        if frame.is_list:
            path.append(len(frame.node.value))
        elif isinstance(frame.key, ScalarNode):
            path.append(frame.key.value)
        else:
            break  # composing a key
    return tuple(path)


def compose_bounded(text: str | bytes, limits: YamlLimits, *, cyclic_aliases: bool = False) -> Node | None:
    """The node tree of the one YAML document in `text` (None when empty), within `limits`.

    Raises `YamlLimitError` past a limit, `yaml.YAMLError` for bad YAML (PyYAML's messages).
    An alias inside the mapping or list it names is refused unless `cyclic_aliases` (then the
    tree has a cycle, as PyYAML's composer makes it).
    """
    check_size(text, limits)
    loader = _Loader(text)
    try:
        return _BoundedComposer(loader, limits, cyclic_aliases).single_node()
    except yaml.MarkedYAMLError as exc:
        if exc.problem is None or LIBYAML_TOO_DEEP not in exc.problem:
            raise
        # libyaml's own nesting limit: its scanner looks ahead and stops before the composer
        # sees the nesting. PyYAML's Python parser has no such limit: it finds the place.
        slow = yaml.SafeLoader(text)
        try:
            return _BoundedComposer(slow, limits, cyclic_aliases).single_node()
        finally:
            slow.dispose()
    finally:
        loader.dispose()


def load_bounded(text: str | bytes, limits: YamlLimits) -> Any:
    """`yaml.safe_load` within `limits`: plain data, `YamlLimitError` or `yaml.YAMLError`."""
    node = compose_bounded(text, limits)
    if node is None:
        return None
    return SafeConstructor().construct_document(node)


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


def read_yaml(text: str, limits: YamlLimits = SCENARIO_LIMITS) -> YamlDocument:
    """Parse one YAML document; a syntax error or a limit passed becomes a single issue."""
    try:
        root = compose_bounded(text, limits, cyclic_aliases=True)
    except YamlLimitError as exc:
        return YamlDocument(None, issues=[YamlIssue(exc.path, exc.line, exc.message)])
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
        except ValueError as exc:  # Python refuses int("1" * 5000)
            digits = sys.get_int_max_str_digits()
            if node.tag == "tag:yaml.org,2002:int" and digits and len(str(node.value)) > digits:
                self._issue(path, node, f"cannot read this value: a whole number of more than {digits:,} digits")
            else:
                self._issue(path, node, f"cannot read this value: {exc}")
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


# --- the fast path: plain data straight from the parser's events, no lines -----------------

FAST_READER = bool(getattr(yaml, "__with_libyaml__", False))
"""Whether `read_plain` parses with libyaml (PyYAML's C parser). Without it the loaders take
the line-tracking path only."""

_STR_TAG = "tag:yaml.org,2002:str"
_PLAIN_SCALARS = {
    tag: SafeConstructor.yaml_constructors[tag]
    for tag in ("tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
}
"""Scalar tags the fast path builds itself (with SafeConstructor's own functions); any other
tag (timestamps, binary, `!foo`) sends the document to the line-tracking path."""
_MERGE = object()
"""Stands for a `<<` key while its mapping is being read."""


class NeedsLines(Exception):
    """`read_plain` met something it leaves to `read_yaml`: a problem, or a rare construct.

    Raised for every YAML error, every limit passed, a duplicate key, an odd key or tag, a
    cyclic alias, a merge (`<<`) of something other than mappings, or a second document. The
    caller reads the text again with `read_yaml`, which reports it with its path and line (or
    reads the rare construct); `read_plain` never builds more than `YamlLimits` allow first.
    """


class _PlainFrame:
    """A mapping or list being read: its value, a pending key, merges, and its expanded size."""

    __slots__ = ("anchor", "height", "is_list", "key", "merges", "value", "values")

    def __init__(self, value: dict[Any, Any] | list[Any], anchor: str | None) -> None:
        self.value = value
        self.is_list = type(value) is list
        self.anchor = anchor
        self.key: Any = _NO_KEY
        self.merges: list[Any] | None = None
        self.values = 1
        self.height = 0


_NO_KEY = object()


def read_plain(text: str | bytes, limits: YamlLimits = SCENARIO_LIMITS) -> Any:
    """The plain data of the one YAML document in `text`, as `read_yaml` builds it, without lines.

    The fast path of the loaders: one flat loop over libyaml's events builds dicts,
    lists and scalars directly, with no node tree, marks or path-to-line table. It keeps every
    bound of `compose_bounded` (size, nesting depth, values and alias expansions, counted the
    same way and checked at the same events, before anything past them is built) and raises
    `NeedsLines` wherever `read_yaml` would report an issue, so a caller that gets data gets
    exactly what `read_yaml(text, limits).data` would be, and otherwise re-reads with it.
    """
    try:
        check_size(text, limits)
    except YamlLimitError:
        raise NeedsLines from None
    loader = _Loader(text)
    try:
        return _read_events(loader, limits)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        raise NeedsLines from None
    finally:
        loader.dispose()


def _read_events(loader: Any, limits: YamlLimits) -> Any:
    """`read_plain`'s loop: the bounded composer's counting, building values instead of nodes."""
    get = loader.get_event
    resolve = loader.resolve
    constructor = SafeConstructor()
    max_depth = limits.max_depth
    max_alias_values = limits.max_alias_values
    budget = limits.max_values
    aliased = 0
    scalars: dict[tuple[bool, bool], dict[str, Any]] = {}
    """Built plain scalars by `implicit` and text (the short ones): each is built once, and
    repeated names and numbers share one object."""
    anchors: dict[str, Any] = {}
    sizes: dict[str, tuple[int, int]] = {}
    stack: list[_PlainFrame] = []
    if type(get()) is not StreamStartEvent:
        raise NeedsLines
    if type(loader.peek_event()) is StreamEndEvent:
        raise NeedsLines  # empty: read_yaml says so
    get()  # document start
    while True:
        event = get()
        kind = type(event)
        if kind is ScalarEvent:
            anchor = event.anchor
            tag = event.tag
            text = event.value
            if tag is None or tag == "!":
                implicit = event.implicit
                known = scalars.get(implicit)
                if known is None:
                    known = scalars[implicit] = {}
                value = known.get(text, _NO_KEY)
                if value is _NO_KEY:
                    value = _scalar(constructor, resolve(ScalarNode, text, implicit), text)
                    if len(text) <= 64:
                        known[text] = value
            else:
                value = _scalar(constructor, tag, text)
            if value is _MERGE and (not stack or stack[-1].is_list or stack[-1].key is not _NO_KEY):
                raise NeedsLines  # `<<` other than as a key: a value nothing can build
            budget -= 1
            if budget < 0:
                raise NeedsLines
            if anchor is not None:
                if anchor in anchors or value is _MERGE:
                    raise NeedsLines
                anchors[anchor] = value
                sizes[anchor] = (1, 0)
            values = 1
            height = 0
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            frame = stack.pop()
            value = frame.value
            if frame.merges is not None:
                value = _merged(frame.merges, value)
                if frame.anchor is not None:
                    anchors[frame.anchor] = value
            values = frame.values
            height = frame.height + 1
            if frame.anchor is not None:
                sizes[frame.anchor] = (values, height)
        elif kind is AliasEvent:
            anchor = event.anchor
            size = sizes.get(anchor)
            if size is None:  # undefined, or inside its own anchor (a cycle)
                raise NeedsLines
            values, height = size
            if len(stack) + height > max_depth:
                raise NeedsLines
            aliased += values
            if aliased > max_alias_values:
                raise NeedsLines
            budget -= values
            if budget < 0:
                raise NeedsLines
            value = _copy_plain(anchors[anchor])
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            anchor = event.anchor
            if anchor is not None and anchor in anchors:
                raise NeedsLines
            if len(stack) >= max_depth:
                raise NeedsLines
            budget -= 1
            if budget < 0:
                raise NeedsLines
            if stack and not stack[-1].is_list and stack[-1].key is _NO_KEY:
                raise NeedsLines  # a list or mapping as a key
            container: dict[Any, Any] | list[Any] = {} if kind is MappingStartEvent else []
            if anchor is not None:
                anchors[anchor] = container  # sizes only once complete: an alias inside is a cycle
            stack.append(_PlainFrame(container, anchor))
            continue
        else:
            raise NeedsLines
        if not stack:
            break
        parent = stack[-1]
        parent.values += values
        if height > parent.height:  # noqa: PLR1730 - no call per event
            parent.height = height
        if parent.is_list:
            parent.value.append(value)
        elif parent.key is _NO_KEY:
            if height or value.__hash__ is None:
                raise NeedsLines  # a list or mapping (through an alias) as a key
            parent.key = value
        else:
            key = parent.key
            parent.key = _NO_KEY
            if key is _MERGE:
                if parent.merges is None:
                    parent.merges = []
                parent.merges.append(value)
            elif key in parent.value:
                raise NeedsLines  # a duplicate key
            else:
                parent.value[key] = value
    get()  # document end
    if type(get()) is not StreamEndEvent:
        raise NeedsLines  # a second document
    return value


def _scalar(constructor: SafeConstructor, tag: str, text: str) -> Any:
    """A plain scalar as SafeConstructor builds it; `NeedsLines` for a tag left to `read_yaml`."""
    if tag == _STR_TAG:
        return text
    if tag == _MERGE_TAG:
        return _MERGE
    build = _PLAIN_SCALARS.get(tag)
    if build is None:
        raise NeedsLines
    return build(constructor, ScalarNode(tag, text))


def _merged(merges: list[Any], explicit: dict[Any, Any]) -> dict[Any, Any]:
    """A mapping with `<<` keys as `read_yaml` builds it: merged keys first, explicit ones win."""
    result: dict[Any, Any] = {}
    for source in merges:
        for item in source if type(source) is list else [source]:
            if type(item) is not dict:
                raise NeedsLines  # a merge of something other than mappings: an issue
            for key, value in item.items():
                result.setdefault(key, value)
    for key, value in explicit.items():
        result[key] = value
    return result


def _copy_plain(value: Any) -> Any:
    """A fresh copy of an anchored value's lists and mappings, as `read_yaml` builds each alias.

    Nesting is at most `max_depth`, so recursion is bounded; the copy's size was charged.
    """
    kind = type(value)
    if kind is dict:
        return {key: _copy_plain(item) for key, item in value.items()}
    if kind is list:
        return [_copy_plain(item) for item in value]
    if value is _MERGE:
        raise NeedsLines
    return value
