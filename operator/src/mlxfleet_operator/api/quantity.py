"""Kubernetes resource quantities (`48Gi`, `512Mi`, `64G`, `1.5Ti`, `2e9`) as whole bytes.

Pure: a parser following apimachinery's grammar, `<sign><number><suffix>` with binary suffixes
Ki Mi Gi Ti Pi Ei, decimal suffixes n u m k M G T P E, or an exponent e<int>/E<int>. A fractional
number of bytes rounds up, as `resource.Quantity.Value()` does. `format_bytes` goes the other way.
May import: the standard library only. Called by: the kind models, core (placement) and the CLI.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
DECIMAL_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# Same text in Python `re` and RE2 (CEL `matches`); the CRD uses it with `^...$`.
PATTERN = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
_QUANTITY = re.compile(PATTERN)
_SPLIT = re.compile(r"(?P<number>[+-]?(?:[0-9]+[.]?[0-9]*|[.][0-9]+))(?P<suffix>.*)")
ALLOWED = (
    "a Kubernetes quantity: a number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of "
    "1024), k, M, G, T, P, E (powers of 1000) or an exponent such as e9; for example 48Gi or 512Mi"
)
MAX_LENGTH = 64


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity, or one out of the allowed range."""


def parse_decimal(value: str) -> Decimal:
    """The exact value of a quantity; raise QuantityError naming what is allowed."""
    if len(value) > MAX_LENGTH or not _QUANTITY.fullmatch(value):
        raise QuantityError(f"{value!r} is not {ALLOWED}")
    parts = _SPLIT.fullmatch(value)
    if parts is None:  # pragma: no cover - PATTERN already matched
        raise QuantityError(f"{value!r} is not {ALLOWED}")
    try:
        number = Decimal(parts["number"])
        suffix = parts["suffix"]
        if suffix in BINARY_SUFFIXES:
            return number * BINARY_SUFFIXES[suffix]
        if suffix in DECIMAL_SUFFIXES:
            return number * DECIMAL_SUFFIXES[suffix]
        exponent = int(suffix[1:])
        if abs(exponent) > 100:
            raise QuantityError(f"{value!r}: exponent {exponent} is out of range (at most 100)")
        return number.scaleb(exponent)
    except InvalidOperation as exc:  # pragma: no cover - PATTERN only admits valid decimals
        raise QuantityError(f"{value!r} is not {ALLOWED}") from exc


def parse_bytes(value: str | int, *, allow_zero: bool = False) -> int:
    """A quantity of memory or disk as whole bytes (rounded up); it must be positive.

    `allow_zero=True` admits `0` (for reservations). Negative values are always refused.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not {ALLOWED}")
    amount = Decimal(value) if isinstance(value, int) else parse_decimal(value)
    if amount < 0:
        raise QuantityError(f"{value!r} is negative: a byte quantity must be at least 0")
    if amount == 0 and not allow_zero:
        raise QuantityError(f"{value!r} is zero: a byte quantity must be positive")
    return math.ceil(amount)


def is_quantity(value: str) -> bool:
    try:
        parse_decimal(value)
    except QuantityError:
        return False
    return True


def format_bytes(count: int) -> str:
    """Bytes as the shortest exact binary quantity (`51539607552` -> `48Gi`), else plain bytes."""
    if count < 0:
        raise QuantityError(f"{count} is negative: a byte count must be at least 0")
    for suffix, factor in reversed(BINARY_SUFFIXES.items()):
        if count and count % factor == 0:
            return f"{count // factor}{suffix}"
    return str(count)


def human_bytes(count: int) -> str:
    """Bytes for people, binary suffix, at most one decimal (`68719476736` -> `64Gi`,
    `1288490188` -> `1.2Gi`); exact values lose no digits (`format_bytes` is the exact form)."""
    if count < 0:
        raise QuantityError(f"{count} is negative: a byte count must be at least 0")
    for suffix, factor in reversed(BINARY_SUFFIXES.items()):
        if count >= factor:
            value = round(count / factor, 1)
            return f"{value:g}{suffix}"
    return str(count)
