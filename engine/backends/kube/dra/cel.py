"""CEL device selectors, as the API server and kube-scheduler evaluate them, with cel-python.

A selector sees one ``device``: ``device.driver``, ``device.attributes['<domain>'].<name>`` and
``device.capacity['<domain>'].<name>`` (a quantity: ``quantity('40Gi')``, ``compareTo``,
``isGreaterThan``, ``isLessThan``, ``asInteger``, as Kubernetes' CEL library names them). A
selector that does not compile, does not give a bool, or fails on a device (a missing attribute
read without ``has``) is an error the pod is told, naming the claim, the request and CEL's words,
as kube-scheduler reports it; it never quietly selects nothing.

Programs are compiled once per expression (``Selectors``): nodes' devices are many, expressions few.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes

from ....scenario.quantity import parse_memory
from .model import Device, Selector


class SelectorError(ValueError):
    """A selector that does not compile or fails on a device; the message says which and why."""


def _quantity(text: Any) -> celtypes.IntType:
    try:
        return celtypes.IntType(parse_memory(str(text)))
    except ValueError as exc:
        raise celpy.CELEvalError(f"quantity: {exc}") from None


def _compare(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((int(a) > int(b)) - (int(a) < int(b)))


_FUNCTIONS = {
    "quantity": _quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(a) > int(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(int(a) < int(b)),
    "asInteger": lambda a: celtypes.IntType(int(a)),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(int(a))),
}


def _words(error: Exception) -> str:
    text = str(error).strip()
    if isinstance(error, celpy.CELEvalError) and error.args:
        text = str(error.args[0])
        if len(error.args) > 2 and error.args[2]:
            text += f" {', '.join(str(a) for a in error.args[2])}"
    return " ".join(text.split())


def _as_cel(device: Device) -> Any:
    capacity = {d: {n: _quantity(v) for n, v in names.items()} for d, names in device.capacity.items()}
    doc = celpy.json_to_cel({"driver": device.driver, "attributes": device.attributes})
    doc[celtypes.StringType("capacity")] = celtypes.MapType(
        {celtypes.StringType(d): celtypes.MapType({celtypes.StringType(n): v for n, v in names.items()})
         for d, names in capacity.items()})
    return doc


#: how many verdicts ``Selectors`` keeps before it starts afresh (a bound on its memory when
#: many claims write selectors of their own)
VERDICTS_KEPT = 200_000


@dataclass(slots=True)
class Selectors:
    """Compiled CEL programs by expression (a compile error's words remembered too), and each device's verdict
    under a request's selectors, kept until the devices' slices change (``forget``): a CEL
    evaluation costs tens of microseconds, and every pod with claims is judged against every
    device of every node whenever it is read again."""

    env: celpy.Environment = field(default_factory=celpy.Environment)
    _programs: dict[str, Any] = field(default_factory=dict)
    #: (expressions, node, device) -> whether they select it, or (which failed, the error's words)
    _verdicts: dict[tuple[tuple[str, ...], str, str], bool | tuple[int, str]] = field(default_factory=dict)

    def forget(self) -> None:
        """The devices changed (a slice was published, replaced or withdrawn): judge them again."""
        self._verdicts.clear()

    def _program(self, selector: Selector) -> Any:
        known = self._programs.get(selector.expression)
        if known is None:
            try:
                known = self.env.program(self.env.compile(selector.expression), functions=_FUNCTIONS)
            except Exception as exc:  # celpy raises CELParseError and others on a bad expression
                known = f"compilation failed: {_words(exc)}"
            self._programs[selector.expression] = known
        if isinstance(known, str):  # the words kept; the path is that of the selector asked now
            raise SelectorError(f"{selector.path}: {known}")
        return known

    def check(self, selectors: tuple[Selector, ...]) -> None:
        """Raise ``SelectorError`` for the first selector that does not compile."""
        for s in selectors:
            self._program(s)

    def matches(self, selectors: tuple[Selector, ...], device: Device) -> bool:
        """Whether every selector selects ``device``; ``SelectorError`` when one cannot say.
        Verdicts are kept by the expressions, not where they were written: the claims one
        template made share them, and an error names the path of the selector asked now."""
        if not selectors:
            return True
        key = (tuple(s.expression for s in selectors), device.node, device.name)
        known = self._verdicts.get(key)
        if known is None:
            known = self._judge(selectors, device)
            if len(self._verdicts) >= VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[key] = known
        if isinstance(known, tuple):
            which, words = known
            raise SelectorError(f"{selectors[which].path}: {words}")
        return known

    def _judge(self, selectors: tuple[Selector, ...], device: Device) -> bool | tuple[int, str]:
        """Whether the selectors select ``device``, or (which selector failed, the error's words)."""
        self.check(selectors)  # a compile error is the selector's own, whatever the device
        activation = {"device": _as_cel(device)}
        for i, s in enumerate(selectors):
            program = self._program(s)
            try:
                result = program.evaluate(activation)
            except Exception as exc:  # noqa: BLE001 - celpy raises CELEvalError and Python errors alike
                return i, f"CEL runtime error on device {device.name} of node {device.node}: {_words(exc)}"
            if isinstance(result, celpy.CELEvalError):
                return i, f"CEL runtime error on device {device.name} of node {device.node}: {_words(result)}"
            if not isinstance(result, celtypes.BoolType):
                return i, f"the expression must give a bool, not {type(result).__name__}"
            if not result:
                return False
        return True
