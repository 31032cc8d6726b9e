"""Kubernetes quantity parsing: the grammar of apimachinery, in whole bytes rounded up."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlxfleet_operator.api import quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("48Gi", 48 * 2**30, id="gibibytes"),
        pytest.param("512Mi", 512 * 2**20, id="mebibytes"),
        pytest.param("1Ki", 1024, id="kibibyte"),
        pytest.param("2Ti", 2 * 2**40, id="tebibytes"),
        pytest.param("1Pi", 2**50, id="pebibyte"),
        pytest.param("1Ei", 2**60, id="exbibyte"),
        pytest.param("1.5Gi", 3 * 2**29, id="fractional-binary"),
        pytest.param("64G", 64 * 10**9, id="gigabytes"),
        pytest.param("128M", 128 * 10**6, id="megabytes"),
        pytest.param("1k", 1000, id="kilo"),
        pytest.param("2T", 2 * 10**12, id="terabytes"),
        pytest.param("1P", 10**15, id="peta"),
        pytest.param("1E", 10**18, id="exa-not-exponent"),
        pytest.param("123456789", 123456789, id="plain-bytes"),
        pytest.param("2e9", 2 * 10**9, id="exponent"),
        pytest.param("2E3", 2000, id="upper-exponent"),
        pytest.param("+1Gi", 2**30, id="plus-sign"),
        pytest.param(".5Ki", 512, id="leading-dot"),
        pytest.param("1.", 1, id="trailing-dot"),
        pytest.param("1500m", 2, id="milli-rounds-up"),
        pytest.param("1n", 1, id="nano-rounds-up"),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert quantity.parse_bytes(text) == expected
    assert quantity.is_quantity(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("lots", id="word"),
        pytest.param("48GB", id="gb-suffix"),
        pytest.param("48gi", id="lowercase-binary"),
        pytest.param("48 Gi", id="inner-space"),
        pytest.param(" 48Gi", id="leading-space"),
        pytest.param("48Gi ", id="trailing-space"),
        pytest.param("", id="empty"),
        pytest.param("Gi", id="suffix-only"),
        pytest.param("1.2.3", id="two-dots"),
        pytest.param("0x10", id="hex"),
        pytest.param("1e", id="bare-exponent"),
        pytest.param("1" * 65, id="too-long"),
    ],
)
def test_not_a_quantity_names_what_is_allowed(text: str) -> None:
    with pytest.raises(quantity.QuantityError, match=r"Ki, Mi, Gi.*48Gi"):
        quantity.parse_bytes(text)
    assert not quantity.is_quantity(text)


def test_zero_and_negative() -> None:
    with pytest.raises(quantity.QuantityError, match="positive"):
        quantity.parse_bytes("0")
    assert quantity.parse_bytes("0", allow_zero=True) == 0
    assert quantity.parse_bytes("0Gi", allow_zero=True) == 0
    with pytest.raises(quantity.QuantityError, match="negative"):
        quantity.parse_bytes("-1Gi", allow_zero=True)
    with pytest.raises(quantity.QuantityError, match="exponent"):
        quantity.parse_bytes("1e999")


def test_integers_pass_through() -> None:
    assert quantity.parse_bytes(4096) == 4096
    with pytest.raises(quantity.QuantityError):
        quantity.parse_bytes(True)


def test_parse_decimal_is_exact() -> None:
    assert quantity.parse_decimal("100m") == Decimal("0.1")
    assert quantity.parse_decimal("-2Ki") == Decimal(-2048)


@pytest.mark.parametrize(
    ("count", "text"),
    [
        pytest.param(48 * 2**30, "48Gi", id="gi"),
        pytest.param(1536 * 2**20, "1536Mi", id="mi-not-fractional-gi"),
        pytest.param(2**60, "1Ei", id="ei"),
        pytest.param(1000, "1000", id="not-binary"),
        pytest.param(0, "0", id="zero"),
    ],
)
def test_format_bytes(count: int, text: str) -> None:
    assert quantity.format_bytes(count) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_format_then_parse_round_trips(count: int) -> None:
    assert quantity.parse_bytes(quantity.format_bytes(count), allow_zero=True) == count


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(sorted(quantity.BINARY_SUFFIXES)))
def test_binary_suffixes_scale(number: int, suffix: str) -> None:
    assert quantity.parse_bytes(f"{number}{suffix}") == number * quantity.BINARY_SUFFIXES[suffix]


@pytest.mark.parametrize(
    ("count", "text"),
    [
        pytest.param(68719476736, "64Gi", id="mac-mini-64g"),
        pytest.param(1288490188, "1.2Gi", id="one-decimal"),
        pytest.param(539247232, "514.3Mi", id="mebibytes"),
        pytest.param(1023, "1023", id="below-a-kibibyte"),
        pytest.param(0, "0", id="zero"),
    ],
)
def test_human_bytes(count: int, text: str) -> None:
    assert quantity.human_bytes(count) == text


@given(st.integers(min_value=1024, max_value=2**62))
def test_human_bytes_is_within_five_percent(count: int) -> None:
    text = quantity.human_bytes(count)
    number, suffix = text[:-2], text[-2:]
    assert abs(float(number) * quantity.BINARY_SUFFIXES[suffix] - count) <= 0.05 * count


def test_human_bytes_refuses_negative() -> None:
    with pytest.raises(quantity.QuantityError, match="negative"):
        quantity.human_bytes(-1)
