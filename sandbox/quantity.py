"""Kubernetes resource quantities as the API server reads and prints them (``resource.Quantity``).

The sandbox's validation (:mod:`usher.sandbox.object_validation`) needs three things of a
quantity that the engine's own parser (which turns ``500m`` into millicores for scheduling) does
not answer, and which must come from an independent reading of the grammar so that the sandbox
stays an oracle for usher's rules:

- its exact value (a :class:`~fractions.Fraction`, never a float) and whether it parses at all,
  with the grammar of apimachinery's ``ParseQuantity`` (sign, digits, an optional fraction, then
  a binary suffix ``Ki``..``Ei``, a decimal one ``n``..``E`` or an exponent ``e3``);
- its canonical text (``Quantity.String()``: ``0.5`` prints as ``500m``, ``1000`` as ``1k``),
  which kube-apiserver puts in messages such as ``must be equal to nvidia.com/gpu limit of 2``;
- the Go ``%#v`` rendering that ``field.Invalid`` falls back to for a Quantity value
  (``resource.Quantity{i:resource.int64Amount{value:5, scale:-1}, d:..., s:"", Format:"DecimalSI"}``),
  which is what ``must be an integer`` errors show.

Shaped as one frozen record (:class:`Quantity`) built by :func:`parse`, which raises
:class:`QuantityError` with the API server's wording for text it would not decode.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_NANO = Fraction(1, 10**9)
_MAX_INT64_FACTORS = 18

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+")


class QuantityError(ValueError):
    """Text that is not a quantity (the message is the API server's)."""


class Format(StrEnum):
    """``resource.Format``: how a quantity was written, and so how it prints."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


@dataclass(frozen=True, slots=True)
class Quantity:
    """A parsed quantity: its exact value and what Go keeps of the text it came from."""

    value: Fraction
    format: Format
    int_value: int | None
    """The int64 mantissa when Go keeps the value as ``int64Amount`` (``None``: an ``inf.Dec``)."""
    scale: int
    """The int64 amount's power of ten (``value == int_value * 10**scale``)."""
    cached: str
    """The text Go caches when it was already canonical (``s``), else ``""``."""

    def milli_value(self) -> int:
        """``MilliValue()``: the value in thousandths, rounded up."""
        return math.ceil(self.value * 1000)

    def is_integer(self) -> bool:
        """Whether ``MilliValue() % 1000 == 0``: the check of integer resources."""
        return self.milli_value() % 1000 == 0

    def __str__(self) -> str:
        return self.cached or canonical(self.value, self.format)

    def go_repr(self) -> str:
        """``fmt.Sprintf("%#v", q)``, as ``field.Invalid`` prints a Quantity value."""
        if self.int_value is not None:
            i = f"resource.int64Amount{{value:{self.int_value}, scale:{self.scale}}}"
            d = "resource.infDecAmount{Dec:(*inf.Dec)(nil)}"
        else:
            i = "resource.int64Amount{value:0, scale:0}"
            d = "resource.infDecAmount{Dec:(*inf.Dec)(0xc000000000)}"
        return f'resource.Quantity{{i:{i}, d:{d}, s:"{self.cached}", Format:"{self.format}"}}'


def parse(raw: object) -> Quantity:
    """A quantity from JSON (a string, or a number as a bare JSON token)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(FORMAT_ERROR)
    text = raw.strip() if isinstance(raw, str) else _number_text(raw)
    if not text:
        raise QuantityError(FORMAT_ERROR)
    if text == "0":
        return Quantity(Fraction(0), Format.DECIMAL_SI, 0, 0, "0")
    positive, num, denom, suffix = _split(text)
    base, exponent, fmt = _suffix(suffix)
    magnitude = Fraction(int(num + denom), 10 ** len(denom))
    if base == 10:
        exact = magnitude * Fraction(10) ** exponent
    else:
        exact = magnitude * (1 << exponent)
    # the int64 fast path of ParseQuantity, and whether it keeps the text as canonical
    if fmt is Format.BINARY_SI:
        scale, mantissa = 0, 1 << exponent if exponent >= 0 and not denom else 0
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if mantissa else -1
    else:
        scale, mantissa = exponent, 1
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            shifted = num + denom
            amount = int(shifted) * mantissa
            if amount < 2**63:
                signed = amount if positive else -amount
                if fmt is Format.BINARY_SI:
                    canonical_text = exponent % 10 == 0 and (int(shifted) & 0x07) != 0
                else:
                    canonical_text = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(Fraction(signed) * Fraction(10) ** scale, fmt, signed, scale, text if canonical_text else "")
    # the inf.Dec path: rounded up to whole nanos, as Go does
    if exact != 0 and (exact / _NANO).denominator != 1:
        exact = Fraction(math.ceil(exact / _NANO)) * _NANO
    if fmt is Format.BINARY_SI and 0 < exact < 1:
        fmt = Format.DECIMAL_SI
    return Quantity(exact if positive else -exact, fmt, None, 0, "")


def _number_text(raw: int | float) -> str:
    if isinstance(raw, int):
        return str(raw)
    text = repr(raw)
    return text[:-2] if text.endswith(".0") else text


def _split(text: str) -> tuple[bool, str, str, str]:
    """(positive, numerator digits without leading zeros, fraction digits, suffix), as
    ``parseQuantityString`` splits them."""
    pos, end = 0, len(text)
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[start:pos]
    suffix = text[pos:]
    if suffix and not re.fullmatch(r"[eEinumkKMGTP]*[-+]?[0-9]*", suffix):
        raise QuantityError(FORMAT_ERROR)
    return positive, num, denom, suffix


def _suffix(suffix: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix; ``unable to parse quantity's suffix`` otherwise."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if suffix[:1] in ("e", "E") and _SIGNED_DIGITS.fullmatch(suffix[1:]):
        return 10, int(suffix[1:]), Format.DECIMAL_EXPONENT
    raise QuantityError("unable to parse quantity's suffix")


def canonical(value: Fraction, fmt: Format) -> str:
    """``Quantity.String()`` of a value with no cached text: the shortest form without
    fractional digits (``500m``, ``1k``, ``1536Mi``)."""
    if value == 0:
        return "0"
    if fmt is Format.BINARY_SI and -1024 < value < 1024:
        fmt = Format.DECIMAL_SI
    if fmt is Format.BINARY_SI and value.denominator != 1:
        fmt = Format.DECIMAL_SI
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if fmt is Format.BINARY_SI:
        number, exponent = int(magnitude), 0
        while number % 1024 == 0 and exponent < 60:
            number //= 1024
            exponent += 10
        suffix = next((k for k, v in _BINARY_SUFFIXES.items() if v == exponent), "")
        return f"{sign}{number}{suffix}"
    # a whole mantissa and a power of ten that is a multiple of 3, as AsCanonicalBytes
    exponent = 0
    while magnitude.denominator != 1:
        magnitude *= 10
        exponent -= 1
    number = int(magnitude)
    while number and number % 10 == 0:
        number //= 10
        exponent += 1
    while exponent % 3:
        number *= 10
        exponent -= 1
    if fmt is Format.DECIMAL_EXPONENT:
        return f"{sign}{number}" + (f"e{exponent}" if exponent else "")
    suffix = next((k for k, v in _DECIMAL_SUFFIXES.items() if v == exponent), None)
    return f"{sign}{number}{suffix}" if suffix is not None else f"{sign}{number}e{exponent}"
